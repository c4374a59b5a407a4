"""What GKE, KubeRay and Google's naming rules would refuse, caught before anything is registered."""

from __future__ import annotations

import copy
import importlib
import json

import pytest

from gke_ray_tpu.components.gcs_workload_identity import check_args as check_storage_args
from gke_ray_tpu.components.ray_manifests import port_use
from gke_ray_tpu.components.ray_tpu_cluster import spec_from_args
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.kuberay import auth_secret_name, supports_flat_resource_claims, supports_token_auth
from gke_ray_tpu.stack.component_keys import component_keys, config_keys
from gke_ray_tpu.stack.parse import parse_stack_config
from gke_ray_tpu.stack.mock_engine import MOCK_CHANNEL_VERSIONS, MockGke, OfflineRun, run_offline
from tests.conftest import with_keys
from tests.schemas import RAYCLUSTER_CRD
from tests.test_stack_dev import CLUSTER, RAYCLUSTER, tpu_pools
from gke_ray_tpu.training.driver.cluster_checks import check_kuberay
from gke_ray_tpu.training.driver.errors import ClusterError

IDENTITY = {"bucket_name": "b", "ksa_name": "ray-tpu-ksa", "namespace": "default"}
"""A GcsWorkloadIdentity as RayTpuCluster sees it."""


def refused(config: dict, gke: MockGke | None = None) -> ConfigError:
    run = OfflineRun()
    with pytest.raises(ConfigError) as error:
        run_offline(config, run=run, gke=gke)
    assert run.resources == [], [r.urn for r in run.resources]
    return error.value


# -- versions ---------------------------------------------------------------------------------------------------


def test_the_minor_follows_the_channels_newest_patch(dev_config):
    newest = MOCK_CHANNEL_VERSIONS["RAPID"][2]
    assert run_offline(dev_config).outputs["clusterVersion"] == newest
    later = {**MOCK_CHANNEL_VERSIONS, "RAPID": ["1.35.9-gke.100", *MOCK_CHANNEL_VERSIONS["RAPID"]]}
    run = run_offline(dev_config, gke=MockGke(channel_versions=later))
    assert run.outputs["clusterVersion"] == "1.35.9-gke.100"
    assert run.one(CLUSTER).inputs["minMasterVersion"] == "1.35"  # the program's input does not change


def test_a_pin_the_channel_dropped_fails_preview_with_what_to_do(dev_config):
    # Rapid dropped 1.34.1-gke.1829001 in November 2025; the tutorial's 1.35.2-gke.1842000 went to Regular.
    error = refused(with_keys(dev_config, clusterVersion="1.34.1-gke.1829001"))
    assert error.key == "gke-ray-tpu:clusterVersion"
    assert error.expected == (
        "a version the RAPID channel in us-east5-b offers (1.34.1-gke.1829001 was dropped or never offered; "
        "its newest 1.34 is 1.34.6-gke.1154000); the minor 1.34 follows the channel"
    )
    run = run_offline(with_keys(dev_config, clusterVersion="1.35.2-gke.1842000", releaseChannel="REGULAR"))
    assert run.one(CLUSTER).inputs["minMasterVersion"] == "1.35.2-gke.1842000"
    assert run.outputs["clusterVersion"] == "1.35.2-gke.1842000"


def test_a_minor_the_channel_does_not_offer_and_one_below_the_dranet_floor(dev_config):
    assert refused(with_keys(dev_config, clusterVersion="1.37")).expected.startswith("a minor the RAPID channel")
    # STABLE's newest 1.35 is 1.35.2-gke.1269001: below the Autopilot DRANET minimum.
    error = refused(with_keys(dev_config, clusterMode="autopilot", releaseChannel="STABLE"))
    assert (error.key, error.value) == ("gke-ray-tpu:clusterVersion", "1.35.2-gke.1269001")
    assert "1.35.2-gke.1842000 or later" in error.expected
    # Without DCN networks there is no DRANET floor: v5p stacks can use an older minor.
    assert run_offline(with_keys(dev_config, tpuGeneration="v5p", tpuTopology="2x2x4", dcnCidrs=None,
                                 clusterVersion="1.33", releaseChannel="STABLE")).resources


