"""Who can run code on the stack's Ray clusters: token auth, the NetworkPolicy, hardened pods, the image.

Every Ray cluster the stack can declare, in every capacity mode and on Autopilot, is checked under the mock
engine; the NetworkPolicy is also evaluated against the peers that must and must not reach Ray's ports.
"""

from __future__ import annotations

import json

import pytest
import ray
import yaml

from gke_ray_tpu.components.ray_manifests import (
    DASHBOARD_PORT, GCS_PORT, CLIENT_PORT, HEAD_METRICS_EXPORT_PORT, RAY_POD_LABEL,
    WORKER_METRICS_EXPORT_PORT, image_pull_policy, is_moving_tag,
)
from gke_ray_tpu.components.ray_tpu_cluster import DEFAULT_IMAGE
from gke_ray_tpu.core.kuberay import RAY_VERSION, has_token_auth
from gke_ray_tpu.stack import preview
from gke_ray_tpu.stack.mock_engine import MockGke, OfflineRun, run_offline
from tests.conftest import with_keys
from tests.schemas import (
    RAYCLUSTER_CRD as RAYCLUSTER_CRD_FILE, served_kuberay_crds, validate_core, validate_ray_cluster, validate_ray_job,
)
from tests.test_gke_rules import kuberay_15_crd
from tests.test_stack_dev import RAYCLUSTER, RAYJOB

NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
DASHBOARD_AGENT_PORT = 52365  # Ray's default; it accepts job submissions too
MIN_RAY_FOR_TOKEN_AUTH = (2, 52)

MODES = {
    "on-demand": {},
    "on-demand-scaled-to-zero": {"scaleToZero": "true"},
    "spot": {"capacity": "spot"},
    "spot-scaled-to-zero": {"capacity": "spot", "scaleToZero": "true"},
    "reservation": {"capacity": "reservation", "reservation": "trillium"},
    "flex-start": {"capacity": "flex-start", "maxRunDuration": "86400"},
    "autopilot": {"clusterMode": "autopilot"},
    "autopilot-spot-scaled-to-zero": {"clusterMode": "autopilot", "capacity": "spot", "scaleToZero": "true"},
}


def ray_cluster_specs(run) -> list[dict]:
    """Every Ray cluster the run declares: its RayClusters, and the clusters its RayJobs bring."""
    specs = []
    for cluster in run.of_type(RAYCLUSTER):
        validate_ray_cluster(cluster.inputs)
        specs.append(cluster.inputs["spec"])
    for job in run.of_type(RAYJOB):
        validate_ray_job(job.inputs)
        if job.inputs["spec"].get("rayClusterSpec"):
            specs.append(job.inputs["spec"]["rayClusterSpec"])
    assert specs, "the stack declares no Ray cluster"
    return specs


def templates(cluster_spec: dict) -> list[tuple[str, dict]]:
    head = cluster_spec["headGroupSpec"]["template"]
    return [("head", head)] + [(group["groupName"], group["template"]) for group in cluster_spec["workerGroupSpecs"]]


# -- a NetworkPolicy's ingress rules, as Kubernetes applies them -----------------------------------------------


def _selects(selector: dict, labels: dict) -> bool:
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        assert expression["operator"] == "In", expression  # the only operator the stack's policy uses
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def admits(policy: dict, pod_labels: dict, source_namespace: str, source_labels: dict, port: int) -> bool:
    """Whether ``policy`` (in its namespace) lets a pod of ``source_namespace`` reach ``port`` of a pod with
    ``pod_labels``. A pod the policy does not select is not isolated by it, and is reported as admitted."""
    spec = policy["spec"]
    if not _selects(spec["podSelector"], pod_labels):
        return True
    namespace = policy["metadata"]["namespace"]
    namespace_labels = {"kubernetes.io/metadata.name": source_namespace}
    for rule in spec.get("ingress") or []:
        ports = [p["port"] for p in rule.get("ports") or []]
        if ports and port not in ports:
            continue
        if not rule.get("from"):
            return True  # a rule without sources admits every source
        for peer in rule["from"]:
            in_namespace = (
                _selects(peer["namespaceSelector"], namespace_labels) if "namespaceSelector" in peer
                else source_namespace == namespace
            )
            if in_namespace and _selects(peer.get("podSelector") or {}, source_labels):
                return True
    return False


RAY_PORTS = (GCS_PORT, DASHBOARD_PORT, CLIENT_PORT, DASHBOARD_AGENT_PORT, HEAD_METRICS_EXPORT_PORT,
             WORKER_METRICS_EXPORT_PORT, 9915, 12345, 40000)
"""Ray's fixed ports, the agent's, the metrics ports, megascale's, one of Ray's worker ports, one random."""


@pytest.fixture(scope="module", params=list(MODES), ids=list(MODES))
def mode_run(request, run_stack):
    return run_stack(**MODES[request.param])


