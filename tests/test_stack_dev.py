"""The real __main__.py on the real Pulumi.dev.yaml, asserted against the tutorial's values."""

from __future__ import annotations

import hashlib

import pytest
import yaml

from gke_ray_tpu.core.libtpu_flags import ALL_GATHER_FUSION
from gke_ray_tpu.stack.mock_engine import MOCK_CHANNEL_VERSIONS, MOCK_PROJECT_NUMBER
from gke_ray_tpu.stack.resource_tree import with_integers
from tests.schemas import validate_core, validate_ray_cluster
from tests.conftest import REPO_ROOT

NETWORK = "gcp:compute/network:Network"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
CLUSTER = "gcp:container/cluster:Cluster"
NODE_POOL = "gcp:container/nodePool:NodePool"
BUCKET = "gcp:storage/bucket:Bucket"
BUCKET_MEMBER = "gcp:storage/bucketIAMMember:BucketIAMMember"
KSA = "kubernetes:core/v1:ServiceAccount"
CLAIM = "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate"
RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"
RAYJOB = "kubernetes:ray.io/v1:RayJob"


def tpu_pools(run):
    return sorted(
        (r for r in run.of_type(NODE_POOL) if r.parent_type == "gke-ray-tpu:index:TpuSliceNodePool"),
        key=lambda r: r.inputs["name"],
    )


def test_dcn_networks_are_jumbo_custom_mode_vpcs(dev_run):
    networks = sorted(dev_run.of_type(NETWORK), key=lambda r: r.inputs["name"])
    assert [n.inputs["name"] for n in networks] == ["ray-tpu-multislice-net-1", "ray-tpu-multislice-net-2"]
    for network in networks:
        assert network.inputs["mtu"] == 8896
        assert network.inputs["autoCreateSubnetworks"] is False
        assert network.parent_type == "gke-ray-tpu:index:DcnNetworks"


def test_subnets_use_the_tutorial_ranges_without_secondary_ranges(dev_run):
    subnets = sorted(dev_run.of_type(SUBNET), key=lambda r: r.inputs["name"])
    assert [(s.inputs["ipCidrRange"], s.inputs["region"]) for s in subnets] == [
        ("10.50.0.0/16", "us-east5"),
        ("10.60.0.0/16", "us-east5"),
    ]
    assert [s.inputs["network"] for s in subnets] == ["dcn-net-1-id", "dcn-net-2-id"]
    assert all("secondaryIpRanges" not in s.inputs for s in subnets)


def test_each_dcn_network_allows_ingress_from_its_own_subnet_only(dev_run):
    rules = sorted(dev_run.of_type(FIREWALL), key=lambda r: r.inputs["name"])
    assert [(r.inputs["network"], r.inputs["sourceRanges"]) for r in rules] == [
        ("dcn-net-1-id", ["10.50.0.0/16"]),
        ("dcn-net-2-id", ["10.60.0.0/16"]),
    ]
    for rule in rules:
        assert rule.inputs["direction"] == "INGRESS"
        assert sorted(a["protocol"] for a in rule.inputs["allows"]) == ["icmp", "tcp", "udp"]
        assert all("ports" not in a for a in rule.inputs["allows"])


def test_cluster_has_the_tutorial_add_ons_datapath_identity_and_version(dev_run):
    cluster = dev_run.one(CLUSTER).inputs
    assert cluster["name"] == "ray-tpu-multislice"
    assert cluster["location"] == "us-east5-b"
    assert cluster["addonsConfig"] == {
        # The tutorial's add-on, plus Ray's logs and metrics kept outside the cluster (tests/test_observability.py).
        "rayOperatorConfigs": [{"enabled": True, "rayClusterLoggingConfig": {"enabled": True},
                                "rayClusterMonitoringConfig": {"enabled": True}}],
        "gcsFuseCsiDriverConfig": {"enabled": True},
    }
    assert cluster["datapathProvider"] == "ADVANCED_DATAPATH"
    assert cluster["workloadIdentityConfig"] == {"workloadPool": "my-tpu-project.svc.id.goog"}
    # A minor, not a patch: GKE creates the channel's newest 1.35 (preview checks RAPID offers one).
    assert cluster["minMasterVersion"] == "1.35"
    assert cluster["releaseChannel"] == {"channel": "RAPID"}
    # Standard mode: enable_autopilot must be absent, never False (pulumi-gcp#2881).
    assert "enableAutopilot" not in cluster
    assert cluster["removeDefaultNodePool"] is True
    assert cluster["deletionProtection"] is False  # the dev stack opts out explicitly


