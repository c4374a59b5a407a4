"""The roles a stack's ``pulumi up`` needs, from what its program registers: ``python -m gke_ray_tpu.stack.permissions``.

Runs the stack's program against the mock engine (as the offline preview does), takes every type it registers, every
object it reads and every invoke it makes, and looks each up in :mod:`gke_ray_tpu.core.permissions`. Prints the
predefined roles that grant all of it; ``--custom-role`` prints instead a least-privilege custom role of exactly
those permissions, for ``gcloud iam roles create <id> --project <project> --file <file>`` (a custom role cannot
hold the Kubernetes objects GKE's IAM names no permission for: those need RBAC, said in its comments).
``--check-roles DIR`` checks the role table against Google's own definitions, one
``gcloud iam roles describe roles/<role> --format=json > DIR/<role>.json`` per role.

    python -m gke_ray_tpu.stack.permissions [--stack dev | --config-file FILE] [--custom-role]
    python -m gke_ray_tpu.stack.permissions --check-roles DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

from gke_ray_tpu.core import REPO_ROOT, permissions
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.exit_status import NO, OK, run_command
from gke_ray_tpu.stack.mock_engine import OfflineRun, load_stack_file, run_offline

PROG = "python -m gke_ray_tpu.stack.permissions"


def run_needs(run: OfflineRun) -> dict[str, frozenset[str]]:
    """What a run of the program needs: a KeyError names a type or invoke the table lacks."""
    return permissions.needs({r.type for r in run.resources}, set(run.reads), set(run.invokes))


def roles_section(run: OfflineRun) -> str:
    """Preview's section: the predefined roles this stack's ``pulumi up`` (and ``destroy``) needs, and what for."""
    required = run_needs(run)
    lines = ["Roles the deploying identity needs (pulumi up, refresh and destroy; python -m gke_ray_tpu.stack.permissions "
             "--custom-role for the least-privilege custom role):"]
    lines += [f"  {role.name:36s} on {role.scope}: {role.purpose}" for role in permissions.roles_for(required)]
    return "\n".join(lines)


def roles_table() -> str:
    """docs/deploy.md's table of the roles, from the role table: each role, where it is granted, which stacks need it,
    and the types (and invokes) of the stack it is chosen for (:func:`~gke_ray_tpu.core.permissions.roles_for` of
    each type alone)."""
    chosen: dict[str, list[str]] = {}
    entries = {**permissions.RESOURCES, **permissions.INVOKES}
    shown = {name: "the Kubernetes provider" if name.startswith("pulumi:providers:") else f"`{name.split(':')[-1]}`"
             for name in entries}
    for name in sorted(entries, key=lambda name: shown[name].lower()):
        for role in permissions.roles_for({name: entries[name].permissions()}):
            chosen.setdefault(role.name, []).append(shown[name])
    rows = ["| role | granted on | needed by | for |", "|---|---|---|---|"]
    for role in permissions.ROLES:
        types = chosen.get(role.name, []) + (["every Kubernetes object"] if role.kubernetes_objects else [])
        rows.append(f"| `{role.name}` | {role.scope} | {role.when} | {role.purpose}: {', '.join(types)} |")
    return "\n".join(rows)


def custom_role(run: OfflineRun, stack: str) -> str:
    """A custom role of exactly the IAM permissions the stack needs, as ``gcloud iam roles create --file`` reads it."""
    required = sorted({p for ps in run_needs(run).values() for p in ps})
    iam = [p for p in required if not p.startswith(permissions.RBAC)]
    rbac = [p.removeprefix(permissions.RBAC) for p in required if p.startswith(permissions.RBAC)]
    lines = [f"# The permissions gke-ray-tpu/{stack}'s pulumi up, refresh and destroy need ({PROG}).",
             f"# iam.serviceAccounts.actAs is checked on the nodes' service account; grant the role where it applies."]
    if rbac:
        lines.append("# Also needed, and not grantable by IAM: Kubernetes RBAC for " + ", ".join(rbac)
                     + " (a ClusterRole bound to the deployer, or roles/container.admin).")
    lines += [f"title: gke-ray-tpu deployer ({stack})", "stage: GA", "includedPermissions:"]
    lines += [f"- {p}" for p in iam]
    return "\n".join(lines)


def check_roles(directory: Path) -> list[str]:
    """Where the role table claims a permission Google's definition of the role (``<role>.json`` in ``directory``,
    as ``gcloud iam roles describe`` writes it) lacks; a missing file is a line too."""
    problems = []
    for role in permissions.ROLES:
        path = directory / f"{role.name.removeprefix('roles/')}.json"
        try:
            included = set(json.loads(path.read_text())["includedPermissions"])
        except (OSError, ValueError, KeyError) as error:
            problems.append(f"{role.name}: no role definition at {path} ({type(error).__name__})")
            continue
        problems += [f"{role.name} does not include {p}" for p in sorted(role.grants - included)]
    return problems


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--stack", default="dev", help="read Pulumi.<stack>.yaml (default: dev)")
    source.add_argument("--config-file", type=Path, help="a Pulumi.<stack>.yaml anywhere")
    source.add_argument("--check-roles", type=Path, metavar="DIR",
                        help="check the role table against gcloud iam roles describe's JSON, one <role>.json per role")
    parser.add_argument("--custom-role", action="store_true", help="print a least-privilege custom role instead")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    return run_command(PROG, lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    if args.check_roles is not None:
        problems = check_roles(args.check_roles)
        print("\n".join(problems) or f"every role of the table includes the permissions it is counted for "
              f"({len(permissions.ROLES)} roles)")
        return NO if problems else OK
    path = args.config_file or REPO_ROOT / f"Pulumi.{args.stack}.yaml"
    if not path.is_file():
        flag, value = ("--config-file", str(path)) if args.config_file else ("--stack", args.stack)
        raise ConfigError(flag, value, f"a stack whose file exists (no stack file {path})")
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    run = run_offline(load_stack_file(path), stack=stack)
    print(custom_role(run, stack) if args.custom_role else roles_section(run))
    return OK


if __name__ == "__main__":
    sys.exit(main())