def test_every_ray_cluster_in_every_mode_has_token_auth_on_a_ray_that_supports_it(mode_run):
    for spec in ray_cluster_specs(mode_run):
        assert has_token_auth(spec)
        assert spec["authOptions"] == {"mode": "token"}  # KubeRay makes the Secret: no secretName to leak
        assert tuple(int(n) for n in spec["rayVersion"].split(".")[:2]) >= MIN_RAY_FOR_TOKEN_AUTH


def test_every_ray_container_in_every_mode_is_hardened(mode_run):
    for spec in ray_cluster_specs(mode_run):
        # No Ray autoscaler sidecar (tests/test_ray_node_provider.py says why): nothing calls the Kubernetes API.
        assert "enableInTreeAutoscaling" not in spec
        for group, template in templates(spec):
            pod = template["spec"]
            assert pod["automountServiceAccountToken"] is False, group
            assert "securityContext" not in pod or not pod["securityContext"].get("privileged")
            for container in pod["containers"]:
                context = container["securityContext"]
                assert context["allowPrivilegeEscalation"] is False
                assert context["capabilities"] == {"drop": ["ALL"]}
                assert context["seccompProfile"] == {"type": "RuntimeDefault"}
                assert context["runAsNonRoot"] is True and context["runAsUser"] != 0
                assert not context.get("privileged")


def test_in_every_mode_a_network_policy_guards_every_ray_pod_and_admits_only_what_ray_needs(mode_run):
    (policy_resource,) = mode_run.of_type(NETWORK_POLICY)
    policy = policy_resource.inputs
    validate_core(policy)  # the Kubernetes schema, strict
    namespace = policy["metadata"]["namespace"]
    assert namespace == mode_run.outputs["namespace"]
    for cluster in mode_run.of_type(RAYCLUSTER):  # none on a stack whose every run brings its own
        assert policy_resource.urn in cluster.dependencies  # in place before any Ray pod starts
    for spec in ray_cluster_specs(mode_run):
        for _, template in templates(spec):
            labels = template["metadata"]["labels"]
            ray_pod = {**labels, "ray.io/cluster": "anything"}  # KubeRay adds its own labels
            for port in RAY_PORTS:
                # Any port from a Ray pod of the same stack (a run's own cluster included) ...
                assert admits(policy, ray_pod, namespace, labels, port)
                # ... none from another pod of the namespace, another namespace, another stack's Ray pods.
                assert not admits(policy, ray_pod, namespace, {"app": "notebook"}, port)
                assert not admits(policy, ray_pod, "tenant-b", {"app": "notebook"}, port)
                assert not admits(policy, ray_pod, namespace, {RAY_POD_LABEL: "another-stack"}, port)
                # Managed Prometheus scrapes the metrics ports only, the operator reaches the Jobs API only.
                metrics = port in (HEAD_METRICS_EXPORT_PORT, WORKER_METRICS_EXPORT_PORT)
                assert admits(policy, ray_pod, "gmp-system", {"app": "collector"}, port) is metrics
                assert admits(policy, ray_pod, "gke-gmp-system", {"app": "collector"}, port) is metrics
                assert admits(policy, ray_pod, "kube-system", {}, port) is (port == DASHBOARD_PORT)
                # Not a pod that wears an operator's label elsewhere: anyone could create one.
                assert not admits(policy, ray_pod, "tenant-b", {"app.kubernetes.io/name": "kuberay-operator"}, port)


def test_the_policy_evaluator_can_tell_an_open_policy_from_a_closed_one(dev_run):
    (policy_resource,) = dev_run.of_type(NETWORK_POLICY)
    policy = policy_resource.inputs
    labels = {RAY_POD_LABEL: "maxtext-tpu-cluster"}
    opened = {**policy, "spec": {**policy["spec"], "ingress": [*policy["spec"]["ingress"], {}]}}
    assert admits(opened, labels, "tenant-b", {}, DASHBOARD_AGENT_PORT)
    assert not admits(policy, labels, "tenant-b", {}, DASHBOARD_AGENT_PORT)
    assert admits(policy, {"app": "unselected"}, "tenant-b", {}, GCS_PORT)  # a pod it does not isolate


def test_ray_version_is_the_driver_ray():
    assert RAY_VERSION == ray.__version__


def test_the_default_image_is_the_driver_ray_release_pulled_once():
    assert DEFAULT_IMAGE == f"rayproject/ray:{ray.__version__}-py312"
    assert not is_moving_tag(DEFAULT_IMAGE) and image_pull_policy(DEFAULT_IMAGE) == "IfNotPresent"


