"""The CRDs' own CEL rules (``x-kubernetes-validations``), run on an object as the API server runs them.

The vendored CRDs (``tests/crds``: KubeRay v1.7.0, Kueue v0.19.2) carry CEL rules that ``jsonschema`` does not
run. Each is compiled once per session with the CEL library ``common-expression-language`` (PyPI; the Rust
``cel`` crate) and evaluated the way the API server's ``apiextensions-apiserver`` evaluates it
(``pkg/apiserver/schema/cel/validation.go``):

* on the object after structural defaulting (each schema ``default`` filled in where the field is missing, then
  defaults inside it), so a rule may read a defaulted field (ClusterQueue's ``preemption.reclaimWithinCohort``);
* at every node of the object whose schema node carries rules, with ``self`` that node's value; at the root,
  ``metadata`` holds only ``name`` and ``generateName``;
* a transition rule (one that reads ``oldSelf``) only on an update, and only where the old object has the node:
  properties of objects and values of maps correlate; list items are not correlated here, and no vendored
  transition rule lies under a list (:func:`rules_of` refuses such a rule, so none is left out unnoticed);
* a rule that returns false refuses the object with its ``message``; one that raises (a missing field, a type
  error) refuses it too, as the API server reports an evaluation error.

A rule the library cannot evaluate (it cannot compile it, or lacks a function it calls: Kubernetes' own
libraries, such as ``quantity``, ``isSorted``, ``format``, are not in it) is listed in :data:`NOT_EVALUABLE` with
the reason; such a rule outside the list raises :class:`LibraryGap` instead of passing, and
``tests/test_crd_rules.py`` checks that the list is exactly the rules that fail to compile or evaluate. None of
the vendored CRDs' rules calls a Kubernetes library function or uses ``messageExpression``, so no extension
function is registered.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

import cel

CRDS = Path(__file__).resolve().parent / "crds"
ITEMS, VALUES = "[]", "{}"
"""Path steps into a list's items and a map's values (``items``, ``additionalProperties``)."""
HANDLED_KEYS = {"rule", "message"}
"""The keys of a rule the evaluator handles. A rule with others (``messageExpression``, ``reason``,
``fieldPath``, ``optionalOldSelf``) is not evaluable here until they are handled."""
NOT_EVALUABLE: dict[tuple[str, str, str], str] = {}
"""(CRD file, path, rule) -> why the rule is not evaluated. Empty: every rule of the vendored CRDs compiles and
evaluates (tests/test_crd_rules.py)."""


class LibraryGap(Exception):
    """A rule outside :data:`NOT_EVALUABLE` that the CEL library could not compile or evaluate."""

    def __init__(self, rule: "Rule", why: str):
        self.rule = rule
        super().__init__(f"{rule.crd} {rule.where}: {rule.rule!r}: {why}")


@dataclass(frozen=True)
class Rule:
    crd: str
    """The CRD's file name under tests/crds."""
    path: tuple[str, ...]
    """Where the rule sits in the schema: property names, ITEMS and VALUES."""
    rule: str
    message: str
    program: Optional[cel.Program]
    """The compiled rule; None where it is not evaluable."""
    why_not: Optional[str]
    """Why it is not evaluable (the library's error), or None."""
    transition: bool
    """Whether it reads ``oldSelf``."""
    type: str
    """The schema type of its node (what the API server's error shows as the invalid value)."""

    @property
    def where(self) -> str:
        return dotted(self.path)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.crd, self.where, self.rule)


@dataclass(frozen=True)
class Violation:
    rule: Rule
    field: str
    """Where in the object: ``spec.podSets[1]``; ``<nil>`` at the root (``field.Path``'s word for no path)."""
    error: Optional[str]
    """The evaluation error, where the rule raised rather than returned false."""

    @property
    def detail(self) -> str:
        return f"{self.rule.message} (evaluation error: {self.error})" if self.error else self.rule.message

    def __str__(self) -> str:
        """The API server's field error: ``spec.managedBy: Invalid value: "string": <the rule's message>``."""
        return f'{self.field}: Invalid value: "{self.rule.type}": {self.detail}'


def dotted(path: Iterable[str]) -> str:
    text = ""
    for step in path:
        text += step if step in (ITEMS, VALUES) else (f".{step}" if text else step)
    return text


@functools.cache
def crd_schema(crd: str, version: str) -> dict:
    """The ``openAPIV3Schema`` of one served version of a vendored CRD (``kuberay/ray.io_rayjobs.json``)."""
    for served in json.loads((CRDS / crd).read_text())["spec"]["versions"]:
        if served["name"] == version:
            return served["schema"]["openAPIV3Schema"]
    raise LookupError(f"{crd} serves no version {version}")


@functools.cache
def rules_of(crd: str, version: str) -> tuple[Rule, ...]:
    """Every rule of the CRD's version, compiled once for the session (the cache is the module's)."""
    found = []
    for path, node in _schema_nodes(crd_schema(crd, version), ()):
        for spec in node.get("x-kubernetes-validations") or ():
            found.append(compile_rule(crd, path, spec, node.get("type", "object")))
    return tuple(found)


def _schema_nodes(node: dict, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], dict]]:
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from _schema_nodes(child, (*path, name))
    if isinstance(node.get("items"), dict):
        yield from _schema_nodes(node["items"], (*path, ITEMS))
    if isinstance(node.get("additionalProperties"), dict):
        yield from _schema_nodes(node["additionalProperties"], (*path, VALUES))


