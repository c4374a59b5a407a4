"""Other stacks from the same program: Autopilot, one slice, v5p, an existing cluster; and bad config."""

from __future__ import annotations

import json

import pytest

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.stack.mock_engine import OfflineRun, run_offline
from tests.schemas import validate_core, validate_ray_cluster
from tests.test_stack_dev import CLAIM, CLUSTER, NETWORK, NODE_POOL, RAYCLUSTER, tpu_pools

COMPUTE_CLASS = "kubernetes:cloud.google.com/v1:ComputeClass"


def worker(run):
    manifest = run.one(RAYCLUSTER).inputs
    validate_ray_cluster(manifest)
    (group,) = manifest["spec"]["workerGroupSpecs"]
    container = group["template"]["spec"]["containers"][0]
    return group, container, {e["name"]: e["value"] for e in container["env"]}


@pytest.fixture(scope="module")
def autopilot(run_stack):
    return run_stack(clusterMode="autopilot")


def test_autopilot_cluster_is_regional_and_has_no_standard_only_fields(autopilot):
    cluster = autopilot.one(CLUSTER).inputs
    assert cluster["enableAutopilot"] is True
    assert cluster["location"] == "us-east5"
    assert cluster["minMasterVersion"] == "1.35"
    assert cluster["addonsConfig"]["rayOperatorConfigs"][0]["enabled"] is True
    for standard_only in ("nodeConfig", "removeDefaultNodePool", "initialNodeCount", "datapathProvider"):
        assert standard_only not in cluster
    assert autopilot.outputs["clusterLocation"] == "us-east5"


def test_autopilot_gets_tpus_from_a_dranet_compute_class_not_node_pools(autopilot):
    assert autopilot.of_type(NODE_POOL) == []
    assert autopilot.of_type(NETWORK) == []
    compute_class = autopilot.one(COMPUTE_CLASS).inputs
    assert compute_class["metadata"] == {"name": "maxtext-tpu-cluster-tpu"}
    assert compute_class["spec"]["nodePoolConfig"] == {"dra": {"networking": {"enabled": True}}}
    # Google's DRANET ComputeClass for TPUs: the machine type, ANP auto; accelerator and topology come from the pods.
    assert compute_class["spec"]["priorities"] == [
        {"machineType": "ct6e-standard-4t", "spot": False, "acceleratorNetworkProfile": "auto"}
    ]
    group, container, _ = worker(autopilot)
    assert group["template"]["spec"]["nodeSelector"]["cloud.google.com/compute-class"] == "maxtext-tpu-cluster-tpu"
    # ANP auto makes the networks: the pod takes every netdev of the node, as in Google's sample.
    assert autopilot.one(CLAIM).inputs["spec"]["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": "netdev.google.com", "allocationMode": "All"
    }


def test_autopilot_below_its_dranet_minimum_is_rejected(run_stack):
    # 1.34 holds the Standard minimum (1.34.1-gke.1829001), not the Autopilot one.
    with pytest.raises(ConfigError, match=r"gke-ray-tpu:clusterVersion='1.34': expected 1.35.2-gke.1842000 or later"):
        run_stack(clusterMode="autopilot", clusterVersion="1.34")
    assert run_stack(clusterVersion="1.34").one(CLUSTER).inputs["minMasterVersion"] == "1.34"


def test_one_slice_stack(run_stack):
    run = run_stack(numSlices="1")
    assert [p.inputs["name"] for p in tpu_pools(run)] == ["v6e-16-0"]
    group, _, env = worker(run)
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 1, 1)
    assert env["MEGASCALE_NUM_SLICES"] == "1"
    assert run.outputs["numSlices"] == 1


