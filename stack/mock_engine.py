"""Run the stack program with Pulumi's mock engine: no CLI, no cloud, no credentials.

Used by the unit tests and by ``python -m gke_ray_tpu.stack.preview``. Every resource the
program registers is recorded with its inputs *and* the options the standard
mocks hide (parent, dependencies, provider, retain-on-delete), so tests
can assert on the dependency graph and on what ``pulumi destroy`` would do.

The Docker daemon that building the workers' image needs where ``pulumi up`` runs is
stood in too: ``docker-build:host`` points at a socket of this process that answers
Docker's ``GET /_ping`` (:class:`MockGke` ``docker_daemon``), so the program's own probe
runs where an update (``preview=False``) builds, and nothing outside this machine is asked.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import functools
import hashlib
import json
import logging
import runpy
import shutil
import socketserver
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime import config as runtime_config
from pulumi.runtime.settings import SETTINGS
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

from gke_ray_tpu.core import REPO_ROOT

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
    """Every resource this one waits for: its explicit ``depends_on`` and those its inputs come from."""
    provider: str
    retain_on_delete: bool
    protect: bool
    replace_on_changes: list[str] = field(default_factory=list)
    delete_before_replace: bool = False
    ignore_changes: list[str] = field(default_factory=list)
    input_dependencies: dict[str, list[str]] = field(default_factory=dict)
    """The resources each input's value comes from (by input name): the dependencies that need no ``depends_on``."""

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
    reads: list[str] = field(default_factory=list)
    """The type of every existing object the program reads (``Cluster.get``, a CRD, a StackReference)."""
    logs: list[tuple[str, str]] = field(default_factory=list)
    """(level, message) of every ``pulumi.log`` call, as the CLI would print them."""

    def of_type(self, type_: str) -> list[RegisteredResource]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: Optional[str] = None) -> RegisteredResource:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        if len(found) != 1:
            raise AssertionError(f"expected one {type_} {name or ''}, found {[r.name for r in found]}")
        return found[0]


MOCK_CHANNEL_VERSIONS: dict[str, list[str]] = {
    # Newest first, as GKE lists them: versions GKE's 2026 release notes name for each channel.
    "RAPID": ["1.36.2-gke.1498000", "1.36.0-gke.2684000", "1.35.3-gke.1993000", "1.35.3-gke.1234000",
              "1.34.6-gke.1154000"],
    "REGULAR": ["1.35.2-gke.1842000", "1.34.6-gke.1154000", "1.34.4-gke.1193000"],
    "STABLE": ["1.35.2-gke.1269001", "1.34.4-gke.1193000", "1.33.10-gke.1115000"],
    "EXTENDED": ["1.35.2-gke.1842000", "1.34.4-gke.1193000", "1.33.10-gke.1115000"],
}
"""What the mock engine says GKE offers (``getEngineVersions``); ``pulumi preview`` asks GKE itself."""


def mock_existing_cluster(name: str, location: str, project: str, **changes: Any) -> dict:
    """An existing cluster as ``getCluster`` returns it (camelCase), with everything the stack relies on."""
    return {
        "name": name,
        "location": location,
        "endpoint": "203.0.113.20",
        "masterAuths": [{"clusterCaCertificate": MOCK_CA}],
        "enableAutopilot": False,
        "datapathProvider": "ADVANCED_DATAPATH",
        "workloadIdentityConfigs": [{"workloadPool": f"{project}.svc.id.goog"}],
        "addonsConfigs": [{"rayOperatorConfigs": [{"enabled": True}], "gcsFuseCsiDriverConfigs": [{"enabled": True}]}],
        "masterVersion": "1.35.3-gke.1993000",
        "releaseChannels": [{"channel": "RAPID"}],
        **changes,
    }