@pytest.mark.parametrize("image, moving", [
    ("rayproject/ray:nightly-py312-tpu", True),
    ("rayproject/ray:nightly", True),
    ("rayproject/ray:latest", True),
    ("rayproject/ray", True),
    ("rayproject/ray:nightly.260501.1c7c90-py312-tpu", False),  # one dated build
    ("rayproject/ray:2.60.0-py312", False),
    ("rayproject/ray@sha256:" + "0" * 64, False),
    ("localhost:5000/ray:nightly-py312", True),  # the registry's port is no tag
])
def test_moving_tags_are_told_apart_from_pinned_ones(image, moving):
    assert is_moving_tag(image) is moving
    assert image_pull_policy(image) == ("Always" if moving else "IfNotPresent")


def test_token_auth_is_on_only_when_the_mode_says_token():
    assert has_token_auth({"authOptions": {"mode": "token"}})
    assert not has_token_auth({"authOptions": {"mode": "disabled"}})
    assert not has_token_auth({"authOptions": {}})  # KubeRay's IsAuthEnabled wants the mode
    assert not has_token_auth({})


def test_a_moving_image_tag_gets_a_warning_at_preview_and_a_pinned_one_none(dev_config, dev_run, run_stack, tmp_path, capsys):
    moving = "rayproject/ray:nightly-py312-tpu"
    assert not [m for level, m in dev_run.logs if level == "warning" and "moving tag" in m]
    warnings = [m for level, m in run_stack(rayImage=moving).logs if level == "warning" and "moving tag" in m]
    assert warnings == [
        f"gke-ray-tpu:rayImage {moving} is a moving tag: every Ray pod start pulls whatever was last pushed under "
        "it and runs it with the bucket's rights; pin a release tag or a digest you tested (docs/security.md)"
    ]
    path = tmp_path / "Pulumi.moving.yaml"
    config = {key: (json.loads(value) if key.endswith(":runs") else value)
              for key, value in with_keys(dev_config, rayImage=moving).items()}
    path.write_text(yaml.safe_dump({"config": config}))
    assert preview.main(["--config-file", str(path), "--section", "training"]) == 0
    assert f"warning: gke-ray-tpu:rayImage {moving} is a moving tag" in capsys.readouterr().out


def test_the_clusters_kuberay_is_read_before_the_raycluster_and_one_that_would_drop_token_auth_is_refused(dev_config, run_stack):
    existing = {"existingClusterName": "shared-gke", "existingClusterLocation": "us-east5-b"}
    crd = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition::served-kuberay-rayclusters"
    (cluster,) = run_stack(**existing).of_type(RAYCLUSTER)
    # KubeRay's published CRD, read through the SDK's output types, passes as well as the mock's.
    published = json.loads(RAYCLUSTER_CRD_FILE.read_text())["spec"]
    run_offline(with_keys(dev_config, **existing), run=OfflineRun(), gke=MockGke(served_raycluster_crd=published))
    # The CRD is read (a read, not a resource the stack owns), and the RayCluster waits for its check; on a new
    # cluster too, once the cluster exists (the read goes through its provider).
    assert [urn for urn in cluster.dependencies if urn.endswith(crd)]
    (new_cluster,) = run_stack().of_type(RAYCLUSTER)
    assert [urn for urn in new_cluster.dependencies if urn.endswith(crd)]

    old = OfflineRun()
    with pytest.raises(ValueError, match=(
        r"invalid config gke-ray-tpu:existingClusterName='shared-gke': expected a cluster whose Ray operator "
        r"add-on runs KubeRay >= 1\.5\.1: its rayclusters\.ray\.io CRD has no authOptions, so its KubeRay is older "
        r"than 1\.5\.1 and drops the token auth the stack declares: its Ray clusters accept jobs from any pod"
    )):
        run_offline(with_keys(dev_config, **existing), run=old, gke=MockGke(served_raycluster_crd=kuberay_15_crd()["spec"]))
    assert old.of_type(RAYCLUSTER) == []  # never created open
    # The failed run's unawaited outputs do not leak into the next run in this process.
    assert run_offline(dev_config).of_type(RAYCLUSTER)


def test_the_crds_a_cluster_serves_are_checked_without_an_output_per_node_of_their_schemas(dev_config, monkeypatch):
    """The stack reads KubeRay's CRDs whole, as a cluster serves them; ``Output.all`` over the two specs would make an
    Output of every node of both schemas (what that costs a preview: bench/bench_crd_read.py). Each spec comes down to
    its problems first, so a run makes as many Outputs against the whole CRDs as against the mock's cut ones."""
    import pulumi

    made = []
    track = pulumi.Output._track  # every Output the SDK makes registers itself here (pulumi 3's output.py)

    def counted(self):
        made.append(self)
        track(self)

    monkeypatch.setattr(pulumi.Output, "_track", counted)
    counts = []
    for gke in (MockGke(), MockGke(**served_kuberay_crds())):
        made.clear()
        run = run_offline(dev_config, gke=gke)
        assert "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition" in run.reads and run.of_type(RAYJOB)
        counts.append(len(made))
    assert counts[1] == counts[0], counts