def test_without_dcn_networks_the_bucket_mount_options_set_the_floor(dev_config):
    """Google documents the RayCluster's GCS FUSE mount options from GKE 1.32.2-gke.1297001 (gcsfuse 3):
    below both DRANET minimums, so it binds only a stack without DCN networks."""
    from gke_ray_tpu.core.gke import DRANET_MIN_VERSION, GCS_FUSE_TUNING_MIN_VERSION, parse_version

    floor = parse_version(GCS_FUSE_TUNING_MIN_VERSION, "floor")
    assert all(floor < parse_version(v, "dranet") for v in DRANET_MIN_VERSION.values())
    v5p = dict(tpuGeneration="v5p", tpuTopology="2x2x4", dcnCidrs=None)
    for version in ("1.31", "1.32.2-gke.1296000"):
        error = refused(with_keys(dev_config, clusterVersion=version, **v5p))
        assert (error.key, error.value) == ("gke-ray-tpu:clusterVersion", version)
        assert error.expected == "1.32.2-gke.1297001 or later: the RayCluster's GCS FUSE mount options need it"


def test_unspecified_channel_picks_from_every_offered_version(dev_config):
    run = run_offline(with_keys(dev_config, releaseChannel="UNSPECIFIED"))
    assert run.outputs["clusterVersion"] == "1.35.3-gke.1993000"


# -- an existing cluster ------------------------------------------------------------------------------------------

EXISTING = {"existingClusterName": "shared-gke", "existingClusterLocation": "us-east5-b"}


def test_an_existing_cluster_missing_what_the_stack_relies_on_is_refused_listing_it_all(dev_config):
    lacking = MockGke(cluster_changes={
        "datapathProvider": "LEGACY_DATAPATH",
        "workloadIdentityConfigs": [],
        "addonsConfigs": [{"rayOperatorConfigs": [{"enabled": False}], "gcsFuseCsiDriverConfigs": []}],
        "masterVersion": "1.33.5-gke.1697000",
    })
    error = refused(with_keys(dev_config, **EXISTING), gke=lacking)
    assert error.key == "gke-ray-tpu:existingClusterName" and error.value == "shared-gke"
    assert error.expected == (
        "an existing cluster with Dataplane V2 (datapath LEGACY_DATAPATH; DRANET needs ADVANCED_DATAPATH); "
        "Workload Identity pool my-tpu-project.svc.id.goog (has none); the Ray operator add-on; "
        "the GCS FUSE CSI driver add-on; GKE 1.34.1-gke.1829001 or later for DRANET (runs 1.33.5-gke.1697000)"
    )
    older = MockGke(cluster_changes={"masterVersion": "1.31.9-gke.1044000"})
    error = refused(with_keys(dev_config, **EXISTING, tpuGeneration="v5p", tpuTopology="2x2x4", dcnCidrs=None),
                    gke=older)
    assert error.expected == (
        "an existing cluster with GKE 1.32.2-gke.1297001 or later for the GCS FUSE mount options (runs 1.31.9-gke.1044000)"
    )


def test_an_existing_autopilot_cluster_for_a_standard_stack_is_refused(dev_config):
    error = refused(with_keys(dev_config, **EXISTING), gke=MockGke(cluster_changes={"enableAutopilot": True}))
    assert error.expected == "an existing cluster with clusterMode standard (the cluster is autopilot)"


def test_an_existing_cluster_with_everything_is_read_not_created(dev_config):
    run = run_offline(with_keys(dev_config, **EXISTING))
    assert run.of_type(CLUSTER) == [] and "gcp:container/getCluster:getCluster" in run.invokes
    assert {p.inputs["cluster"] for p in tpu_pools(run)} == {"shared-gke"}
    assert run.outputs["clusterVersion"] == "1.35.3-gke.1993000"  # what it runs


