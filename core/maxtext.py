"""The MaxText keys this project reads or reasons about, in one typed form.

MaxText merges its ``base.yml``, a model overlay and the ``key=value`` items of
its command line; OmegaConf types command-line values as YAML scalars (``4`` is
an int, ``1e-3`` a float, ``true`` a bool). Presets, stack config and the job
spec hold MaxText settings as such typed values. Text becomes a value once, at
the edge (:func:`parse_value`, for ``key=value`` typed on a command line), and a
value becomes text once, when the trainer's command line is rendered
(:func:`render`).

:data:`BASE_DEFAULTS` are MaxText 0.2.5's ``base.yml`` values of the keys the
estimates and the submit command read (``tests/test_core_maxtext.py`` compares
them, and the value vocabularies below, with the installed MaxText).
:func:`check_settings` applies the type and range rule of each of those keys,
so a zero batch size or a fractional step count is refused before a job or a
preview uses it, and :func:`check_known` applies the installed MaxText's own
vocabulary: its config keys, model names and model overlays (:func:`installed`).
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib.util
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Union

import yaml

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.parallelism import mesh_values

Value = Union[str, int, float, bool]

BASE_DEFAULTS: dict[str, Value] = {
    "model_name": "default",
    "per_device_batch_size": 12.0,
    "max_target_length": 2048,
    "steps": 150_001,
    "checkpoint_period": 10_000,
    "remat_policy": "full",
    "weight_dtype": "float32",
    "dtype": "bfloat16",
    "grad_dtype": "float32",
    "mu_dtype": "",
    "opt_type": "adamw",
}

DTYPES = ("bfloat16", "float32", "float16", "float8_e4m3fn", "float8_e5m2")
"""MaxText's ``DType`` values (``configs/types.py``)."""
REMAT_POLICIES = (
    "full",
    "none",
    "minimal",
    "minimal_with_context",
    "minimal_flash",
    "minimal_with_quantization",
    "minimal_with_context_and_quantization",
    "save_dot_with_context_except_mlp",
    "save_dot_except_mlpwi",
    "save_dot_except_mlp",
    "save_qkv_proj",
    "qkv_proj_offloaded",
    "minimal_offloaded",
    "custom",
    "save_out_proj",
)
"""The policies MaxText's decoder accepts (``get_remat_policy``: anything else fails an assertion)."""
OPTIMIZERS = ("adamw", "adam_pax", "sgd", "muon")
"""MaxText's ``OptimizerType`` values."""


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _one_of(choices: tuple[str, ...], allow_empty: bool = False) -> tuple[Callable[[object], bool], str]:
    shown = ", ".join(choices) + (" or '' (inherit)" if allow_empty else "")
    return (lambda value: value in choices or (allow_empty and value == "")), f"one of {shown}"


RULES: dict[str, tuple[Callable[[object], bool], str]] = {
    "model_name": (lambda value: isinstance(value, str) and bool(value), "a MaxText model name"),
    "per_device_batch_size": (lambda value: _number(value) and value > 0, "a number > 0"),
    "max_target_length": (_positive_int, "an integer >= 1"),
    "steps": (_positive_int, "an integer >= 1 (the submit command counts the steps)"),
    "checkpoint_period": (_positive_int, "an integer >= 1"),
    "remat_policy": _one_of(REMAT_POLICIES),
    "weight_dtype": _one_of(DTYPES),
    "dtype": _one_of(DTYPES),
    "grad_dtype": _one_of(DTYPES),
    "mu_dtype": _one_of(DTYPES, allow_empty=True),
    "opt_type": _one_of(OPTIMIZERS),
}
"""key -> (rule, what a valid value is)."""


def check_settings(values: Mapping[str, object], key: Callable[[str], str] = lambda name: name) -> None:
    """Raise ConfigError for the first value that breaks its key's rule.

    ``key`` turns a MaxText key into the name the user set it under (for a
    stack: ``gke-ray-tpu:plannedOverrides.steps``). Mesh keys get the sharding
    check's own value rule (an integer >= 1, or -1).
    """
    check_known(values, key)
    for name, value in values.items():
        rule = RULES.get(name)
        if rule is not None and not rule[0](value):
            raise ConfigError(key(name), value, rule[1])
    for kind in ("ici", "dcn"):
        try:
            mesh_values(values, kind)
        except ConfigError as error:
            raise error.renamed(key(error.key)) from None


