"""Property-based battery over the stack config: names, sizes and values.

Whatever a user writes into ``Pulumi.<stack>.yaml``, the program either refuses
it with the project's own ConfigError naming a config key the user sets (and
registers no resource at all), or every resource it registers passes the naming
rules of the API that receives it. The rules below are this test's own oracle,
written from Google's and Kubernetes' documentation (see core/naming.py for the
sources), not imported from the code under test.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.kuberay import ray_job_problems
from gke_ray_tpu.stack.parse import parse_stack_config
from gke_ray_tpu.stack.config import NAMESPACE, RETIRED_KEYS, StackConfig
from gke_ray_tpu.stack.mock_engine import OfflineRun, run_offline
from gke_ray_tpu.preflight import xla_check
from gke_ray_tpu.stack.checks import check_planned_run
from gke_ray_tpu.stack.plan import plan_stack

CONFIG_KEYS = {field.alias for field in StackConfig.model_fields.values()}
KEYS = sorted(CONFIG_KEYS) + [f"{NAMESPACE}:typo", *RETIRED_KEYS]
NAME_KEYS = [f"{NAMESPACE}:{k}" for k in ("clusterName", "rayClusterName", "namespace", "ksaName", "bucketName",
                                          "reservation", "existingClusterName")]

# -- the oracle: each API's rule, from its documentation ------------------------------------------------------
GKE = re.compile(r"[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?")  # clusters, node pools: 1-40
GCE = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")  # networks, subnets, firewalls, policies: 1-63
DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
DNS_1035 = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
GKE_VERSION = re.compile(r"\d+\.\d+(?:\.\d+-gke\.\d+)?")


def subdomain(name: str) -> bool:
    """Kubernetes' DNS-1123 subdomain: 253 characters at most; its labels have no length limit of their own."""
    part = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
    return len(name) <= 253 and re.fullmatch(rf"{part}(?:\.{part})*", name) is not None


def bucket(name: str) -> bool:
    return (
        re.fullmatch(r"[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]", name) is not None
        and "." not in name  # a dotted name needs domain verification: never created here
        and not name.startswith("goog")
        and "google" not in name
        and "g00gle" not in name
    )


def violations(run: OfflineRun) -> list[str]:
    """Every name a registered resource carries that its API would refuse."""
    found = []

    def need(ok: bool, what: str) -> None:
        if not ok:
            found.append(what)

    for r in run.resources:
        inputs, kind = r.inputs, r.type
        name = inputs.get("name") or (inputs.get("metadata") or {}).get("name")
        if kind in ("gcp:container/cluster:Cluster", "gcp:container/nodePool:NodePool"):
            need(bool(GKE.fullmatch(name)), f"{kind} {name!r}")
            need(GKE_VERSION.fullmatch(inputs.get("minMasterVersion", "1.35")) is not None, f"version {inputs}")
        elif kind.startswith(("gcp:compute/",)):
            need(bool(GCE.fullmatch(name)), f"{kind} {name!r}")
        elif kind == "gcp:storage/bucket:Bucket":
            need(bucket(name), f"bucket {name!r}")
        elif kind == "gcp:storage/bucketIAMMember:BucketIAMMember":
            subject = inputs["member"].split("/subject/", 1)[1]
            need(len(subject) <= 127, f"Workload Identity subject {subject!r} (google.subject: 127 at most)")
        elif kind == "kubernetes:core/v1:Namespace":
            need(bool(DNS_LABEL.fullmatch(name)), f"namespace {name!r}")
        elif kind in ("kubernetes:core/v1:ServiceAccount", "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate"):
            need(subdomain(name), f"{kind} {name!r}")
            need(bool(DNS_LABEL.fullmatch(inputs["metadata"].get("namespace", "default"))), f"namespace of {name!r}")
        elif kind == "kubernetes:cloud.google.com/v1:ComputeClass":
            need(bool(DNS_LABEL.fullmatch(name)), f"ComputeClass {name!r} (a node label value)")
        elif kind == "kubernetes:ray.io/v1:RayCluster":
            # KubeRay: a DNS-1035 label of at most 53; its Services <name>-head-svc and <name>-headless;
            # the TPU webhook cuts <name>-headless to 50, so multi-host groups need <= 41.
            need(bool(DNS_1035.fullmatch(name)) and len(name) <= 53, f"RayCluster {name!r}")
            need(bool(DNS_1035.fullmatch(f"{name}-head-svc")), f"head Service of {name!r}")
            for group in inputs["spec"]["workerGroupSpecs"]:
                if group["numOfHosts"] > 1:
                    need(len(f"{name}-headless") <= 50, f"headless Service of {name!r} (TPU webhook)")
                    host = f"{group['groupName']}-{int(group['replicas']) - 1}-{int(group['numOfHosts']) - 1}"
                    need(bool(DNS_LABEL.fullmatch(host)), f"TPU pod hostname {host!r}")
                pod = group["template"]["spec"]
                need(subdomain(pod["serviceAccountName"]), f"service account of {name!r}")
                for value in pod["nodeSelector"].values():
                    need(bool(LABEL_VALUE.fullmatch(value)), f"node selector value {value!r}")
                for claim in pod.get("resourceClaims", []):
                    need(subdomain(claim["resourceClaimTemplateName"]), f"claim template {claim!r}")
        elif kind == "kubernetes:ray.io/v1:RayJob":
            # KubeRay: a DNS-1035 label of at most 47; with clusterSelector, no retries and the cluster's namespace;
            # else its own cluster, deleted when it ends (what Kueue manages too).
            need(bool(DNS_1035.fullmatch(name)) and len(name) <= 47, f"RayJob {name!r}")
            spec = inputs["spec"]
            need(ray_job_problems(inputs) == [], f"RayJob {name!r}: {ray_job_problems(inputs)}")
            if "clusterSelector" in spec:
                clusters = {(c.inputs["metadata"]["name"], c.inputs["metadata"].get("namespace"))
                            for c in run.of_type("kubernetes:ray.io/v1:RayCluster")}
                target = (spec["clusterSelector"]["ray.io/cluster"], inputs["metadata"].get("namespace"))
                need(target in clusters, f"RayJob {name!r} selects no RayCluster of the stack")
            else:
                need(spec.get("shutdownAfterJobFinishes") is True, f"RayJob {name!r} leaves its cluster behind")
        affinity = (inputs.get("nodeConfig") or {}).get("reservationAffinity") or {}
        for value in affinity.get("values", []):
            need(bool(GCE.fullmatch(value.rsplit("/", 1)[-1])), f"reservation {value!r}")
        if kind == "gcp:container/nodePool:NodePool":
            found.extend(capacity_violations(inputs, affinity))
        if kind == "kubernetes:ray.io/v1:RayCluster":
            need("enableInTreeAutoscaling" not in inputs["spec"], "Ray's autoscaler cannot release multi-host slices")
            for group in inputs["spec"]["workerGroupSpecs"]:
                need(0 < group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], f"replicas of {group}")
    return found