# -- pods, reservations ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_no_container_is_privileged(run_stack, mode):
    """Autopilot refuses privileged pods (autogke-disallow-privilege) and GKE >= 1.28 needs none for TPUs."""
    manifest = run_stack(clusterMode=mode).one(RAYCLUSTER).inputs["spec"]
    pods = [manifest["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in manifest["workerGroupSpecs"]]
    for pod in pods:
        for container in pod["containers"]:
            assert not (container.get("securityContext") or {}).get("privileged"), container["name"]


@pytest.mark.parametrize(
    "changes, affinity",
    [
        ({}, {"consumeReservationType": "ANY_RESERVATION"}),
        ({"capacity": "spot"}, {"consumeReservationType": "NO_RESERVATION"}),
        ({"capacity": "flex-start"}, {"consumeReservationType": "NO_RESERVATION"}),
        ({"capacity": "reservation", "reservation": "trillium"}, {"consumeReservationType": "SPECIFIC_RESERVATION",
                                       "key": "compute.googleapis.com/reservation-name", "values": ["trillium"]}),
        ({"capacity": "reservation", "reservation": "projects/shared-tpus/reservations/trillium"},
         {"consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
          "values": ["projects/shared-tpus/reservations/trillium"]}),
    ],
)
def test_reservation_affinity_is_always_stated(run_stack, changes, affinity):
    for pool in tpu_pools(run_stack(**changes)):
        assert pool.inputs["nodeConfig"]["reservationAffinity"] == affinity


# -- names the stack derives from a value ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("clusterName", "c" * 41, "a GKE cluster or node pool name: 1-40"),
        ("clusterName", "a" * 40, None),
        ("rayClusterName", "r" * 42, "a multi-host TPU RayCluster name: a DNS-1035 label of 1-41"),
        ("rayClusterName", "1cluster", "a RayCluster name: a DNS-1035 label"),
        ("ksaName", "k" * 120, "Workload Identity subject"),
        ("bucketName", "ckpt.example.com", "no dots"),
        ("bucketName", "team-g00gle-ckpt", "not containing 'google'"),
        ("bucketName", "goog-ckpt", "not starting with 'goog'"),
        ("namespace", "Training", "a Kubernetes DNS-1123 label"),
        ("reservation", "projects/x/reservations/r", "a project of the shared reservation"),
        ("gcp:project", "my_project", "a Google Cloud project ID"),
    ],
)
def test_names_are_checked_under_the_key_they_come_from(dev_config, key, value, expected):
    config = with_keys(dev_config, **{key: value})
    if expected is None:
        assert run_offline(config).resources  # 40 is the longest cluster name, and its derived names fit
        return
    error = refused(config)
    assert error.key == (key if ":" in key else f"gke-ray-tpu:{key}") and expected in error.expected


def test_a_derived_firewall_name_over_63_is_refused_under_clustername():
    from gke_ray_tpu.components.dcn_networks import check_name_prefix

    check_name_prefix("a" * 42, 2, key="gke-ray-tpu:clusterName")  # 42 + 21 = 63: fits
    with pytest.raises(ConfigError) as error:
        check_name_prefix("a" * 43, 2, key="gke-ray-tpu:clusterName")
    assert "DCN firewall rule name" in error.value.expected and error.value.key == "gke-ray-tpu:clusterName"


@pytest.mark.parametrize(
    "keys, config_key, component_check, component_key, expected",
    [
        ({"capacity": "spot", "reservation": "r1"}, "gke-ray-tpu:reservation",
         lambda: importlib.import_module("gke_ray_tpu.components.tpu_slice_node_pool").check_args(
             {"capacity": "spot", "reservation": "r1"}),
         "TpuSliceNodePoolArgs.reservation", "only that mode consumes a named reservation (capacity is spot)"),
        ({"clusterMode": "autopilot", "releaseChannel": "UNSPECIFIED"}, "gke-ray-tpu:releaseChannel",
         lambda: importlib.import_module("gke_ray_tpu.components.gke_cluster").check_args(
             {"cluster_name": "c", "location": "us-east5", "project": "p", "mode": "autopilot",
              "release_channel": "UNSPECIFIED"}),
         "GkeRayClusterArgs.release_channel", "Autopilot clusters always have one"),
        ({"dcnCidrs": '["10.50.0.0/16", "10.60.0.0/16", "10.70.0.0/16"]'}, "gke-ray-tpu:dcnCidrs",
         lambda: importlib.import_module("gke_ray_tpu.components.tpu_slice_node_pool").check_args(
             {"additional_networks": [{"network": f"n{i}", "subnetwork": f"s{i}"} for i in range(3)]}),
         "TpuSliceNodePoolArgs.additional_networks", "at most 2 networks: a ct6e-standard-4t host has 2 NICs"),
    ],
    ids=["spot-and-reservation", "autopilot-without-channel", "more-networks-than-nics"],
)
def test_a_rule_across_arguments_is_the_components_own_under_either_key(
    dev_config, keys, config_key, component_check, component_key, expected
):
    """The stack refuses it under the config key before anything is registered; the component alone, under its argument."""
    error = refused(with_keys(dev_config, **keys))
    assert error.key == config_key and expected in error.expected
    with pytest.raises(ConfigError) as direct:
        component_check()
    assert direct.value.key == component_key and expected in direct.value.expected


