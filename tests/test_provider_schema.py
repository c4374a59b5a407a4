"""provider/ as the Pulumi CLI sees it, and the YAML program that uses it.

The plugin is started the way pulumi-language-python starts a source-based plugin
(``python <plugin dir> <engine address>``, working directory = the consumer's project),
asked over gRPC for its plugin info and schema, and the schema is held to the contract
written out below from the component modules' Args TypedDicts and class annotations.
"""

from __future__ import annotations

import copy
import json
import os
import re
import selectors
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from urllib.parse import unquote

import grpc
import pytest
import yaml
from google.protobuf import empty_pb2
from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

from tests.conftest import REPO_ROOT

PROVIDER_DIR = REPO_ROOT / "provider"
YAML_STACK = REPO_ROOT / "examples" / "yaml-stack" / "Pulumi.yaml"
PACKAGE = "gke-ray-tpu"
PROVIDER_PINS = ("pulumi", "pulumi-gcp", "pulumi-kubernetes", "pydantic", "pyyaml")

CLUSTER_REF = "/gcp/v10.2.0/schema.json#/resources/gcp:container%2Fcluster:Cluster"
K8S_PROVIDER_REF = "/kubernetes/v4.34.2/schema.json#/resources/pulumi:providers:kubernetes"
CLUSTER = "resource:gcp:container/cluster:Cluster"
K8S_PROVIDER = "resource:pulumi:providers:kubernetes"
NETWORKS = "array<type:AdditionalNetwork>"
NAMES = "array<string>"


@dataclass(frozen=True)
class Contract:
    """What a component declares: inputs and outputs by schema name, with their kinds (see ``kind``)."""

    inputs: dict[str, str]
    required: frozenset[str]
    outputs: dict[str, str]
    optional_outputs: frozenset[str] = frozenset()
    """Outputs that are null where they do not apply."""


def _strings(*names: str) -> dict[str, str]:
    return dict.fromkeys(names, "string")