def capacity_violations(pool: dict, affinity: dict) -> list[str]:
    """GKE's rules for how a TPU pool gets its VMs (About flex-start; Spot VMs; consuming reservations)."""
    node, found = pool["nodeConfig"], []
    scaled = pool.get("autoscaling")
    if node.get("spot") or node.get("flexStart"):
        if affinity.get("consumeReservationType") != "NO_RESERVATION":
            found.append(f"Spot or flex-start VMs consuming reservations: {affinity}")
    if node.get("flexStart"):
        if node.get("spot"):
            found.append("flex-start and Spot together")
        if pool.get("management", {}).get("autoRepair") is not False:
            found.append("flex-start with auto-repair")
        if not scaled or scaled.get("minNodeCount") != 0:
            found.append(f"flex-start pool not autoscaled from 0: {scaled}")
    if scaled:
        if "nodeCount" in pool:
            found.append("a fixed nodeCount on an autoscaled pool")
        if "totalMinNodeCount" in scaled or "totalMaxNodeCount" in scaled:
            found.append("total_* node counts on a TPU pool (per-zone counts only)")
    if "maxRunDuration" in node and not node.get("flexStart"):
        found.append("maxRunDuration without flex-start (this stack bounds flex-start nodes only)")
    return found


# -- what users write ------------------------------------------------------------------------------------------
names = st.one_of(
    st.text(alphabet="abcxyz019-_.A", min_size=0, max_size=70),
    st.integers(min_value=1, max_value=70).map(lambda n: "a" * n),  # every length, around every limit
    st.integers(min_value=1, max_value=66).map(lambda n: "r" + "-" * (n % 3) + "x" * n),
    st.sampled_from(["my-google-bucket", "goog-ckpt", "ckpt.example.com", "g00gle-x", "1abc", "abc-", "a_b",
                     "projects/other-proj/reservations/r1", "projects/x/reservations/r1", "UPPER"]),
)
values = st.one_of(
    st.integers(min_value=-5, max_value=100).map(str),
    st.sampled_from(["true", "false", "standard", "autopilot", "v4", "v5e", "v5p", "v6e", "tpu7x", "2x2x2", "4x4",
                     "8x8", "retain", "force", "RAPID", "REGULAR", "UNSPECIFIED", "1.34", "1.35", "1.36", "1.37",
                     "1.34.1-gke.1829001", "1.35.2-gke.1842000", "1.35.3-gke.1993000", "latest",
                     "on-demand", "spot", "flex-start", "reservation", "3600", "604800", "604801", "1.32", "1.33"]),
    st.lists(st.sampled_from(["10.50.0.0/16", "10.60.0.0/16", "10.50.1.0/24", "192.168.0.0/30", "bad",
                              "0.0.0.0/0"]), max_size=3).map(json.dumps),
    st.sampled_from(["llama3-8b", "llama3-70b", "llama3-8b-elastic", "tiny-cpu"]),
    st.sampled_from(['{"ici_tensor_parallelism": 2}', '{"steps": 5}', '{"steps": 0}', '{"steps": 2.5}',
                     '{"per_device_batch_size": 0}', '{"per_device_batch_size": -1}', '{"remat_policy": "nope"}',
                     '{"max_target_length": "long"}', '{"dcn_fsdp_parallelism": 2}', '{"weight_dtype": "bfloat16"}',
                     '{"a": [1]}', "[1]", "{"]),
    st.sampled_from([
        '[]', '[{"name": "r1"}]', '[{"name": "r1", "preset": "llama3-70b"}]', '[{"name": "r1", "elastic": true}]',
        '[{"name": "r1", "minSlices": 2}]', '[{"name": "r1", "backoffLimit": 1}]', '[{"name": "r1"}, {"name": "r1"}]',
        '[{"name": "r1", "overrides": {"steps": 0}}]', '[{"name": "r1", "overrides": {"ici_tensor_parallelism": 8}}]',
        '[{"name": "r1", "preset": "tiny-cpu"}]', '[{"name": "R1"}]', '[{"name": "r1", "activeDeadlineSeconds": 60}]',
        '[{"name": "r1", "overrides": {"weight_dtype": "bfloat16", "per_device_batch_size": 1}, "preset": "llama3-70b"}]',
    ]),
    st.just(""),
)
mutations = st.dictionaries(
    st.sampled_from(KEYS), st.one_of(values, names, st.none()), min_size=1, max_size=4
) | st.dictionaries(st.sampled_from(NAME_KEYS), names, min_size=1, max_size=2)


