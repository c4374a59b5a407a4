"""Run the whole policy pack on one resource, as a test would like to ask it (the engine goes through PolicyPack)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Mapping, Optional

from pulumi_policy import PolicyCustomTimeouts, PolicyResourceOptions, ResourceValidationArgs

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from policy.policies import POLICIES, parse_urn  # noqa: E402


def evaluate(
    resource_type: str,
    props: Mapping[str, Any],
    urn: str,
    name: Optional[str] = None,
    config: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> dict[str, list[str]]:
    """Run every policy on one resource; ``{policy name: [messages]}`` for those that reported.

    ``config`` is keyed by policy name, as in a ``--policy-pack-config`` file.
    """
    opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], None)
    found: dict[str, list[str]] = {}
    for policy in POLICIES:
        messages: list[str] = []
        args = ResourceValidationArgs(
            resource_type,
            props,
            urn,
            name if name is not None else parse_urn(urn)[3],
            opts,
            None,
            dict((config or {}).get(policy.name, {})),
        )
        policy.validate(args, lambda message, _urn=None, sink=messages: sink.append(message))
        if messages:
            found[policy.name] = messages
    return found