# Written from components/*.py: <Name>Args fields (NotRequired = optional) and the class-level output annotations.
CONTRACT = {
    "DcnNetworks": Contract(
        inputs={**_strings("region", "namePrefix"), "cidrs": NAMES, "project": "string", "mtu": "integer"},
        required=frozenset({"region", "namePrefix"}),
        outputs={"networkNames": NAMES, "subnetNames": NAMES},
    ),
    "GkeRayCluster": Contract(
        inputs={
            **_strings("clusterName", "location", "project", "mode", "version", "releaseChannel"),
            "deletionProtection": "boolean",
            "cpuMachineType": "string",
            "cpuNodeCount": "integer",
            "scaleToZero": "boolean",
            "enableMultiNetworking": "boolean",
            "rayClusterLogging": "boolean",
            "rayClusterMonitoring": "boolean",
            "dranet": "boolean",
            "existing": "boolean",
            "imageStreaming": "boolean",
        },
        required=frozenset({"clusterName", "location", "project"}),
        outputs={
            "cluster": CLUSTER,
            **_strings("clusterName", "location", "endpoint", "kubeconfig", "version"),
            "provider": K8S_PROVIDER,
        },
    ),
    "TpuSliceNodePool": Contract(
        inputs={
            "cluster": CLUSTER,
            **_strings("zone", "generation", "topology", "poolName"),
            "sliceIndex": "integer",
            "additionalNetworks": NETWORKS,
            "capacity": "string",
            "reservation": "string",
            "scaleToZero": "boolean",
            "maxRunDurationS": "integer",
            "imageStreaming": "boolean",
            "queuedProvisioning": "boolean",
        },
        required=frozenset({"cluster", "zone"}),
        outputs={"poolName": "string", "machineType": "string", "hosts": "integer", "chipsPerHost": "integer"},
    ),
    "GcsWorkloadIdentity": Contract(
        inputs={
            **_strings("bucketName", "location", "project", "projectNumber", "namespace", "ksaName", "bucketDeletion"),
            "hierarchicalNamespace": "boolean",
        },
        required=frozenset({"bucketName", "location", "project", "projectNumber"}),
        outputs={**_strings("bucketName", "ksaName", "member"), "hierarchicalNamespaceEnabled": "boolean"},
    ),
    "RayTpuCluster": Contract(
        inputs={
            "workloadIdentity": "type:GcsWorkloadIdentityRef",
            **_strings("rayClusterName", "generation", "topology"),
            "numSlices": "integer",
            "elasticMinSlices": "integer",
            "dcnInterfaces": "integer",
            "image": "string",
            "megascalePort": "integer",
            "computeClass": "string",
            "capacity": "string",
            "scaleToZero": "boolean",
        },
        required=frozenset({"workloadIdentity"}),
        outputs={**_strings("rayClusterName", "headService"), "dashboardPort": "integer", "rayClusterSpec": "map<any>"},
        optional_outputs=frozenset({"rayClusterSpec"}),  # a cluster that holds its slices has no per-run spec
    ),
    "MaxTextRun": Contract(
        inputs={
            "runName": "string",
            "rayCluster": "type:RayTpuClusterRef",
            "preset": "string",
            "overrides": "map<any>",
            "elastic": "boolean",
            "minSlices": "integer",
            "activeDeadlineSeconds": "integer",
            "backoffLimit": "integer",
            "queue": "type:TpuQueueRef",
        },
        required=frozenset({"runName", "rayCluster"}),
        outputs=_strings("rayJobName", "submissionId", "checkpointDir", "codeObject"),
    ),
    "TpuQueue": Contract(
        inputs={
            "rayCluster": "type:RayTpuClusterRef",
            "installKueue": "boolean",
            "podsReadyTimeoutS": "integer",
            "requeueLimit": "integer",
            "queueingStrategy": "string",
            "cohort": "string",
            "borrowingLimit": "integer",
            "lendingLimit": "integer",
            "queuedProvisioning": "boolean",
            "maxRunDurationS": "integer",
        },
        required=frozenset({"rayCluster"}),
        outputs={**_strings("localQueue", "clusterQueue"), "tpuQuota": "integer", "kueueVersion": "string",
                 "podsReadyTimeoutS": "integer", "requeueLimit": "integer"},
        optional_outputs=frozenset({"kueueVersion", "podsReadyTimeoutS", "requeueLimit"}),  # null with a cluster's own Kueue
    ),
}

_EXTERNAL_REF = re.compile(r"/[\w-]+/v[\w.-]+/schema\.json#/resources/(.+)")


def kind(node: dict) -> str:
    """A property schema in short: string, integer, array<...>, map<...>, type:<Name> or resource:<token>."""
    ref = node.get("$ref")
    if ref == "pulumi.json#/Any":
        return "any"
    if ref is not None:
        if ref.startswith(f"#/types/{PACKAGE}:index:"):
            return "type:" + ref.rsplit(":", 1)[1]
        external = _EXTERNAL_REF.fullmatch(ref)
        assert external, f"unexpected $ref {ref}"
        return "resource:" + unquote(external[1])
    if node.get("type") == "array":
        return f"array<{kind(node['items'])}>"
    if node.get("type") == "object" and "additionalProperties" in node:
        return f"map<{kind(node['additionalProperties'])}>"
    return node["type"]


def project_version() -> str:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]


def pins(path) -> dict[str, str]:
    """``name==version`` lines of a requirements file, by lower-case name."""
    found = {}
    for line in path.read_text().splitlines():
        requirement = line.split("#", 1)[0].strip()
        if "==" in requirement:
            name, version = requirement.split("==", 1)
            found[name.split("[", 1)[0].strip().lower()] = version.strip()
    return found


def _read_port(process: subprocess.Popen, stderr_path, timeout: float = 120.0) -> int:
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    ready = selector.select(timeout)
    selector.close()
    line = process.stdout.readline() if ready else b""
    if not re.fullmatch(rb"\d+\n", line):
        process.kill()
        process.wait()
        raise AssertionError(f"the host printed {line!r} instead of '<port>\\n'; stderr:\n{stderr_path.read_text()}")
    return int(line)