def test_one_single_host_slice_may_use_a_longer_raycluster_name(dev_config):
    config = with_keys(dev_config, tpuTopology="2x2", numSlices="1", elasticMinSlices=None, rayClusterName="r" * 53,
                       runs=None)
    assert run_offline(config).one(RAYCLUSTER).inputs["metadata"]["name"] == "r" * 53
    assert refused(with_keys(config, rayClusterName="r" * 54)).key == "gke-ray-tpu:rayClusterName"


# -- what the Ray pods would refuse --------------------------------------------------------------------------------


def ports_in_manifest(raycluster: dict) -> set[int]:
    """Every port the RayCluster sets for its pods: container ports and rayStartParams' *-port values."""
    spec = raycluster["spec"]
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    ports = {int(v) for g in groups for k, v in g["rayStartParams"].items() if k.endswith("port")}
    for group in groups:
        for container in group["template"]["spec"]["containers"]:
            ports |= {p["containerPort"] for p in container.get("ports", [])}
    return ports


@pytest.mark.parametrize(
    ("port", "why"),
    [(6379, "GCS"), (8082, "metrics export"), (8265, "dashboard"), (10001, "client"), (10002, "worker port range"),
     (19999, "worker port range"), (32768, "at random"), (52365, "at random"), (65535, "at random")],
)
def test_a_megascale_port_ray_may_hold_is_refused_by_the_stack_and_the_component(dev_config, port, why):
    error = refused(with_keys(dev_config, megascalePort=str(port)))
    assert error.key == "gke-ray-tpu:megascalePort" and why in error.expected
    with pytest.raises(ConfigError) as direct:
        spec_from_args({"workload_identity": IDENTITY, "megascale_port": port})
    assert direct.value.key == "RayTpuClusterArgs.megascale_port" and why in direct.value.expected


def test_every_port_the_manifest_sets_is_one_megascale_may_not_take(dev_run):
    ports = ports_in_manifest(dev_run.one(RAYCLUSTER).inputs)
    assert ports == {6379, 8082, 8265, 10001}
    for port in ports:
        assert port_use(port) is not None
    for port in (1024, 9915, 10000, 20000, 32767):
        assert port_use(port) is None and spec_from_args({"workload_identity": IDENTITY, "megascale_port": port})


def test_the_ray_cluster_component_alone_refuses_an_empty_image():
    with pytest.raises(ConfigError) as error:
        spec_from_args({"workload_identity": IDENTITY, "image": ""})
    assert error.value.key == "RayTpuClusterArgs.image"


def test_the_storage_component_alone_refuses_a_service_account_every_namespace_has():
    with pytest.raises(ConfigError) as error:
        check_storage_args({"bucket_name": "my-ckpt", "ksa_name": "default"})
    assert error.value.key == "GcsWorkloadIdentityArgs.ksa_name"


def test_errors_raised_inside_components_name_the_config_key(dev_config):
    cfg = parse_stack_config(dev_config)
    with pytest.raises(ConfigError) as error, config_keys(cfg):
        raise ConfigError("RayTpuClusterArgs.image", "x y", "an image")
    assert error.value.key == "gke-ray-tpu:rayImage"
    with pytest.raises(ConfigError) as error, config_keys(cfg):
        raise ConfigError("something-else", 1, "x")
    assert error.value.key == "something-else"  # not a component argument: left as it is