# -- the installed MaxText's vocabulary -------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    """What the installed MaxText's config loader (``pyconfig.initialize``) accepts, read from its files."""

    configs: Path
    """Its ``configs`` directory: ``base.yml``, ``types.py``, ``models/<model_name>.yml``."""
    settings: frozenset[str]
    """The keys of ``base.yml``: what a run sets, and what "did you mean" offers."""
    keys: frozenset[str]
    """Every key pyconfig takes: the fields of its pydantic ``MaxTextConfig``, a superset of base.yml's
    (values it derives, such as ``emb_dim``, and keys of other modes, such as ``vllm_*``)."""
    models: frozenset[str]
    """The ``model_name`` values ``MaxTextConfig`` accepts (its ``ModelName``)."""


def configs_dir() -> Optional[Path]:
    """The installed MaxText's ``configs`` directory (``base.yml``, ``models/``), found without importing it."""
    spec = importlib.util.find_spec("maxtext")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "configs"


@functools.cache
def installed() -> Optional[Installed]:
    """The installed MaxText's vocabulary; None where MaxText is not installed, or not laid out as 0.2.5 is.

    The Pulumi program's own dependencies (pyproject.toml) do not include MaxText
    (requirements.txt installs it); without it nothing is checked here, and
    MaxText checks on the workers. Nothing of MaxText is imported: its
    ``types.py`` imports JAX (seconds), so its names are read from the source.
    """
    configs = configs_dir()
    if configs is None or not ((configs / "base.yml").is_file() and (configs / "types.py").is_file()):
        return None
    module = ast.parse((configs / "types.py").read_text())
    fields, models = _fields(module, "MaxTextConfig"), _literal(module, "ModelName")
    if not (fields and models):
        return None  # not checked rather than checked against the wrong names
    settings = frozenset(_load_yaml(configs / "base.yml"))
    return Installed(configs, settings, settings | fields, models)


def _load_yaml(path: Path) -> dict:
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


def _fields(module: ast.Module, name: str) -> frozenset[str]:
    """A pydantic model's field names: the annotated names of its class body and of its bases' (in ``module``)."""
    classes = {node.name: node for node in module.body if isinstance(node, ast.ClassDef)}
    node = classes.get(name)
    if node is None:
        return frozenset()
    own = {
        item.target.id for item in node.body
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and not item.target.id.startswith("_")
    }
    return frozenset(own).union(*(_fields(module, base.id) for base in node.bases if isinstance(base, ast.Name)))


def _literal(module: ast.Module, name: str) -> frozenset[str]:
    """The strings of a module-level ``name = Literal[...]``."""
    for node in module.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return frozenset(c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str))
    return frozenset()


def _did_you_mean(word: str, choices: frozenset[str], otherwise: str) -> str:
    close = difflib.get_close_matches(word, sorted(choices), n=3, cutoff=0.7)
    return f": did you mean {' or '.join(close)}?" if close else otherwise


def check_known(values: Mapping[str, object], key: Callable[[str], str] = lambda name: name) -> None:
    """Refuse what the installed MaxText's config loader would refuse once the job runs.

    pyconfig raises for a key that is no field of its ``MaxTextConfig``, for a
    ``model_name`` outside its ``ModelName``, and for a key the model's overlay
    (``models/<model_name>.yml``) sets to another value unless
    ``override_model_config`` is true. Skipped without MaxText (:func:`installed`).
    """
    maxtext = installed()
    if maxtext is None:
        return
    for name, value in values.items():
        if name not in maxtext.keys:
            hint = _did_you_mean(name, maxtext.settings, f" (the keys of {maxtext.configs / 'base.yml'})")
            raise ConfigError(key(name), value, f"a key of MaxText's config{hint}")
    model = values.get("model_name")
    if model is None:
        return
    if model not in maxtext.models:
        hint = _did_you_mean(str(model), maxtext.models, f" (one of {', '.join(sorted(maxtext.models))})")
        raise ConfigError(key("model_name"), model, f"a MaxText model_name{hint}")
    if values.get("override_model_config") is not True:
        _check_overlay(values, _overlay_path(maxtext.configs, str(model)), key)