@pytest.fixture(scope="module")
def host_port(request, tmp_path_factory) -> int:
    """The plugin, run as the language host runs it: the consumer's directory as cwd, the repo not on PYTHONPATH."""
    consumer = tmp_path_factory.mktemp("consumer-project")
    stderr_path = consumer / "provider.stderr"
    stderr = stderr_path.open("w")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    process = subprocess.Popen(
        [sys.executable, str(PROVIDER_DIR), "127.0.0.1:1"],  # the engine address is stored, never dialled for GetSchema
        cwd=consumer,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )

    def stop() -> None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()
        stderr.close()

    request.addfinalizer(stop)
    return _read_port(process, stderr_path)


@pytest.fixture(scope="module")
def served(host_port) -> tuple[str, dict]:
    """(GetPluginInfo version, GetSchema schema) over gRPC."""
    with grpc.insecure_channel(f"127.0.0.1:{host_port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = provider_pb2_grpc.ResourceProviderStub(channel)
        info = stub.GetPluginInfo(empty_pb2.Empty(), timeout=30)
        response = stub.GetSchema(provider_pb2.GetSchemaRequest(version=0), timeout=60)
    return info.version, json.loads(response.schema)


@pytest.fixture(scope="module")
def schema(served) -> dict:
    return served[1]


def resource(schema: dict, name: str) -> dict:
    return schema["resources"][f"{PACKAGE}:index:{name}"]


def test_plugin_files_name_the_package_and_pin_the_repository_versions(schema):
    assert yaml.safe_load((PROVIDER_DIR / "PulumiPlugin.yaml").read_text()) == {"name": PACKAGE, "runtime": "python"}
    assert schema["name"] == PACKAGE
    provider_pins = pins(PROVIDER_DIR / "requirements.txt")
    repository_pins = pins(REPO_ROOT / "requirements.txt")
    assert set(provider_pins) == set(PROVIDER_PINS)
    assert provider_pins == {name: repository_pins[name] for name in PROVIDER_PINS}


def test_plugin_info_and_schema_carry_the_pyproject_version(served):
    plugin_version, schema = served
    assert plugin_version == project_version()
    assert schema["version"] == project_version()
    assert schema["displayName"] == PACKAGE


def test_schema_holds_exactly_the_seven_components(schema):
    assert set(schema["resources"]) == {f"{PACKAGE}:index:{name}" for name in CONTRACT}
    for name in CONTRACT:
        assert resource(schema, name)["isComponent"] is True
        assert resource(schema, name)["description"].strip(), name


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_inputs_are_the_args_typeddict(schema, name):
    declared = resource(schema, name)
    contract = CONTRACT[name]
    assert {prop: kind(node) for prop, node in declared["inputProperties"].items()} == contract.inputs
    assert set(declared["requiredInputs"]) == contract.required
    assert [prop for prop, node in declared["inputProperties"].items() if not node.get("description", "").strip()] == []


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_outputs_are_the_class_annotations(schema, name):
    declared = resource(schema, name)
    contract = CONTRACT[name]
    assert {prop: kind(node) for prop, node in declared["properties"].items()} == contract.outputs
    assert set(declared["required"]) == set(contract.outputs) - contract.optional_outputs
    assert [prop for prop, node in declared["properties"].items() if not node.get("description", "").strip()] == []


def test_descriptions_are_the_field_docstrings(schema):
    assert resource(schema, "DcnNetworks")["inputProperties"]["mtu"]["description"].startswith("MTU of every network")
    assert resource(schema, "TpuSliceNodePool")["properties"]["hosts"]["description"].startswith("TPU VMs in the slice")
    assert resource(schema, "GkeRayCluster")["properties"]["provider"]["description"].startswith("A Kubernetes provider")


def test_the_complex_types_are_the_network_and_the_component_refs(schema):
    assert set(schema["types"]) == {f"{PACKAGE}:index:{name}" for name in ("AdditionalNetwork", *REFS)}
    network = schema["types"][f"{PACKAGE}:index:AdditionalNetwork"]
    assert network["type"] == "object"
    assert network["description"].strip()
    assert {prop: kind(node) for prop, node in network["properties"].items()} == _strings("network", "subnetwork")
    assert set(network["required"]) == {"network", "subnetwork"}
    assert all(node["description"].strip() for node in network["properties"].values())


# A component that takes another is declared with the other's ref type (components/_refs.py says why):
# ref type -> (the component it stands for, the consumer and its input, the fields that take outputs, and whose).
REFS = {
    "GcsWorkloadIdentityRef": ("GcsWorkloadIdentity", [("RayTpuCluster", "workloadIdentity")],
                               {"bucketName": "GcsWorkloadIdentity", "ksaName": "GcsWorkloadIdentity"}),
    "RayTpuClusterRef": ("RayTpuCluster", [("MaxTextRun", "rayCluster"), ("TpuQueue", "rayCluster")],
                         {"rayClusterName": "RayTpuCluster", "bucketName": "GcsWorkloadIdentity",
                          "rayClusterSpec": "RayTpuCluster"}),
    "TpuQueueRef": ("TpuQueue", [("MaxTextRun", "queue")], {"localQueue": "TpuQueue"}),
}
OPTIONAL_REF_FIELDS = {"RayTpuClusterRef": {"rayClusterSpec", "dcnInterfaces", "computeClass"},
                       "TpuQueueRef": {"podsReadyTimeoutS"}}
"""Fields set only where they apply (a cluster's per-run spec only where it scales to zero), or with a default."""
REF_FIELDS = {
    "GcsWorkloadIdentityRef": _strings("bucketName", "ksaName", "namespace"),
    "RayTpuClusterRef": {
        **_strings("rayClusterName", "namespace", "bucketName", "generation", "topology"),
        "numSlices": "integer", "elasticMinSlices": "integer", "capacity": "string", "scaleToZero": "boolean",
        "rayClusterSpec": "map<any>", "dcnInterfaces": "integer", "computeClass": "string",
    },
    "TpuQueueRef": {"localQueue": "string", "podsReadyTimeoutS": "integer"},
}


@pytest.mark.parametrize("ref, consumer", [(ref, consumer) for ref, (_, consumers, _) in sorted(REFS.items())
                                           for consumer in consumers])
def test_a_component_input_is_declared_as_the_fields_of_the_component(schema, ref, consumer):
    component, _, from_outputs = REFS[ref]
    consumer, prop = consumer
    node = resource(schema, consumer)["inputProperties"][prop]
    assert kind(node) == f"type:{ref}" and node.get("plain") is True  # checked before anything is registered
    assert "From Python, the component itself; from other languages, its fields." in node["description"]
    declared = schema["types"][f"{PACKAGE}:index:{ref}"]
    assert f"From Python, pass the {component} itself." in declared["description"]
    assert "cannot pass a component between languages (a reference arrives as its URN only)" in declared["description"]
    fields = declared["properties"]
    assert {name: kind(node) for name, node in fields.items()} == REF_FIELDS[ref]
    assert set(declared["required"]) == set(fields) - OPTIONAL_REF_FIELDS.get(ref, set())
    # The fields that take Inputs are exactly those a program wires from outputs, and carry the outputs' names.
    assert {name for name, node in fields.items() if not node.get("plain")} == set(from_outputs)
    for name, producer in from_outputs.items():
        assert name in resource(schema, producer)["properties"], (ref, name, producer)
    # The others are what the component was given (or an output it has), under the same names.
    given = {**resource(schema, component)["inputProperties"], **resource(schema, component)["properties"],
             **resource(schema, "GcsWorkloadIdentity")["inputProperties"]}
    assert set(fields) - set(from_outputs) <= set(given)


_HOST_PROBE = """
import json
from typing import Optional, TypedDict

import pulumi
from google.protobuf import struct_pb2
from pulumi.provider.experimental.analyzer import Analyzer
from pulumi.provider.experimental.component import ComponentProvider
from pulumi.runtime import rpc

from gke_ray_tpu.components import DcnNetworks, GcsWorkloadIdentity, GkeRayCluster, MaxTextRun, RayTpuCluster, TpuQueue, TpuSliceNodePool
from gke_ray_tpu.components.maxtext_run import run_cluster

URN = "urn:pulumi:dev::consumer::gke-ray-tpu:index:RayTpuCluster::ray"


class ByComponentArgs(TypedDict):
    ray_cluster: pulumi.Input[RayTpuCluster]


class ByComponent(pulumi.ComponentResource):
    def __init__(self, name: str, args: ByComponentArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gke-ray-tpu:index:ByComponent", name, None, opts)


found = {}
try:
    Analyzer("gke-ray-tpu").analyze([ByComponent])
    found["typed as the component"] = "accepted"
except Exception as error:
    found["typed as the component"] = str(error)
reference = struct_pb2.Struct()
reference.update({rpc._special_sig_key: rpc._special_resource_sig, "urn": URN, "type": "gke-ray-tpu:index:RayTpuCluster"})
found["a reference arrives as"] = rpc.deserialize_resource(reference)
provider = ComponentProvider(
    [DcnNetworks, GkeRayCluster, TpuSliceNodePool, GcsWorkloadIdentity, RayTpuCluster, MaxTextRun, TpuQueue], "gke-ray-tpu",
    None, "0"
)
run = provider._component_defs["MaxTextRun"]
fields = {"rayClusterName": "maxtext-tpu-cluster", "namespace": "training", "bucketName": "b", "generation": "v6e",
          "topology": "4x4", "numSlices": 2.0, "elasticMinSlices": 1.0, "capacity": "spot", "scaleToZero": False}
found["fields"] = dict(run_cluster(provider.map_inputs({"runName": "r", "rayCluster": fields}, run)))
try:
    provider.map_inputs({"runName": "r", "rayCluster": URN}, run)
except Exception as error:
    found["the URN as the input"] = str(error)
print(json.dumps(found))
"""


def test_the_host_passes_a_component_only_as_its_urn_and_takes_its_fields(tmp_path):
    """Why the ref types: what pulumi 3.272's provider host does with a component, run in-process."""
    probe = tmp_path / "probe.py"
    probe.write_text(_HOST_PROBE)  # a file: the analyzer reads the Args' source for docstrings
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, str(probe)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True)
    found = json.loads(result.stdout)
    # An argument typed as a component of this package does not even make a schema ...
    assert "'RayTpuCluster.pulumi_type' is not defined" in found["typed as the component"]
    # ... and a resource reference from another language reaches construct as a bare URN, no component.
    assert found["a reference arrives as"] == "urn:pulumi:dev::consumer::gke-ray-tpu:index:RayTpuCluster::ray"
    # The fields are what the run takes, renamed (integers stay JSON numbers; the components accept whole floats).
    assert found["fields"] == {
        "ray_cluster_name": "maxtext-tpu-cluster", "namespace": "training", "bucket_name": "b", "generation": "v6e",
        "topology": "4x4", "num_slices": 2.0, "elastic_min_slices": 1.0, "capacity": "spot", "scale_to_zero": False,
    }
    assert "Missing required input 'rayCluster.rayClusterName' on 'MaxTextRun'" in found["the URN as the input"]