def test_the_key_behind_each_component_argument_follows_from_the_config_model(dev_config):
    """The map that used to be kept by hand, now read off the fields' ``feeds``: each argument the stack sets
    names the key the user writes, including where two keys feed one argument."""
    keys = component_keys(parse_stack_config(dev_config))
    assert {argument: keys[argument] for argument in (
        "GkeRayClusterArgs.cluster_name", "GkeRayClusterArgs.cpu_node_count", "DcnNetworksArgs.name_prefix",
        "TpuSliceNodePoolArgs.max_run_duration_s", "TpuSliceNodePoolArgs.additional_networks",
        "GcsWorkloadIdentityArgs.hierarchical_namespace", "RayTpuClusterArgs.compute_class",
        "RayTpuClusterArgs.dcn_interfaces", "RayTpuClusterArgs.image", "MaxTextRunArgs.backoff_limit",
    )} == {
        "GkeRayClusterArgs.cluster_name": "gke-ray-tpu:clusterName",
        "GkeRayClusterArgs.cpu_node_count": "gke-ray-tpu:cpuNodeCount",
        "DcnNetworksArgs.name_prefix": "gke-ray-tpu:clusterName",
        "TpuSliceNodePoolArgs.max_run_duration_s": "gke-ray-tpu:maxRunDuration",
        "TpuSliceNodePoolArgs.additional_networks": "gke-ray-tpu:dcnCidrs",
        "GcsWorkloadIdentityArgs.hierarchical_namespace": "gke-ray-tpu:bucketHierarchicalNamespace",
        "RayTpuClusterArgs.compute_class": "gke-ray-tpu:rayClusterName",
        "RayTpuClusterArgs.dcn_interfaces": "gke-ray-tpu:dcnCidrs",
        "RayTpuClusterArgs.image": "gke-ray-tpu:rayImage",
        "MaxTextRunArgs.backoff_limit": "gke-ray-tpu:runs",
    }
    existing = component_keys(parse_stack_config(with_keys(
        dev_config, existingClusterName="team-gke", existingClusterLocation="us-east5-b")))
    assert existing["GkeRayClusterArgs.cluster_name"] == "gke-ray-tpu:existingClusterName"
    assert existing["GkeRayClusterArgs.location"] == "gke-ray-tpu:existingClusterLocation"


def test_every_argument_the_stack_wires_from_config_names_its_key(dev_config):
    """Each argument the wiring sets from a config value has a key behind it (no argument left unmapped), and
    every argument a field declares it feeds exists in that component's arguments."""
    from gke_ray_tpu.components import dcn_networks, gcs_workload_identity, gke_cluster, maxtext_run, ray_tpu_cluster
    from gke_ray_tpu.components import tpu_queue, tpu_slice_node_pool, worker_image
    from gke_ray_tpu.stack import wiring

    cfg = parse_stack_config(dev_config)
    # A stack whose one flex-start slice is queued, in a cohort: every queue argument set.
    queued = parse_stack_config(with_keys(
        dev_config, capacity="flex-start", numSlices="1", queuedProvisioning="true", maxRunDuration="86400",
        cohort="research", borrowingLimit="16", lendingLimit="8", podsReadyTimeout="900", requeueLimit="2",
        installKueue="true", queueingStrategy="BestEffortFIFO"))
    keys = component_keys(queued)
    args = {
        "GkeRayClusterArgs": wiring.gke_cluster_args(cfg),
        "DcnNetworksArgs": wiring.dcn_networks_args(cfg),
        "TpuSliceNodePoolArgs": wiring.node_pool_args(queued, 0, None, []),
        "GcsWorkloadIdentityArgs": wiring.workload_identity_args(cfg, "123"),
        "RayTpuClusterArgs": wiring.ray_cluster_args(cfg, IDENTITY),
        "WorkerImageArgs": wiring.worker_image_args(cfg, "123"),
        "MaxTextRunArgs": wiring.run_args(cfg, 0, None, {"local_queue": "q"}),
        "TpuQueueArgs": wiring.queue_args(queued, None),
    }
    assert set(args["TpuQueueArgs"]) == set(tpu_queue.TpuQueueArgs.__annotations__)
    # What the wiring passes that is no config value: resources, the other components, and positions.
    not_from_config = {"TpuSliceNodePoolArgs.cluster", "TpuSliceNodePoolArgs.slice_index",
                       "RayTpuClusterArgs.workload_identity", "MaxTextRunArgs.ray_cluster", "MaxTextRunArgs.queue",
                       "TpuQueueArgs.ray_cluster"}
    wired = {f"{component}.{name}" for component, given in args.items() for name in given}
    assert sorted(wired - not_from_config - set(keys)) == []
    declared = {f"{cls.__name__}.{name}" for cls in (
        gke_cluster.GkeRayClusterArgs, dcn_networks.DcnNetworksArgs, tpu_slice_node_pool.TpuSliceNodePoolArgs,
        gcs_workload_identity.GcsWorkloadIdentityArgs, ray_tpu_cluster.RayTpuClusterArgs, maxtext_run.MaxTextRunArgs,
        worker_image.WorkerImageArgs,
        tpu_queue.TpuQueueArgs,
    ) for name in cls.__annotations__}
    assert sorted(set(keys) - declared) == []


