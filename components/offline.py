"""Run the stack program with Pulumi's mock engine: no CLI, no cloud, no credentials.

Used by the unit tests and by ``python -m components.plan``. Every resource the
program registers is recorded with its inputs *and* the options the standard
mocks hide (parent, explicit dependencies, provider, retain-on-delete), so tests
can assert on the dependency graph and on what ``pulumi destroy`` would do.
"""

from __future__ import annotations

import contextvars
import json
import logging
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime import config as runtime_config
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

REPO_ROOT = Path(__file__).resolve().parent.parent
PROGRAM = REPO_ROOT / "__main__.py"
PROJECT = "gke-ray-tpu"
MOCK_PROJECT_NUMBER = "123456789012"
MOCK_CA = "bW9jay1jYQ=="


@dataclass
class RegisteredResource:
    urn: str
    type: str
    name: str
    inputs: dict
    custom: bool
    parent: str
    dependencies: list[str]
    provider: str
    retain_on_delete: bool
    protect: bool

    @property
    def parent_type(self) -> Optional[str]:
        """The component type this resource was created under (from its URN's type chain)."""
        chain = self.urn.split("::")[2].split("$")
        return chain[-2] if len(chain) > 1 else None


@dataclass
class OfflineRun:
    resources: list[RegisteredResource] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    invokes: list[str] = field(default_factory=list)
    logs: list[tuple[str, str]] = field(default_factory=list)
    """(level, message) of every ``pulumi.log`` call, as the CLI would print them."""

    def of_type(self, type_: str) -> list[RegisteredResource]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: Optional[str] = None) -> RegisteredResource:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        if len(found) != 1:
            raise AssertionError(f"expected one {type_} {name or ''}, found {[r.name for r in found]}")
        return found[0]


class _StackMocks(pulumi.runtime.Mocks):
    """Echo inputs as outputs, plus the few computed values the program reads back."""

    def __init__(self, run: OfflineRun):
        self.run = run

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        outputs = dict(args.inputs)
        if args.typ == "gcp:container/cluster:Cluster":
            outputs.setdefault("endpoint", "203.0.113.10")
            outputs["masterAuth"] = {"clusterCaCertificate": MOCK_CA}
        if args.typ.startswith("gcp:") and "name" not in outputs:
            outputs["name"] = args.name
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs):
        self.run.invokes.append(args.token)
        if args.token == "gcp:organizations/getProject:getProject":
            return {"number": MOCK_PROJECT_NUMBER, "projectId": args.args.get("projectId")}
        if args.token == "gcp:container/getCluster:getCluster":
            return {
                "name": args.args.get("name"),
                "location": args.args.get("location"),
                "endpoint": "203.0.113.20",
                "masterAuths": [{"clusterCaCertificate": MOCK_CA}],
            }
        return {}


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: _StackMocks):
        super().__init__(mocks)
        self.run = mocks.run

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.run.resources.append(
                RegisteredResource(
                    urn=response.urn,
                    type=request.type,
                    name=request.name,
                    inputs=rpc.deserialize_properties(request.object) if request.custom else {},
                    custom=bool(request.custom),
                    parent=request.parent,
                    dependencies=list(request.dependencies),
                    provider=request.provider,
                    retain_on_delete=bool(request.retainOnDelete),
                    protect=bool(request.protect),
                )
            )
        return response


def load_stack_file(path: Path) -> dict[str, str]:
    """Config of a ``Pulumi.<stack>.yaml`` as the engine hands it to a program: strings, JSON for objects."""
    document = yaml.safe_load(Path(path).read_text()) or {}
    config = {}
    for key, value in (document.get("config") or {}).items():
        if isinstance(value, str):
            config[key] = value
        elif isinstance(value, bool):
            config[key] = "true" if value else "false"
        elif isinstance(value, (int, float)):
            config[key] = str(value)
        else:
            config[key] = json.dumps(value)
    return config


def run_offline(
    config: Mapping[str, str],
    stack: str = "dev",
    preview: bool = True,
    program: Path = PROGRAM,
    run: Optional[OfflineRun] = None,
    project: str = PROJECT,
) -> OfflineRun:
    """Run ``program`` against the mock engine with ``config``; return what it registered and exported.

    Each call runs in a fresh context, so one process can run many stacks.
    Errors raised by the program (a ConfigError, say) propagate unchanged;
    pass ``run`` to see what had been registered by then.
    """
    run = run if run is not None else OfflineRun()
    return contextvars.Context().run(_run_in_fresh_context, dict(config), stack, preview, program, run, project)


class _LogRecorder(logging.Handler):
    def __init__(self, run: OfflineRun):
        super().__init__(logging.DEBUG)
        self.run = run

    def emit(self, record: logging.LogRecord) -> None:
        self.run.logs.append((record.levelname.lower(), record.getMessage()))


def _run_in_fresh_context(
    config: dict, stack: str, preview: bool, program: Path, run: OfflineRun, project: str
) -> OfflineRun:
    mocks = _StackMocks(run)
    logger = logging.getLogger(f"gke-ray-tpu.offline.{id(run)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(_LogRecorder(run))
    pulumi.runtime.set_mocks(
        mocks, project=project, stack=stack, preview=preview, monitor=_RecordingMonitor(mocks), logger=logger
    )
    runtime_config.set_all_config(config)
    try:
        _sync_await(run_pulumi_func(lambda: runpy.run_path(str(program), run_name="__main__")))
    finally:
        logger.handlers.clear()

    root = pulumi.runtime.get_root_resource()
    exported = dict(root.outputs)

    async def resolve() -> dict:
        return {key: await pulumi.Output.from_input(value).future() for key, value in exported.items()}

    run.outputs = _sync_await(resolve())
    return run