def stated_defaults() -> dict[tuple[str, str], str]:
    """(component, input) -> how its description states the default, written from the components' constants."""
    from gke_ray_tpu.components import dcn_networks, gcs_workload_identity, gke_cluster, ray_tpu_cluster
    from gke_ray_tpu.core.slices import DEFAULT_NUM_SLICES
    from gke_ray_tpu.core.capacity import DEFAULT_CAPACITY
    from gke_ray_tpu.core.presets import DEFAULT_PRESET
    from gke_ray_tpu.core.tpu_catalogue import DEFAULT_GENERATION, DEFAULT_TOPOLOGY

    shape = {"generation": DEFAULT_GENERATION, "topology": DEFAULT_TOPOLOGY, "capacity": DEFAULT_CAPACITY}
    return {
        ("DcnNetworks", "cidrs"): f"Default: the tutorial's {' and '.join(dcn_networks.DEFAULT_CIDRS)}.",
        ("DcnNetworks", "mtu"): f"Default: {dcn_networks.JUMBO_MTU} ",
        ("GcsWorkloadIdentity", "namespace"): f"Default: {gcs_workload_identity.DEFAULT_NAMESPACE}.",
        ("GcsWorkloadIdentity", "ksaName"): f"Default: {gcs_workload_identity.DEFAULT_KSA_NAME}.",
        ("GcsWorkloadIdentity", "bucketDeletion"): f"{gcs_workload_identity.DEFAULT_BUCKET_DELETION} (the default",
        ("GkeRayCluster", "mode"): f"Default: {gke_cluster.DEFAULT_MODE}.",
        ("GkeRayCluster", "version"): f"such as {gke_cluster.DEFAULT_VERSION} (the channel's newest patch of it; the default)",
        ("GkeRayCluster", "releaseChannel"): f"Default: {gke_cluster.DEFAULT_RELEASE_CHANNEL},",
        ("GkeRayCluster", "cpuMachineType"): f"Default: {gke_cluster.DEFAULT_CPU_MACHINE_TYPE}.",
        ("GkeRayCluster", "cpuNodeCount"): f"Default: {gke_cluster.DEFAULT_CPU_NODE_COUNT},",
        ("MaxTextRun", "preset"): f"Default: {DEFAULT_PRESET}.",
        ("RayTpuCluster", "rayClusterName"): f"Default: {ray_tpu_cluster.DEFAULT_NAME}.",
        ("RayTpuCluster", "numSlices"): f"Default: {DEFAULT_NUM_SLICES}.",
        ("RayTpuCluster", "image"): f"Default: {ray_tpu_cluster.DEFAULT_IMAGE}, Ray's release image",
        ("RayTpuCluster", "megascalePort"): f"Default: {ray_tpu_cluster.DEFAULT_MEGASCALE_PORT},",
        **{("RayTpuCluster", prop): f"Default: {value}." for prop, value in shape.items()},
        **{("TpuSliceNodePool", prop): f"Default: {value}" for prop, value in shape.items()},
    }