def _overlay_path(configs: Path, model: str) -> Path:
    """The model's overlay, as pyconfig names it (an ``-Instruct`` variant shares its base model's)."""
    return configs / "models" / f"{model.replace('-Instruct', '')}.yml"


def resolved_config(values: Mapping[str, object]) -> Optional[dict]:
    """The config a run trains with, in MaxText's merge order: ``base.yml``, then the overlay of its
    ``model_name`` (``models/<model_name>.yml``), then the run's own keys. None without MaxText.

    The run's keys win over the overlay's: :func:`check_known` has already refused a conflict
    unless ``override_model_config`` is true, where MaxText lets the run's keys win too.
    ``logical_axis_rules`` are merged rule by rule, as pyconfig merges them: a later list's rule
    replaces the earlier rules of the same logical axis (``llama2-7b.yml``'s ``['norm', 'fsdp']``
    replaces base.yml's ``norm`` rule and keeps the others), or the whole list where that list's
    config sets ``override_logical_axis_rules``.
    """
    maxtext = installed()
    if maxtext is None:
        return None
    base = _cached_yaml(maxtext.configs / "base.yml")
    merged = dict(base)
    overlay = model_overlay(str(values.get("model_name", merged.get("model_name"))))
    layers = [base] + ([_cached_yaml(overlay)] if overlay is not None else []) + [values]
    rules: list = []
    for layer in layers:
        merged.update(layer)
        rules = _merged_rules(rules, layer.get("logical_axis_rules") or [], bool(layer.get("override_logical_axis_rules")))
    merged["logical_axis_rules"] = rules
    return merged


def _merged_rules(rules: list, new: list, override: bool) -> list:
    """pyconfig's ``_apply_rules``: ``new`` replaces every rule of the logical axes it names (all of ``rules``
    when ``override``)."""
    if override or not rules:
        return list(new)
    if not new:
        return rules
    named = {rule[0] for rule in new}
    return [rule for rule in rules if rule[0] not in named] + list(new)


def model_overlay(model: str) -> Optional[Path]:
    """The installed MaxText's ``models/<model>.yml``; None without MaxText or without that file
    (``default`` is base.yml's own shape; a few ``ModelName`` values have no file)."""
    maxtext = installed()
    if maxtext is None:
        return None
    path = _overlay_path(maxtext.configs, model)
    return path if path.is_file() else None


@functools.cache
def _cached_yaml(path: Path) -> dict:
    # base.yml is 1,500 lines; a preview or a property test resolves many configs.
    return _load_yaml(path)


def _check_overlay(values: Mapping[str, object], path: Path, key: Callable[[str], str]) -> None:
    """MaxText refuses a key set both by the model's overlay and on its command line, to different values."""
    if not path.is_file():
        return
    model = values["model_name"]
    for name, fixed in _load_yaml(path).items():
        mine, theirs = _as_typed(values.get(name)), _as_typed(fixed)
        if mine is not None and theirs is not None and mine != theirs:
            raise ConfigError(
                key(name), values[name],
                f"unset or {render(theirs)}: model_name={model} sets it (MaxText refuses both unless override_model_config=true)",
            )


def _as_typed(value: object) -> Optional[Value]:
    """A scalar as MaxText's command line types it (YAML's ``1e-5`` is text to PyYAML, a float to MaxText);
    None for anything else, which is not compared."""
    if isinstance(value, (str, int, float, bool)):
        return parse_value(render(value))
    return None


# No leading zeros: YAML 1.1 would read 010 as octal 8, so such text stays text (and fails a count's rule).
_INT = re.compile(r"[-+]?(0|[1-9][0-9]*(_[0-9]+)*)")
_FLOAT = re.compile(r"[-+]?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")


def parse_value(text: str) -> Value:
    """A command-line value as MaxText's parser types it: int, float, bool or text."""
    if _INT.fullmatch(text):
        return int(text.replace("_", ""))
    if _FLOAT.fullmatch(text):
        return float(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def render(value: Value) -> str:
    """A typed value as ``key=value`` text that parses back to the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)