@pytest.fixture(autouse=True)
def compiler_stand_in(monkeypatch, tmp_path):
    """A drawn compileCheck: true gets XLA's verdict from a stand-in, not minutes of compiling per example."""
    monkeypatch.setenv(xla_check.CACHE_DIR_ENV, str(tmp_path))
    fits = {"status": "compiled", "peak_bytes": 2**30, "hbm_limit_gib": 31.24, "wall_seconds": 0.0}
    monkeypatch.setattr(xla_check, "_run_child", lambda *args: dict(fits))


def mutate(base: dict[str, str], changes: dict) -> dict[str, str]:
    config = dict(base)
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


def assert_names_a_config_key(error: ConfigError) -> None:
    base = error.key
    if base.startswith(f"{NAMESPACE}:plannedOverrides."):
        base = base.split(".", 1)[0]
    if base.startswith(f"{NAMESPACE}:runs["):  # runs[1].overrides.steps, runs[0] (<key> of preset <p>)
        base = base.split("[", 1)[0]
    assert base in CONFIG_KEYS or base == f"{NAMESPACE}:typo" or base in RETIRED_KEYS, error
    assert str(error).startswith(f"invalid config {error.key}=") and ": expected " in str(error)


@settings(max_examples=600, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=mutations)
def test_any_config_parses_or_is_refused_naming_a_config_key(dev_config, changes):
    try:
        parsed = parse_stack_config(mutate(dev_config, changes))
        plan = plan_stack(parsed)
    except ConfigError as error:
        assert_names_a_config_key(error)
    else:
        assert parsed.shape.topology in parsed.shape.generation.topologies
        assert 1 <= plan.ray_cluster["elastic_min_slices"] <= parsed.num_slices
        assert len(parsed.dcn_cidrs_or_default) <= parsed.shape.generation.dcn_nics_per_host


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=mutations)
def test_every_stack_is_refused_before_registering_or_registers_only_valid_names(dev_config, changes):
    config = mutate(dev_config, changes)
    run = OfflineRun()
    try:
        run_offline(config, run=run)
    except ConfigError as error:
        assert_names_a_config_key(error)
        assert run.resources == [], [r.urn for r in run.resources]
        return
    assert run.resources
    assert violations(run) == []
    # What the program accepted, its own checks accept too.
    check_planned_run(parse_stack_config(config), info=lambda _: None, warn=lambda _: None)


def test_the_oracle_catches_what_it_should(dev_run):
    """The battery is only as good as its oracle: a run it must flag, once its checks are bypassed."""
    assert violations(dev_run) == []
    bad = OfflineRun(resources=[replace(r) for r in dev_run.resources])  # copies: dev_run is shared
    network = next(r for r in bad.resources if r.type == "gcp:compute/network:Network")
    cluster = next(r for r in bad.resources if r.type == "kubernetes:ray.io/v1:RayCluster")
    network.inputs = {**network.inputs, "name": "x" * 64}
    cluster.inputs = {**cluster.inputs, "metadata": {"name": "r" * 42}}
    assert violations(bad) == [
        f"gcp:compute/network:Network {'x' * 64!r}",
        f"headless Service of {'r' * 42!r} (TPU webhook)",
        "RayJob 'baseline-8b' selects no RayCluster of the stack",  # it still names the old one
    ]
    assert not bucket("my-google-ckpt") and not bucket("ckpt.example.com") and bucket("my-ckpt_1")