def test_each_stated_default_is_the_components_constant(schema):
    """A default is declared once, as a constant of the component's module (which the README's table reads too);
    the schema's descriptions are the Args docstrings, which cannot read it, so they are held to it here."""
    for (component, prop), statement in stated_defaults().items():
        assert statement in resource(schema, component)["inputProperties"][prop]["description"], (component, prop)


def test_resource_references_and_dependencies(schema):
    assert resource(schema, "TpuSliceNodePool")["inputProperties"]["cluster"]["$ref"] == CLUSTER_REF
    assert resource(schema, "GkeRayCluster")["properties"]["cluster"]["$ref"] == CLUSTER_REF
    assert resource(schema, "GkeRayCluster")["properties"]["provider"]["$ref"] == K8S_PROVIDER_REF
    assert sorted(schema["dependencies"], key=lambda d: d["name"]) == [
        {"name": "gcp", "version": "10.2.0"},
        {"name": "kubernetes", "version": "4.34.2"},
    ]
    repository_pins = pins(REPO_ROOT / "requirements.txt")
    assert (repository_pins["pulumi-gcp"], repository_pins["pulumi-kubernetes"]) == ("10.2.0", "4.34.2")


def test_in_process_schema_equals_the_served_one(schema):
    # A fresh interpreter: the provider module's protos clash with ones other tests load (google.rpc.Status).
    code = (
        "import json;"
        "from pulumi.provider.experimental.component import ComponentProvider;"
        "from gke_ray_tpu.components import DcnNetworks, GcsWorkloadIdentity, GkeRayCluster, MaxTextRun, RayTpuCluster, TpuQueue, TpuSliceNodePool;"
        "classes = [DcnNetworks, GkeRayCluster, TpuSliceNodePool, GcsWorkloadIdentity, RayTpuCluster, MaxTextRun, TpuQueue];"
        f"print(ComponentProvider(classes, {PACKAGE!r}, None, {project_version()!r}).schema)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert json.loads(result.stdout) == schema


# The YAML program ------------------------------------------------------------------------------------------

_EXPRESSION = re.compile(r"\$\{([^}]*)\}")
_ACCESS = re.compile(r"(?P<root>[A-Za-z][\w-]*)(?P<path>(?:\.\w+|\[\d+\])*)")
_STEP = re.compile(r"\.(\w+)|\[(\d+)\]")


def canonical_token(token: str) -> str:
    """A YAML type token in schema form.

    gke-ray-tpu:X -> gke-ray-tpu:index:X, and gcp:container:Cluster -> gcp:container/cluster:Cluster.
    """
    parts = token.split(":")
    if len(parts) == 2:
        parts.insert(1, "index")
    package, module, name = parts
    if module != "index" and "/" not in module:
        module = f"{module}/{name[0].lower()}{name[1:]}"
    return f"{package}:{module}:{name}"


def expressions(value) -> list[str]:
    """Every ``${...}`` anywhere in a YAML value."""
    if isinstance(value, str):
        return _EXPRESSION.findall(value)
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [found for item in items for found in expressions(item)]


class YamlProgram:
    """A Pulumi YAML program checked against the package schema; each check raises AssertionError."""

    def __init__(self, program: dict, schema: dict):
        self.program = program
        self.schema = schema
        self.resources = program.get("resources", {})
        self.config = program.get("config", {})

    def component(self, name: str) -> dict | None:
        """The schema of resource ``name`` if it is one of this package's components."""
        token = canonical_token(self.resources[name]["type"])
        if not token.startswith(f"{PACKAGE}:"):
            return None
        assert token in self.schema["resources"], f"{name}: {token} is not in the schema"
        return self.schema["resources"][token]

    def expression_kind(self, expression: str) -> str | None:
        """The kind of ``${expression}`` (None: a property of a resource from another package)."""
        access = _ACCESS.fullmatch(expression.strip())
        assert access, f"${{{expression}}} is not a property access"
        root = access["root"]
        steps = [prop or None for prop, _ in _STEP.findall(access["path"])]  # None: an [index]
        if root in self.config:
            config_type = self.config[root].get("type", "string")
            assert not steps, f"${{{expression}}}: config {root} is a {config_type}"
            return config_type
        assert root in self.resources, f"${{{expression}}}: {root} is neither config nor a resource"
        if not steps:
            return "resource:" + canonical_token(self.resources[root]["type"])
        component = self.component(root)
        if component is None:
            return None
        output = steps[0]
        assert output in component["properties"], f"${{{expression}}}: {output} is not an output of {root}"
        current = kind(component["properties"][output])
        for prop in steps[1:]:
            assert prop is None and current.startswith("array<"), f"${{{expression}}}: {current} cannot be indexed that way"
            current = current[len("array<"):-1]
        return current

    def check_value(self, value, node: dict, where: str) -> None:
        expected = kind(node)
        whole = _EXPRESSION.fullmatch(value) if isinstance(value, str) else None
        if whole:
            found = self.expression_kind(whole[1])
            if _ACCESS.fullmatch(whole[1].strip())["root"] in self.resources:
                assert not node.get("plain"), f"{where}: a resource's output goes to a plain input"
            assert found in (None, expected), f"{where}: ${{{whole[1]}}} is a {found}, the input a {expected}"
        elif expected.startswith("type:"):
            declared = self.schema["types"][f"{PACKAGE}:index:{expected[len('type:'):]}"]
            assert isinstance(value, dict), f"{where}: {expected} wants an object"
            assert set(value) <= set(declared["properties"]), f"{where}: {sorted(set(value) - set(declared['properties']))}"
            assert set(declared.get("required", [])) <= set(value), f"{where}: missing {set(declared['required']) - set(value)}"
            for key, item in value.items():
                self.check_value(item, declared["properties"][key], f"{where}.{key}")
        elif expected.startswith("array<"):
            assert isinstance(value, list), f"{where}: {expected} wants a list"
            for index, item in enumerate(value):
                self.check_value(item, node["items"], f"{where}[{index}]")
        else:
            for inner in expressions(value):
                self.expression_kind(inner)
            python = {"string": str, "integer": int, "number": (int, float), "boolean": bool}.get(expected)
            assert python is not None, f"{where}: {value!r} given where a {expected} is taken"
            assert isinstance(value, python) and (expected == "boolean" or not isinstance(value, bool)), (
                f"{where}: {value!r} is not a {expected}"
            )

    def check(self) -> None:
        for name in self.resources:
            component = self.component(name)
            if component is None:
                continue
            properties = self.resources[name].get("properties", {})
            unknown = set(properties) - set(component["inputProperties"])
            assert not unknown, f"{name}: {sorted(unknown)} are not inputs"
            missing = set(component["requiredInputs"]) - set(properties)
            assert not missing, f"{name}: required {sorted(missing)} not set"
            for prop, value in properties.items():
                self.check_value(value, component["inputProperties"][prop], f"{name}.{prop}")
        for expression in expressions(self.program):
            self.expression_kind(expression)

    def outputs_read(self) -> set[tuple[str, str]]:
        """(component, output) for every ``${component.output...}`` in the program."""
        read = set()
        for expression in expressions(self.program):
            access = _ACCESS.fullmatch(expression.strip())
            if access["root"] in self.resources and access["path"] and self.component(access["root"]):
                read.add((access["root"], _STEP.match(access["path"])[1]))
        return read


@pytest.fixture(scope="module")
def yaml_program() -> dict:
    return yaml.safe_load(YAML_STACK.read_text())


def test_yaml_stack_uses_the_local_package(yaml_program):
    assert yaml_program["runtime"] == "yaml"
    assert yaml_program["packages"] == {PACKAGE: "../../provider"}
    assert (YAML_STACK.parent / yaml_program["packages"][PACKAGE]).resolve() == PROVIDER_DIR
    existing = yaml_program["resources"]["existing"]
    assert existing["type"] == "gcp:container:Cluster" and "properties" not in existing
    assert existing["get"] == {"id": "projects/${gcpProject}/locations/${clusterLocation}/clusters/${clusterName}"}
    used = sorted(canonical_token(r["type"]) for r in yaml_program["resources"].values() if r["type"].startswith(PACKAGE))
    assert used == [f"{PACKAGE}:index:DcnNetworks", *[f"{PACKAGE}:index:TpuSliceNodePool"] * 2]


def test_yaml_stack_sets_only_inputs_and_reads_only_outputs(yaml_program, schema):
    program = YamlProgram(yaml_program, schema)
    program.check()
    read = program.outputs_read()
    assert {("dcn", "networkNames"), ("dcn", "subnetNames"), ("slice-0", "poolName"), ("slice-1", "poolName")} <= read


_DELETE = object()


def _edit(path: tuple, value=_DELETE):
    """A change to the program at ``path``: set it to ``value``, or delete it."""

    def mutate(program: dict) -> None:
        target = program
        for key in path[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return mutate


SLICE = ("resources", "slice-0", "properties")


@pytest.mark.parametrize(
    "mutate, complaint",
    [
        (_edit(("resources", "dcn", "type"), "gke-ray-tpu:index:DcnNetwork"), "not in the schema"),
        (_edit((*SLICE, "sliceIdx"), 0), "are not inputs"),
        (_edit((*SLICE, "zone")), "required"),
        (_edit((*SLICE, "additionalNetworks"), [{"network": "${dcn.networkNames[0]}"}]), "missing"),
        (_edit((*SLICE, "additionalNetworks", 0, "network"), "${dcn.networks[0]}"), "not an output"),
        (_edit((*SLICE, "additionalNetworks", 0, "network"), "${dcn.networkNames}"), "is a array<string>"),
        (_edit((*SLICE, "zone"), "${dcn.networkNames[0]}"), "plain input"),
        (_edit((*SLICE, "cluster"), "${dcn}"), "the input a resource:gcp:container/cluster:Cluster"),
        (_edit((*SLICE, "sliceIndex"), "0"), "is not a integer"),
        (_edit(("outputs", "hostsPerSlice"), "${slice-0.hostCount}"), "not an output"),
        (_edit(("outputs", "hostsPerSlice"), "${slice-2.hosts}"), "neither config nor a resource"),
    ],
)
def test_yaml_checker_rejects_a_broken_program(yaml_program, schema, mutate, complaint):
    broken = copy.deepcopy(yaml_program)
    mutate(broken)
    with pytest.raises(AssertionError, match=re.escape(complaint)):
        YamlProgram(broken, schema).check()