def test_cpu_pool_hosts_the_ray_head(dev_run):
    pool = dev_run.one(NODE_POOL, "gke-cpu-pool").inputs
    assert pool["nodeConfig"]["machineType"] == "n1-standard-16"
    assert pool["nodeCount"] == 3
    assert pool["nodeConfig"]["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}


def test_one_tpu_pool_per_slice_with_every_tutorial_flag(dev_run):
    pools = tpu_pools(dev_run)
    assert [p.inputs["name"] for p in pools] == ["v6e-16-0", "v6e-16-1"]
    for pool in pools:
        inputs, node = pool.inputs, pool.inputs["nodeConfig"]
        assert inputs["cluster"] == "ray-tpu-multislice"
        assert inputs["location"] == "us-east5-b"
        assert inputs["nodeLocations"] == ["us-east5-b"]
        assert inputs["nodeCount"] == 4
        assert inputs["placementPolicy"] == {"type": "COMPACT", "tpuTopology": "4x4"}
        assert node["machineType"] == "ct6e-standard-4t"
        assert node["advancedMachineFeatures"] == {"threadsPerCore": 1}
        assert node["gvnic"] == {"enabled": True}
        assert node["labels"] == {"cloud.google.com/gke-networking-dra-driver": "true"}
        assert node["oauthScopes"] == ["https://www.googleapis.com/auth/cloud-platform"]
        assert node["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
        # Stated, as the API's default (the tutorial's command gets it): a matching reservation, else on demand.
        assert node["reservationAffinity"] == {"consumeReservationType": "ANY_RESERVATION"}
        assert "spot" not in node
        assert inputs["networkConfig"]["additionalNodeNetworkConfigs"] == [
            {"network": "ray-tpu-multislice-net-1", "subnetwork": "ray-tpu-multislice-tpu-subnet-1"},
            {"network": "ray-tpu-multislice-net-2", "subnetwork": "ray-tpu-multislice-tpu-subnet-2"},
        ]


def test_tpu_pools_wait_for_the_cluster_and_both_dcn_subnets(dev_run):
    for pool in tpu_pools(dev_run):
        names = {urn.rsplit("::", 1)[1] for urn in pool.dependencies}
        assert {"gke-cluster", "dcn-tpu-subnet-1", "dcn-tpu-subnet-2"} <= names


def test_bucket_is_private_uniform_standard_flat_and_kept_on_destroy(dev_run):
    bucket = dev_run.one(BUCKET)
    assert bucket.inputs == {
        "name": "my-tpu-project-maxtext-checkpoints",
        "project": "my-tpu-project",
        "location": "us-east5",
        "storageClass": "STANDARD",
        "uniformBucketLevelAccess": True,  # also what a hierarchical namespace would require
        "publicAccessPrevention": "enforced",
        "hierarchicalNamespace": {"enabled": False},  # the namespace the checkpoint drills run against
        "forceDestroy": False,
    }
    assert bucket.retain_on_delete is True
    # The namespace is force-new in the provider: a changed setting must never replace the bucket.
    assert bucket.ignore_changes == ["hierarchicalNamespace"] and not bucket.delete_before_replace


def test_ksa_is_a_valid_service_account_in_the_namespace(dev_run):
    ksa = dev_run.one(KSA)
    assert ksa.inputs["metadata"] == {"name": "ray-tpu-ksa", "namespace": "default"}
    validate_core(ksa.inputs)
    assert ksa.provider.split("::")[-1].startswith("gke-k8s")


def test_iam_bindings_are_bucket_scoped_to_the_ksa_principal(dev_run):
    member = (
        f"principal://iam.googleapis.com/projects/{MOCK_PROJECT_NUMBER}/locations/global/"
        "workloadIdentityPools/my-tpu-project.svc.id.goog/subject/ns/default/sa/ray-tpu-ksa"
    )
    bindings = sorted((b.inputs for b in dev_run.of_type(BUCKET_MEMBER)), key=lambda b: b["role"])
    # objectUser for the objects; the legacy bucket reader for storage.buckets.get, which MaxText
    # calls before it writes to a gs:// base and objectUser does not grant.
    assert bindings == [
        {"bucket": "my-tpu-project-maxtext-checkpoints", "role": role, "member": member}
        for role in ("roles/storage.legacyBucketReader", "roles/storage.objectUser")
    ]
    assert not [r for r in dev_run.resources if r.type.startswith("gcp:projects/")]
    assert "gcp:organizations/getProject:getProject" in dev_run.invokes


def test_claim_template_requests_one_netdev_per_dcn_network(dev_run):
    claim = dev_run.one(CLAIM).inputs
    validate_core(claim)
    assert claim["spec"]["spec"]["devices"]["requests"] == [
        {
            "name": "req-netdev",
            "exactly": {"deviceClassName": "netdev.google.com", "allocationMode": "ExactCount", "count": 2},
        }
    ]


@pytest.fixture(scope="module")
def ray_cluster(dev_run):
    manifest = dev_run.one(RAYCLUSTER).inputs
    validate_ray_cluster(manifest)
    return manifest


def test_ray_head_matches_the_tutorial(ray_cluster):
    head = ray_cluster["spec"]["headGroupSpec"]
    assert head["serviceType"] == "ClusterIP"
    pod = head["template"]["spec"]
    container = pod["containers"][0]
    assert [(p["containerPort"], p["name"]) for p in container["ports"]] == [
        (6379, "gcs-server"),
        (8265, "dashboard"),
        (10001, "client"),
    ]
    assert container["resources"] == {"limits": {"memory": "16Gi"}, "requests": {"cpu": "8", "memory": "16Gi"}}
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/data", "/dev/shm"}
    assert pod["serviceAccountName"] == "ray-tpu-ksa"
    assert head["template"]["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"


def test_tpu_worker_group_is_one_replica_per_slice(ray_cluster):
    (group,) = ray_cluster["spec"]["workerGroupSpecs"]
    assert (group["groupName"], group["replicas"], group["numOfHosts"]) == ("tpu-group", 2, 4)
    assert (group["minReplicas"], group["maxReplicas"]) == (1, 2)
    pod = group["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["google.com/tpu"] == "4"
    assert container["resources"]["requests"]["google.com/tpu"] == "4"
    assert container["resources"]["claims"] == [{"name": "netdev"}]
    assert pod["resourceClaims"] == [{"name": "netdev", "resourceClaimTemplateName": "maxtext-tpu-cluster-dcn-netdev"}]
    assert pod["nodeSelector"] == {
        "iam.gke.io/gke-metadata-server-enabled": "true",
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
    }
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["MEGASCALE_NUM_SLICES"] == "2"
    assert env["MEGASCALE_PORT"] == "9915"
    assert env["JAX_PLATFORMS"] == "tpu,cpu"
    assert env["ENABLE_PJRT_COMPATIBILITY"] == "true"
    assert env["LIBTPU_INIT_ARGS"].endswith("--megascale_grpc_interface_prefixes=eth1,eth2,lo")
    volume = next(v for v in pod["volumes"] if "csi" in v)
    assert volume["csi"]["volumeAttributes"]["bucketName"] == "my-tpu-project-maxtext-checkpoints"
    assert not pod.get("hostNetwork")  # DRANET and GCS FUSE both refuse host-network pods


def test_the_bucket_mount_is_tuned_for_write_to_new_files_with_a_bounded_cache(ray_cluster):
    head = ray_cluster["spec"]["headGroupSpec"]["template"]["spec"]
    worker = ray_cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    for pod in (head, worker):
        volume = next(v for v in pod["volumes"] if "csi" in v)
        options = volume["csi"]["volumeAttributes"]["mountOptions"].split(",")
        assert options[:5] == ["implicit-dirs", "uid=1000", "gid=1000", "dir-mode=775", "file-mode=664"]
        assert "file-cache:max-size-mb:4096" in options and "file-cache:max-size-mb:-1" not in options
        assert {"metadata-cache:ttl-secs:-1", "metadata-cache:negative-ttl-secs:0",
                "file-cache:enable-parallel-downloads:true", "file-cache:cache-file-for-range-read:true"} <= set(options)
        assert len(options) == len(set(options)) and all(" " not in o for o in options)  # the CSI driver's format
        assert set(volume["csi"]["volumeAttributes"]) == {"bucketName", "mountOptions"}  # no bucket-wide prefetch


def test_ray_cluster_waits_for_slices_storage_and_claim(dev_run):
    ray = dev_run.one(RAYCLUSTER)
    names = {urn.rsplit("::", 1)[1] for urn in ray.dependencies}
    # A dependency on a component expands to its children.
    assert {"slice-0-pool", "slice-1-pool", "storage-ksa", "storage-object-user", "ray-netdev-claim"} <= names
    # RayTpuCluster takes the GcsWorkloadIdentity: its pods' service account is the identity's output, tied to
    # the account's bucket bindings (which name the bucket); and the WorkerImage, whose pushed digest its pods run.
    from_inputs = {urn.rsplit("::", 1)[1] for urn in ray.input_dependencies["spec"]}
    assert from_inputs == {"storage-ksa", "storage-object-user", "storage-bucket-reader", "worker-image-image"}
    bindings = [r for r in dev_run.resources if r.urn.endswith(("::storage-object-user", "::storage-bucket-reader"))]
    assert [names for names in ({u.rsplit("::", 1)[1] for u in b.input_dependencies["bucket"]} for b in bindings)] == [
        {"storage-bucket"}, {"storage-bucket"}]


TUTORIAL_MANIFEST = REPO_ROOT / "tests" / "fixtures" / "tutorial" / "ray-cluster.tpu-multi-slice.yaml"
TUTORIAL_SHA256 = "b70765da206cdc77ecba54a38fcbcbb783b6d72fc8bfd4d6e0acb65acb2dc9fd"
"""The published file's digest (tests/fixtures/tutorial/README.md): the fixture is the tutorial's, unedited."""


def test_ray_cluster_equals_the_tutorial_manifest_except_documented_changes(ray_cluster):
    assert hashlib.sha256(TUTORIAL_MANIFEST.read_bytes()).hexdigest() == TUTORIAL_SHA256
    text = TUTORIAL_MANIFEST.read_text()
    text = text.replace("${KSA_NAME}", "ray-tpu-ksa").replace("${GS_BUCKET}", "my-tpu-project-maxtext-checkpoints")
    tutorial = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "RayCluster")

    ours = yaml.safe_load(yaml.safe_dump(ray_cluster))
    # The documented deviations, undone one by one; everything else must be identical.
    ours["metadata"].pop("namespace")
    ours["spec"]["headGroupSpec"].pop("serviceType")
    group = ours["spec"]["workerGroupSpecs"][0]
    group.pop("minReplicas"), group.pop("maxReplicas")
    group["template"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "two-netdev"
    group["template"]["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    libtpu = next(e for e in group["template"]["spec"]["containers"][0]["env"] if e["name"] == "LIBTPU_INIT_ARGS")
    after = "--xla_tpu_enable_async_collective_fusion_multiple_steps"
    libtpu["value"] = libtpu["value"].replace(after, f"{ALL_GATHER_FUSION} {after}")
    # docs/security.md: token auth (which needs rayVersion), a pinned image, the NetworkPolicy's label,
    # hardened containers and no Kubernetes API token in the pods.
    ours["spec"].pop("authOptions"), ours["spec"].pop("rayVersion")
    ours["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].pop("securityContext")
    for template in (ours["spec"]["headGroupSpec"]["template"], group["template"]):
        template["metadata"].pop("labels")
        template["spec"].pop("automountServiceAccountToken")
        template["spec"]["containers"][0].update(image="rayproject/ray:nightly-py312-tpu", imagePullPolicy="Always")
    for pod in (ours["spec"]["headGroupSpec"]["template"]["spec"], group["template"]["spec"]):
        next(v for v in pod["volumes"] if "csi" in v)["csi"]["volumeAttributes"]["mountOptions"] = (
            "implicit-dirs,uid=1000,gid=1000,dir-mode=775,file-mode=664,file-cache:max-size-mb:-1"
        )
    assert with_integers(ours) == tutorial


def test_stack_outputs_feed_the_submit_step(dev_run):
    assert dev_run.outputs == {
        "project": "my-tpu-project",
        "region": "us-east5",
        "zone": "us-east5-b",
        "clusterName": "ray-tpu-multislice",
        "clusterLocation": "us-east5-b",
        "clusterVersion": MOCK_CHANNEL_VERSIONS["RAPID"][2],  # the channel's newest 1.35
        "namespace": "default",
        "ksaName": "ray-tpu-ksa",
        "bucketName": "my-tpu-project-maxtext-checkpoints",
        "bucketHierarchicalNamespace": False,
        "checkpointDir": "gs://my-tpu-project-maxtext-checkpoints",
        "rayClusterName": "maxtext-tpu-cluster",
        "rayHeadService": "maxtext-tpu-cluster-head-svc",
        "rayDashboardPort": 8265,
        "workerImage": dev_run.one("docker-build:index:Image").inputs["tags"][0] + "@" + dev_run.outputs["workerImage"].split("@")[1],
        "tpuGeneration": "v6e",
        "acceleratorType": "TPU-V6E",
        "topology": "4x4",
        "numSlices": 2,
        "hostsPerSlice": 4,
        "chipsPerHost": 4,
        "chipsPerSlice": 16,
        "capacity": "on-demand",
        "scaleToZero": False,
        "rayClusterSpec": None,
        "elasticMinSlices": 1,
        # A held stack's runs go to its RayCluster: no queue.
        "localQueue": None,
        "clusterQueue": None,
        "podsReadyTimeoutS": None,
        "requeueLimit": None,
        "runs": [{
            "name": "baseline-8b",
            "submissionId": dev_run.one(RAYJOB).inputs["spec"]["jobId"],
            "checkpointDir": "gs://my-tpu-project-maxtext-checkpoints/baseline-8b/checkpoints",
        }],
    }


def test_every_child_is_parented_to_its_component(dev_run):
    components = {"gke-ray-tpu:index:" + n for n in ("GkeRayCluster", "DcnNetworks", "TpuSliceNodePool", "GcsWorkloadIdentity",
                                                     "RayTpuCluster", "MaxTextRun", "WorkerImage")}
    for resource in dev_run.resources:
        if resource.type in components:
            assert resource.parent_type == "pulumi:pulumi:Stack", resource.urn
        else:
            assert resource.parent_type in components, resource.urn