def test_v5p_stack_derives_its_shape_and_skips_dranet(run_stack):
    run = run_stack(tpuGeneration="v5p", tpuTopology="2x2x4", dcnCidrs=None)
    pools = tpu_pools(run)
    assert [p.inputs["name"] for p in pools] == ["v5p-32-0", "v5p-32-1"]
    for pool in pools:
        assert pool.inputs["nodeConfig"]["machineType"] == "ct5p-hightpu-4t"
        assert pool.inputs["nodeCount"] == 4
        assert pool.inputs["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "2x2x4"}
        assert "labels" not in pool.inputs["nodeConfig"]
        assert "networkConfig" not in pool.inputs
    assert run.of_type(NETWORK) == [] and run.of_type(CLAIM) == []
    group, container, env = worker(run)
    assert group["numOfHosts"] == 4 and container["resources"]["limits"]["google.com/tpu"] == "4"
    assert "resourceClaims" not in group["template"]["spec"]
    assert "megascale_grpc_interface_prefixes" not in env["LIBTPU_INIT_ARGS"]
    assert group["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] == "tpu-v5p-slice"
    assert (run.outputs["acceleratorType"], run.outputs["chipsPerSlice"]) == ("TPU-V5P", 16)


def test_v5p_with_dcn_networks_is_a_config_error(run_stack):
    with pytest.raises(ConfigError, match=r"gke-ray-tpu:dcnCidrs=.*at most 0 networks"):
        run_stack(tpuGeneration="v5p", tpuTopology="2x2x4")


def test_spot_slices_with_elastic_range(run_stack):
    run = run_stack(capacity="spot", elasticMinSlices="1")
    for pool in tpu_pools(run):
        assert pool.inputs["nodeConfig"]["spot"] is True
        assert pool.inputs["nodeConfig"]["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    group, _, _ = worker(run)
    assert group["template"]["spec"]["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
    assert run.outputs["capacity"] == "spot"


def test_reservation_is_consumed_specifically(run_stack):
    run = run_stack(capacity="reservation", reservation="trillium-res")
    for pool in tpu_pools(run):
        assert pool.inputs["nodeConfig"]["reservationAffinity"] == {
            "consumeReservationType": "SPECIFIC_RESERVATION",
            "key": "compute.googleapis.com/reservation-name",
            "values": ["trillium-res"],
        }


def test_slices_join_a_regional_existing_cluster_in_one_zone(run_stack):
    run = run_stack(existingClusterName="regional-gke", existingClusterLocation="us-east5")
    for pool in tpu_pools(run):
        assert (pool.inputs["location"], pool.inputs["nodeLocations"]) == ("us-east5", ["us-east5-b"])


def test_existing_cluster_is_looked_up_not_created(run_stack):
    run = run_stack(existingClusterName="shared-gke", existingClusterLocation="us-east5-b")
    assert run.of_type(CLUSTER) == []
    assert "gcp:container/getCluster:getCluster" in run.invokes
    assert {p.inputs["cluster"] for p in tpu_pools(run)} == {"shared-gke"}
    assert [p for p in run.of_type(NODE_POOL) if p.name == "gke-cpu-pool"] == []
    assert run.outputs["clusterName"] == "shared-gke"
    kubeconfig = run.one("pulumi:providers:kubernetes").inputs["kubeconfig"]
    assert "command: gke-gcloud-auth-plugin" in kubeconfig and "server: https://203.0.113.20" in kubeconfig
    assert "token" not in kubeconfig and "client-key" not in kubeconfig


def test_custom_namespace_is_created_before_the_ksa(run_stack):
    run = run_stack(namespace="training")
    namespace = run.one("kubernetes:core/v1:Namespace")
    assert namespace.inputs["metadata"] == {"name": "training"}
    ksa = run.one("kubernetes:core/v1:ServiceAccount")
    validate_core(ksa.inputs)
    assert namespace.urn in ksa.dependencies
    members = run.of_type("gcp:storage/bucketIAMMember:BucketIAMMember")
    assert len(members) == 2 and all("/subject/ns/training/sa/ray-tpu-ksa" in m.inputs["member"] for m in members)


BAD_CONFIG = [
    ("tpuTopology", "4x5", r"gke-ray-tpu:tpuTopology='4x5': expected a v6e topology: 1x1, 2x2, 2x4, 4x4"),
    ("tpuTopology", "2x2", r"gke-ray-tpu:tpuTopology='2x2': expected a multi-host topology"),
    ("tpuGeneration", "v9", r"gke-ray-tpu:tpuGeneration='v9': expected one of tpu7x, v4, v5e, v5p, v6e"),
    ("dcnCidrs", json.dumps(["10.50.0.0/16", "10.50.128.0/17"]), r"'10.50.128.0/17': expected a range that does not overlap 10.50.0.0/16"),
    ("dcnCidrs", json.dumps(["10.50.0.1/16"]), r"dcnCidrs='10.50.0.1/16': expected an IPv4 network in CIDR form"),
    ("dcnCidrs", json.dumps(["8.8.0.0/16"]), r"dcnCidrs='8.8.0.0/16': expected a private IPv4 range"),
    ("dcnCidrs", "10.50.0.0/16", r"dcnCidrs='10.50.0.0/16': expected a JSON list"),
    ("dcnCidrs", json.dumps(["10.50.0.0/16", "10.60.0.0/16", "10.70.0.0/16"]), r"dcnCidrs=.*: expected at most 2 networks: a ct6e-standard-4t host has 2 NICs"),
    ("clusterVersion", "1.34.0-gke.100", r"clusterVersion='1.34.0-gke.100': expected 1.34.1-gke.1829001 or later"),
    ("clusterVersion", "latest", r"clusterVersion='latest': expected a GKE minor such as 1.35 .* or an exact version"),
    ("numSlices", "0", r"numSlices=0: expected an integer between 1 and 64"),
    ("numSlices", "two", r"numSlices='two': expected an integer"),
    ("elasticMinSlices", "3", r"elasticMinSlices=3: expected an integer between 1 and 2"),
    ("bucketName", "My_Bucket", r"bucketName='My_Bucket': expected a Cloud Storage bucket name: 3-63 lowercase"),
    ("bucketName", "goog-checkpoints", r"bucketName='goog-checkpoints'"),
    ("bucketName", "192.168.1.1", r"bucketName='192.168.1.1'"),
    ("bucketName", None, r"gke-ray-tpu:bucketName=None: expected a value"),
    ("bucketDeletion", "maybe", r"bucketDeletion='maybe': expected one of retain, delete-empty, force"),
    ("clusterMode", "serverless", r"clusterMode='serverless': expected one of standard, autopilot"),
    ("deletionProtection", "yes", r"deletionProtection='yes': expected true or false"),
    ("tpuTopolgy", "4x4", r"gke-ray-tpu:tpuTopolgy='4x4': expected a known key"),
    ("gcp:zone", "europe-west4-a", r"gcp:zone='europe-west4-a': expected a zone of gcp:region us-east5"),
    ("gcp:project", None, r"gcp:project=None: expected a value"),
    ("plannedOverrides", "[1]", r"plannedOverrides='\[1\]': expected a JSON dict such as"),
    ("rayImage", "ray image", r"rayImage='ray image': expected an image reference"),
    # What `pulumi config set <key> ""` stores is refused, not taken for unset.
    ("rayImage", "", r"rayImage='': expected a non-empty value \(or remove the key: `pulumi config rm gke-ray-tpu:rayImage`\)"),
    ("gcp:zone", "", r"gcp:zone='': expected a non-empty value"),
    ("numSlices", "", r"numSlices='': expected a non-empty value"),
    ("megascalePort", "8265", r"megascalePort=8265: expected a port the Ray pods leave free \(8265 is the head's dashboard"),
    ("namespace", "kube-system", r"namespace='kube-system': expected a namespace of your own"),
    ("ksaName", "default", r"ksaName='default': expected a name of its own"),
    ("projectNumber", "\u0661\u0662\u0663", r"projectNumber='.*': expected digits only"),
    ("plannedOverrides", '{"stpes": 3}', r"plannedOverrides.stpes=3: expected a key of MaxText's config: did you mean steps\?"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD_CONFIG, ids=[f"{k}={v}" for k, v, _ in BAD_CONFIG])
def test_bad_config_fails_before_any_resource(dev_config, key, value, message):
    config = dict(dev_config)
    full_key = key if ":" in key else f"gke-ray-tpu:{key}"
    if value is None:
        config.pop(full_key)
    else:
        config[full_key] = value
    run = OfflineRun()
    with pytest.raises(ConfigError, match=message):
        run_offline(config, run=run)
    assert run.resources == []


def test_pinned_image_is_not_re_pulled_but_moving_tags_are(run_stack):
    # With the stack's own image (tests/test_worker_image.py) the pods run a digest; here they run rayImage itself.
    _, container, _ = worker(run_stack(buildImage="false"))
    assert (container["image"], container["imagePullPolicy"]) == ("rayproject/ray:2.60.0-py312", "IfNotPresent")
    pinned = "us-docker.pkg.dev/my-tpu-project/ray/ray-maxtext:2.55.0-py312"
    _, container, _ = worker(run_stack(rayImage=pinned, buildImage="false"))
    assert (container["image"], container["imagePullPolicy"]) == (pinned, "IfNotPresent")
    _, container, _ = worker(run_stack(rayImage="rayproject/ray:nightly-py312-tpu", buildImage="false"))
    assert container["imagePullPolicy"] == "Always"


def test_tpu7x_slices_are_placed_by_a_workload_policy(run_stack):
    # JAX sees each tpu7x chip's two TensorCores as devices: the 8B's ICI mesh covers 32 on a v7x-32 slice.
    run = run_stack(tpuGeneration="tpu7x", tpuTopology="2x2x4", runs=json.dumps([{
        "name": "baseline-8b", "preset": "llama3-8b", "overrides": {"steps": 100, "ici_fsdp_parallelism": 8}}]))
    policies = sorted(run.of_type("gcp:compute/resourcePolicy:ResourcePolicy"), key=lambda r: r.inputs["name"])
    assert [(p.inputs["name"], p.inputs["region"], p.inputs["workloadPolicy"]) for p in policies] == [
        ("v7x-32-0-policy", "us-east5", {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x4"}),
        ("v7x-32-1-policy", "us-east5", {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x4"}),
    ]
    for pool, policy in zip(tpu_pools(run), policies):
        assert pool.inputs["nodeConfig"]["machineType"] == "tpu7x-standard-4t"
        assert pool.inputs["placementPolicy"] == {"type": "COMPACT", "policyName": policy.inputs["name"]}
        assert "tpuTopology" not in pool.inputs["placementPolicy"]
        assert policy.urn in pool.dependencies
    _, _, env = worker(run)
    assert env["LIBTPU_INIT_ARGS"].endswith("--megascale_grpc_interface_prefixes=eth1,eth2,lo")
