"""Run the whole policy pack on one resource, as a test would like to ask it (the engine goes through PolicyPack)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Mapping, Optional

from pulumi_policy import (
    PolicyCustomTimeouts, PolicyResource, PolicyResourceOptions, ResourceValidationArgs, ResourceValidationPolicy,
    StackValidationArgs,
)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from policy.policies import POLICIES, parse_urn  # noqa: E402


OPTIONS = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], None)


def evaluate(
    resource_type: str,
    props: Mapping[str, Any],
    urn: str,
    name: Optional[str] = None,
    config: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> dict[str, list[str]]:
    """Run every resource policy on one resource; ``{policy name: [messages]}`` for those that reported.

    ``config`` is keyed by policy name, as in a ``--policy-pack-config`` file.
    """
    found: dict[str, list[str]] = {}
    for policy in POLICIES:
        if not isinstance(policy, ResourceValidationPolicy):
            continue
        messages: list[str] = []
        args = ResourceValidationArgs(
            resource_type,
            props,
            urn,
            name if name is not None else parse_urn(urn)[3],
            OPTIONS,
            None,
            dict((config or {}).get(policy.name, {})),
        )
        policy.validate(args, lambda message, _urn=None, sink=messages: sink.append(message))
        if messages:
            found[policy.name] = messages
    return found


def evaluate_stack(
    resources: list[tuple[str, Mapping[str, Any], str, str]], config: Optional[Mapping[str, Mapping[str, Any]]] = None
) -> dict[tuple[str, str], list[str]]:
    """Run every stack policy on ``(type, props, urn, name)`` resources; ``{(policy, urn): [messages]}``."""
    stack = [PolicyResource(type_, props, urn, name, OPTIONS, None, None, [], {}) for type_, props, urn, name in resources]
    found: dict[tuple[str, str], list[str]] = {}
    for policy in POLICIES:
        if isinstance(policy, ResourceValidationPolicy):
            continue
        args = StackValidationArgs(stack, dict((config or {}).get(policy.name, {})))
        policy.validate(args, lambda message, urn=None, name=policy.name: found.setdefault((name, urn or ""), []).append(message))
    return found