def mock_raycluster_crd() -> dict:
    """The spec of the ``rayclusters.ray.io`` CRD an existing cluster serves, cut to the fields the stack checks
    (a KubeRay >= 1.5.1 one: the workers' resourceClaimTemplateName and authOptions)."""
    pod = {"properties": {"resourceClaims": {"items": {"properties": {"resourceClaimTemplateName": {"type": "string"}}}}}}
    spec = {
        "workerGroupSpecs": {"items": {"properties": {"template": {"properties": {"spec": pod}}}}},
        "authOptions": {"properties": {"mode": {"type": "string", "enum": ["disabled", "token"]}}},
    }
    schema = {"openAPIV3Schema": {"properties": {"spec": {"properties": spec}}}}
    return {"group": "ray.io", "names": {"kind": "RayCluster", "plural": "rayclusters"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema}]}


def mock_rayjob_crd() -> dict:
    """The spec of the ``rayjobs.ray.io`` CRD a cluster serves, cut to the field the stack checks (a KubeRay >= 1.6.0
    one: preRunningDeadlineSeconds)."""
    spec = {"preRunningDeadlineSeconds": {"type": "integer", "format": "int32"}, "jobId": {"type": "string"}}
    schema = {"openAPIV3Schema": {"properties": {"spec": {"properties": spec}}}}
    return {"group": "ray.io", "names": {"plural": "rayjobs"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema}]}


def mock_clusterqueue_crd() -> dict:
    """The spec of Kueue's ``clusterqueues.kueue.x-k8s.io`` CRD (Kueue 0.19 serves v1beta1 and v1beta2)."""
    return {"group": "kueue.x-k8s.io", "names": {"kind": "ClusterQueue", "plural": "clusterqueues"},
            "versions": [{"name": "v1beta1", "served": True, "storage": False},
                         {"name": "v1beta2", "served": True, "storage": True}]}


@dataclass
class MockGke:
    """What GKE answers in the mock engine: the versions per channel, and existing clusters' settings."""

    channel_versions: Mapping[str, list[str]] = field(default_factory=lambda: MOCK_CHANNEL_VERSIONS)
    cluster_changes: Mapping[str, Any] = field(default_factory=dict)
    """Fields of ``mock_existing_cluster`` to change (a cluster without Dataplane V2, say)."""
    served_raycluster_crd: Mapping[str, Any] = field(default_factory=mock_raycluster_crd)
    """The spec of the RayCluster CRD the cluster serves (read before the stack's RayCluster and runs)."""
    served_rayjob_crd: Mapping[str, Any] = field(default_factory=mock_rayjob_crd)
    """The spec of the RayJob CRD the cluster serves (read before the stack's runs)."""
    served_clusterqueue_crd: Mapping[str, Any] = field(default_factory=mock_clusterqueue_crd)
    """The spec of the ClusterQueue CRD of a cluster's own Kueue (read when the stack installs none)."""

    def served_crd(self, name: str) -> Mapping[str, Any]:
        """A CRD the cluster serves, by name, as ``CustomResourceDefinition.get`` reads it."""
        return {"rayclusters.ray.io": self.served_raycluster_crd, "rayjobs.ray.io": self.served_rayjob_crd,
                "clusterqueues.kueue.x-k8s.io": self.served_clusterqueue_crd}[name]
    existing_state: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Outputs, by resource type, that differ from the inputs because the resource already exists
    (a bucket created flat before the stack asked for a hierarchical namespace, say)."""
    deployed_outputs: Mapping[str, Any] = field(default_factory=dict)
    """The stack's outputs from its last update, as a StackReference to itself reads them (none: never deployed)."""
    docker_daemon: bool = True
    """Whether a Docker daemon answers where ``pulumi up`` runs (False: ``docker-build:host`` names a socket nobody serves)."""

    def engine_versions(self, prefix: str) -> dict:
        """``getEngineVersions`` as the provider computes it: a prefix filter on each list."""
        offered = sorted({v for versions in self.channel_versions.values() for v in versions}, reverse=True)
        matching = {ch: [v for v in vs if v.startswith(prefix)] for ch, vs in self.channel_versions.items()}
        return {
            "validMasterVersions": [v for v in offered if v.startswith(prefix)],
            "releaseChannelLatestVersion": {ch: vs[0] for ch, vs in matching.items() if vs},
            "releaseChannelDefaultVersion": {ch: vs[min(1, len(vs) - 1)] for ch, vs in self.channel_versions.items()},
        }