# -- the KubeRay the cluster serves -------------------------------------------------------------------------------


class FakeExtensions:
    def __init__(self, crd=None, status=None):
        self.crd, self.status = crd, status

    def read_custom_resource_definition(self, name):
        from tests.fakes import api_error, forbidden, not_found

        assert name == "rayclusters.ray.io"
        crds = ("apiextensions.k8s.io", "customresourcedefinitions")
        if self.status == 403:
            raise api_error(forbidden(*crds, name, 'User "someone@example.com" cannot get resource '
                                                   '"customresourcedefinitions" in API group "apiextensions.k8s.io" '
                                                   'at the cluster scope'))
        if self.status == 404:
            raise api_error(not_found(*crds, name))
        return self.crd


def kuberay_13_crd() -> dict:
    """The vendored CRD with the pod's resourceClaims as KubeRay 1.3 had them (source.resourceClaimTemplateName)."""
    crd = json.loads(RAYCLUSTER_CRD.read_text())
    old = copy.deepcopy(crd)
    version = next(v for v in old["spec"]["versions"] if v["name"] == "v1")
    node = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["workerGroupSpecs"]["items"]
    claims = node["properties"]["template"]["properties"]["spec"]["properties"]["resourceClaims"]["items"]
    claims["properties"] = {"name": {"type": "string"},
                            "source": {"type": "object", "properties": {"resourceClaimTemplateName": {"type": "string"}}}}
    return old


def test_the_served_crd_tells_a_kuberay_that_keeps_the_dcn_claim():
    assert supports_flat_resource_claims(json.loads(RAYCLUSTER_CRD.read_text()))
    assert not supports_flat_resource_claims(kuberay_13_crd())
    notes: list[str] = []
    check_kuberay(FakeExtensions(json.loads(RAYCLUSTER_CRD.read_text())), notes.append)
    assert notes == []
    with pytest.raises(ClusterError, match="older than 1.4.0 and the TPU workers get no DCN NICs"):
        check_kuberay(FakeExtensions(kuberay_13_crd()), notes.append)
    with pytest.raises(ClusterError, match="no rayclusters.ray.io CRD: is GKE's Ray operator add-on enabled"):
        check_kuberay(FakeExtensions(status=404), notes.append)
    check_kuberay(FakeExtensions(status=403), notes.append)  # may not read CRDs: a note, not a failure
    assert notes == ["cannot read the rayclusters.ray.io CRD (403 Forbidden: customresourcedefinitions.apiextensions.k8s.io "
                     '"rayclusters.ray.io" is forbidden: User "someone@example.com" cannot get resource '
                     '"customresourcedefinitions" in API group "apiextensions.k8s.io" at the cluster scope): not checked '
                     "that KubeRay >= 1.5.1"]


def kuberay_15_crd() -> dict:
    """The vendored CRD without spec.authOptions, as KubeRay 1.4 to 1.5.0 served it."""
    crd = json.loads(RAYCLUSTER_CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    del version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["authOptions"]
    return crd


def test_a_kuberay_that_would_drop_token_auth_is_refused_before_submitting():
    assert supports_token_auth(json.loads(RAYCLUSTER_CRD.read_text()))
    assert not supports_token_auth(kuberay_15_crd())
    assert supports_flat_resource_claims(kuberay_15_crd())  # the DCN claim alone is no longer enough
    with pytest.raises(ClusterError, match="no authOptions, so its KubeRay is older than 1.5.1") as error:
        check_kuberay(FakeExtensions(kuberay_15_crd()), [].append)
    assert "accept jobs from any pod" in str(error.value)


def test_the_auth_secret_is_named_as_kuberay_names_it():
    # utils.CheckName: the last 50 characters, a leading digit or punctuation becomes "r".
    assert auth_secret_name("maxtext-tpu-cluster") == "maxtext-tpu-cluster"
    long_name = "baseline-8b-" + "a" * 45 + "-x7k2p"
    assert len(long_name) > 50
    assert auth_secret_name(long_name) == long_name[-50:] == "a" * 44 + "-x7k2p"
    assert auth_secret_name("-" + "b" * 49) == "r" + "b" * 49
    assert auth_secret_name("a" * 49 + "-9" + "c" * 49)[0] == "r"