def compile_rule(crd: str, path: tuple[str, ...], spec: dict, type_: str = "object") -> Rule:
    """One ``x-kubernetes-validations`` entry, compiled; ``why_not`` says why it cannot be evaluated, if so."""
    rule, message = spec["rule"], spec.get("message") or f"failed rule: {spec['rule']}"
    why_not = program = None
    try:
        program = cel.compile(rule)
    except ValueError as e:
        why_not = f"does not compile: {e}"
    transition = "oldSelf" in program.references()["variables"] if program else "oldSelf" in rule
    unhandled = sorted(set(spec) - HANDLED_KEYS)
    if unhandled:
        why_not = f"the evaluator does not handle {', '.join(unhandled)}"
    elif transition and ITEMS in path:
        why_not = "a transition rule under a list item: list items are not correlated here"
    return Rule(crd, path, rule, message, None if why_not else program, why_not, transition, type_)


def apply_defaults(value, schema: dict):
    """``value`` as the API server stores a custom resource: a null property that is not ``nullable`` dropped
    (``structuraldefaulting.PruneNonNullableNullsWithoutDefaults``), then a missing property with a ``default``
    given it, and defaults applied inside (``structuraldefaulting.Default``)."""
    if isinstance(value, dict):
        properties = schema.get("properties")
        if properties is not None:
            for name, child in properties.items():
                if name in value and value[name] is None and not child.get("nullable"):
                    del value[name]
                if name not in value and "default" in child:
                    value[name] = copy.deepcopy(child["default"])
            for name, item in value.items():
                if name in properties:
                    apply_defaults(item, properties[name])
        elif isinstance(schema.get("additionalProperties"), dict):
            for item in value.values():
                apply_defaults(item, schema["additionalProperties"])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])
    return value


_MISSING = object()
UNDEFINED = "Undefined variable or function"
"""How the library's RuntimeError begins for a name it does not know: a function it lacks."""


def violations(obj: dict, crd: str, version: str, old: Optional[dict] = None) -> list[Violation]:
    """The CRD's rules that refuse ``obj`` (a create; an update of ``old`` where given). Raises
    :class:`LibraryGap` for a rule the library fails on that :data:`NOT_EVALUABLE` does not list."""
    schema = crd_schema(crd, version)
    new = apply_defaults(_root(obj), schema)
    previous = apply_defaults(_root(old), schema) if old is not None else _MISSING
    by_path: dict[tuple[str, ...], list[Rule]] = {}
    for rule in rules_of(crd, version):
        by_path.setdefault(rule.path, []).append(rule)
    found: list[Violation] = []
    for path, field, value, old_value in _nodes(new, previous, (), "", set(_prefixes(by_path))):
        for rule in by_path.get(path, ()):
            problem = evaluate(rule, value, old_value)
            if problem is not True:
                found.append(Violation(rule, field or "<nil>", problem or None))
    return found


def _root(obj: Optional[dict]) -> Optional[dict]:
    """The object as a root rule sees it: of ``metadata``, only ``name`` and ``generateName``."""
    if obj is None:
        return None
    root = copy.deepcopy(obj)
    if isinstance(root.get("metadata"), dict):
        root["metadata"] = {k: v for k, v in root["metadata"].items() if k in ("name", "generateName")}
    return root


def _prefixes(paths: Iterable[tuple[str, ...]]) -> Iterator[tuple[str, ...]]:
    for path in paths:
        for end in range(len(path) + 1):
            yield path[:end]


def _nodes(value, old, path: tuple[str, ...], field: str, wanted: set):
    """(schema path, field path, value, old value or _MISSING) of every node on the way to a rule."""
    if path not in wanted:
        return
    yield path, field, value, old
    if isinstance(value, dict):
        for name, item in value.items():
            step = name if (*path, name) in wanted else VALUES
            if (*path, step) in wanted:
                before = old.get(name, _MISSING) if isinstance(old, dict) else _MISSING
                yield from _nodes(item, before, (*path, step), f"{field}.{name}" if field else name, wanted)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _nodes(item, _MISSING, (*path, ITEMS), f"{field}[{index}]", wanted)


def evaluate(rule: Rule, value, old=_MISSING) -> "bool | str":
    """True (the rule holds, or does not apply), False (it refuses) or the evaluation error that refuses.
    ``old``: the node's value before an update."""
    if rule.key in NOT_EVALUABLE:
        return True
    if rule.why_not is not None:
        raise LibraryGap(rule, rule.why_not)
    if rule.transition and old is _MISSING:
        return True  # a transition rule applies to updates of a node the old object had
    context = {"self": value} if old is _MISSING else {"self": value, "oldSelf": old}
    try:
        result = rule.program.execute(context)
    except RuntimeError as e:
        if str(e).startswith(UNDEFINED):
            raise LibraryGap(rule, str(e)) from None
        return f"{type(e).__name__}: {e}"  # a function's own error (int('x')): the API server's evaluation error
    except (KeyError, TypeError, ValueError, ZeroDivisionError, OverflowError) as e:
        return f"{type(e).__name__}: {e}"
    if not isinstance(result, bool):
        return f"the rule gave {result!r}, not a bool"
    return result