class _StackMocks(pulumi.runtime.Mocks):
    """Echo inputs as outputs, plus the few computed values the program reads back."""

    def __init__(self, run: OfflineRun, gke: MockGke):
        self.run = run
        self.gke = gke

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        outputs = dict(args.inputs)
        if args.typ == "pulumi:pulumi:StackReference":
            return args.resource_id, {"name": args.resource_id, "outputs": dict(self.gke.deployed_outputs),
                                      "secretOutputNames": []}
        if args.typ == "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition" and args.resource_id:
            return args.resource_id, {"metadata": {"name": args.resource_id},
                                      "spec": dict(self.gke.served_crd(args.resource_id))}
        if args.typ == "gcp:container/cluster:Cluster":
            if args.resource_id:  # Cluster.get: a cluster this stack reads, named by its ID
                _, project, _, location, _, name = args.resource_id.split("/")
                outputs.update(name=name, location=location, project=project)
                return args.resource_id, outputs
            outputs.setdefault("endpoint", "203.0.113.10")
            outputs["masterAuth"] = {"clusterCaCertificate": MOCK_CA}
        if args.typ == "docker-build:index:Image":
            # What the push reports: the tag with the digest of the pushed manifest.
            digest = "sha256:" + hashlib.sha256(json.dumps(args.inputs, sort_keys=True, default=str).encode()).hexdigest()
            outputs.update(digest=digest, ref=f"{args.inputs['tags'][0]}@{digest}")
        if args.typ.startswith("gcp:") and "name" not in outputs:
            outputs["name"] = args.name
        outputs.update(self.gke.existing_state.get(args.typ, {}))
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs):
        self.run.invokes.append(args.token)
        if args.token == "gcp:organizations/getProject:getProject":
            return {"number": MOCK_PROJECT_NUMBER, "projectId": args.args.get("projectId")}
        if args.token == "gcp:container/getEngineVersions:getEngineVersions":
            return self.gke.engine_versions(args.args.get("versionPrefix", ""))
        if args.token == "gcp:organizations/getClientConfig:getClientConfig":
            return {"accessToken": "mock-access-token", "project": "", "region": "", "zone": "", "id": "mock"}
        if args.token == "gcp:container/getCluster:getCluster":
            found = mock_existing_cluster(args.args.get("name"), args.args.get("location"), args.args.get("project"))
            return {**found, **self.gke.cluster_changes}
        return {}


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: _StackMocks):
        super().__init__(mocks)
        self.run = mocks.run

    def ReadResource(self, request):
        self.run.reads.append(request.type)
        return super().ReadResource(request)

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.run.resources.append(
                RegisteredResource(
                    urn=response.urn,
                    type=request.type,
                    name=request.name,
                    # A provider-side component (helm.v4.Chart) is registered with its inputs, like a resource's.
                    inputs=rpc.deserialize_properties(request.object) if request.custom or request.remote else {},
                    custom=bool(request.custom),
                    parent=request.parent,
                    dependencies=list(request.dependencies),
                    provider=request.provider,
                    retain_on_delete=bool(request.retainOnDelete),
                    protect=bool(request.protect),
                    replace_on_changes=list(request.replaceOnChanges),
                    delete_before_replace=bool(request.deleteBeforeReplace),
                    ignore_changes=list(request.ignoreChanges),
                    input_dependencies={key: list(deps.urns) for key, deps in request.propertyDependencies.items()},
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
    gke: Optional[MockGke] = None,
) -> OfflineRun:
    """Run ``program`` against the mock engine with ``config``; return what it registered and exported.

    Each call runs in a fresh context, so one process can run many stacks.
    Errors raised by the program (a ConfigError, say) propagate unchanged;
    pass ``run`` to see what had been registered by then.
    """
    run = run if run is not None else OfflineRun()
    gke = gke or MockGke()
    config = {**config, "docker-build:host": _daemon_stand_in() if gke.docker_daemon else f"unix://{_NO_DAEMON}"}
    return contextvars.Context().run(_run_in_fresh_context, config, stack, preview, program, run, project, gke)


_NO_DAEMON = "/nonexistent/gke-ray-tpu/docker.sock"


class _PingHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.rfile.readline()
        self.wfile.write(b"HTTP/1.1 200 OK\r\nApi-Version: 1.50\r\nContent-Length: 2\r\n\r\nOK")


@functools.cache
def _daemon_stand_in() -> str:
    """A socket of this process that answers Docker's ping, for the life of the process (its directory removed at
    exit)."""
    directory = tempfile.mkdtemp(prefix="mock-docker-")
    atexit.register(shutil.rmtree, directory, True)
    path = f"{directory}/docker.sock"
    server = socketserver.ThreadingUnixStreamServer(path, _PingHandler)
    threading.Thread(target=server.serve_forever, daemon=True, name="mock-docker-daemon").start()
    return f"unix://{path}"


_RAISED: set[str] = set()


def _drop_echoes_of(failure: Exception) -> None:
    """A failed program leaves a future per resource that waited on the failing output; when they are collected,
    asyncio would print each one's traceback of the error the caller already has (one line, for a person)."""
    cause: Optional[BaseException] = failure
    seen: set[int] = set()
    while cause is not None and id(cause) not in seen:  # the root error's text is in every echo; the outer ones
        seen.add(id(cause))  # name their own resource; a chain that loops back (Pulumi's RPC errors) ends here
        if str(cause):  # an empty text is in every message: it would silence all of them
            _RAISED.add(str(cause))
        cause = cause.__cause__ or cause.__context__
    loop = asyncio.get_event_loop()
    if loop.get_exception_handler() is not _echo_filter:
        loop.set_exception_handler(_echo_filter)


def _echo_filter(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    error = context.get("exception")
    if error is not None and any(text in str(error) for text in _RAISED):
        return
    loop.default_exception_handler(context)


class _LogRecorder(logging.Handler):
    def __init__(self, run: OfflineRun):
        super().__init__(logging.DEBUG)
        self.run = run

    def emit(self, record: logging.LogRecord) -> None:
        self.run.logs.append((record.levelname.lower(), record.getMessage()))


def _run_in_fresh_context(
    config: dict, stack: str, preview: bool, program: Path, run: OfflineRun, project: str, gke: MockGke
) -> OfflineRun:
    # The mocks create futures on the thread's current event loop, and a finished asyncio.run() or
    # asyncio.Runner in the same process (the submit command's log stream) leaves the thread without one.
    _ensure_event_loop()
    mocks = _StackMocks(run, gke)
    logger = logging.getLogger(f"gke-ray-tpu.offline.{id(run)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(_LogRecorder(run))
    pulumi.runtime.set_mocks(
        mocks, project=project, stack=stack, preview=preview, monitor=_RecordingMonitor(mocks), logger=logger
    )
    runtime_config.set_all_config(config)
    # What an earlier run left behind, as pulumi.runtime.test clears it: the outputs a failed run never
    # awaited would otherwise fail this one.
    SETTINGS.rpc_manager.clear()
    SETTINGS.outputs.clear()
    try:
        _sync_await(run_pulumi_func(lambda: runpy.run_path(str(program), run_name="__main__")))
    except Exception as failure:
        _drop_echoes_of(failure)
        raise
    finally:
        logger.handlers.clear()

    root = pulumi.runtime.get_root_resource()
    exported = dict(root.outputs)

    async def resolve() -> dict:
        return {key: await pulumi.Output.from_input(value).future() for key, value in exported.items()}

    run.outputs = _sync_await(resolve())
    return run
