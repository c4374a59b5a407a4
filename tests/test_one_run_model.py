"""Every RayJob the stack or the submit command can make comes from the one builder (gke_ray_tpu.core.ray_job)
and passes KubeRay's own rules (ray_job_problems) and its CRDs.

The paths are enumerated as data (:data:`PATHS`): a run declared in the stack or submitted by the command, on a
stack that holds its slices or with a cluster of its own, in the stack's queue or not (a stack deployed before
its runs were queued), static or elastic, on every slice or fewer. Each path is run for real (the stack under the
mock engine, the command against the fake Kubernetes API, behind the fake Kueue where queued) while the builder
records what it builds; the RayJob that reaches the engine or the API must be one it built, and a queued one
passes Kueue's webhook (the one rule set) and carries the queue's label; a queued elastic run starts on its
minimum and may grow to every slice (``gke_ray_tpu.core.ray_job.elastic_cluster``).
"""

from __future__ import annotations

import json

import pytest
import yaml

from gke_ray_tpu.core import kueue, kueue_waiting, ray_job as builder
from gke_ray_tpu.core.kuberay import ray_job_problems
from gke_ray_tpu.stack.mock_engine import load_stack_file, run_offline
from tests.conftest import REPO_ROOT, source_files, with_keys
from tests.fakes import FakeJobsClient
from tests.schemas import validate_ray_cluster, validate_ray_job
from tests.test_stack_dev import RAYJOB
from tests.test_training_submit import STEPS_LOG, run_cli, write
# run_dirs (autouse) and kube come with the module that tests the own-cluster path; per_run_outputs too; queued and
# queued_outputs with the one that tests the queue.
from tests.test_training_submit_queue import queued, queued_outputs  # noqa: F401
from tests.test_training_submit_run_cluster import kube, per_run_outputs, run_dirs  # noqa: F401

ELASTIC_RUN = [{"name": "elastic-8b", "preset": "llama3-8b-elastic"}]
PATHS = {
    # name: (how the RayJob is made, the stack's config changes or the command's flags)
    "declared-held": ("declared", {}),
    "declared-held-elastic": ("declared", {"runs": json.dumps(ELASTIC_RUN)}),
    "declared-own-queued": ("declared", {"capacity": "flex-start"}),
    "declared-own-queued-elastic": ("declared", {"capacity": "spot", "scaleToZero": "true",
                                                 "runs": json.dumps(ELASTIC_RUN)}),
    "submitted-own": ("submitted", []),
    "submitted-own-one-slice": ("submitted", ["--slices", "1"]),
    "submitted-own-elastic": ("submitted", ["--elastic", "--backoff-limit", "2"]),
    "submitted-own-queued": ("queued", []),
    "submitted-own-queued-one-slice": ("queued", ["--slices", "1"]),
    "submitted-own-queued-elastic": ("queued", ["--elastic", "--backoff-limit", "2"]),
}
NO_RAYJOB = {
    "submitted-held": "a run the command submits to a stack that holds its slices goes to the RayCluster's Jobs "
                      "API (tests/test_training_submit.py): no RayJob is made",
}
"""Paths that make no RayJob, and why (listed so the enumeration above is complete)."""


def without_selector(manifest: dict) -> dict:
    """A declared run's selector names the RayCluster by the resource's output, resolved only by the engine."""
    return {**manifest, "spec": {k: v for k, v in manifest["spec"].items() if k != "clusterSelector"}}


@pytest.fixture
def built(monkeypatch) -> list[dict]:
    """Every manifest the builder checks, as it leaves the builder."""
    seen: list[dict] = []
    check = builder.ray_job_problems

    def recorded(manifest):
        seen.append(manifest)
        return check(manifest)

    monkeypatch.setattr(builder, "ray_job_problems", recorded)
    return seen


def made(path: str, how: str, change, capsys, tmp_path, outputs, fakes) -> list[dict]:
    if how == "declared":
        config = with_keys(load_stack_file(REPO_ROOT / "Pulumi.dev.yaml"), **change)
        return [resource.inputs for resource in run_offline(config).of_type(RAYJOB)]
    fake = fakes(FakeJobsClient(log=STEPS_LOG))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, outputs), *change, f"run_name={path}")
    assert rc == 0, err
    return list(fake.received if how == "queued" else fake.created)  # as sent, before Kueue's webhook defaults it


@pytest.mark.parametrize("path", sorted(PATHS))
def test_every_rayjob_comes_from_the_one_builder_and_passes_kuberays_and_kueues_rules(path, built, capsys, tmp_path,
                                                                                     request):
    how, change = PATHS[path]
    # The fake Kubernetes API the path needs (each fixture replaces the command's way to the API with its own).
    outputs, fakes = (request.getfixturevalue(name) for name in (
        ("queued_outputs", "queued") if how == "queued" else ("per_run_outputs", "kube")))
    manifests = made(path, how, change, capsys, tmp_path, outputs, fakes)
    assert manifests, path
    for manifest in manifests:
        assert without_selector(manifest) in map(without_selector, built), f"{path}: a RayJob the builder did not make"
        validate_ray_job(manifest)  # the vendored KubeRay CRD, unknown fields refused
        assert ray_job_problems(manifest) == []  # KubeRay's rules, and Kueue's webhook for a queued one
        spec = manifest["spec"]
        assert spec["submissionMode"] == builder.SUBMISSION_MODE
        labels = manifest["metadata"].get("labels") or {}
        assert (labels == {kueue.QUEUE_LABEL: "maxtext-tpu-cluster"}) == ("queued" in path), path
        if "rayClusterSpec" not in spec:
            assert spec["clusterSelector"] == {"ray.io/cluster": "maxtext-tpu-cluster"}, path
            assert spec["backoffLimit"] == 0 and not spec["shutdownAfterJobFinishes"]
            continue
        validate_ray_cluster({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                              "metadata": {"name": "r-abcde", "namespace": "default"}, "spec": spec["rayClusterSpec"]})
        # The slices the run asked for, in the group's bound and in what libtpu is told: never the stack's when fewer.
        slices = int(change[change.index("--slices") + 1]) if "--slices" in change else 2
        (group,) = spec["rayClusterSpec"]["workerGroupSpecs"]
        grows = "queued" in path and "elastic" in path
        # A queued elastic run starts on its minimum (the stack's elasticMinSlices, 1) and Ray's autoscaler may
        # raise it to every slice; any other run has every slice from the start, and no autoscaler.
        start = 1 if grows else slices
        assert (group["replicas"], group["minReplicas"] if grows else start, group["maxReplicas"]) == (
            start, start, slices), path
        assert group["minReplicas"] <= start
        assert bool(spec["rayClusterSpec"].get("enableInTreeAutoscaling")) == grows, path
        annotations = manifest["metadata"].get("annotations") or {}
        assert (annotations.get(kueue.ELASTIC_JOB_ANNOTATION) == "true") == grows, path
        # In the queue, KubeRay's deadline lies past Kueue's timeout (the stack's, or the test's queue's).
        if "queued" in path:
            assert kueue_waiting.deadline_problems(spec["preRunningDeadlineSeconds"], spec["backoffLimit"],
                                           kueue_waiting.WaitSettings(timeout_s=1800 if how == "declared" else 900)) == []
        for container in group["template"]["spec"]["containers"]:
            env = {item["name"]: item["value"] for item in container["env"]}
            assert env[builder.MEGASCALE_NUM_SLICES] == str(slices)
        # Runs with their own cluster wait for its slices: the cold start's timeouts.
        env_vars = yaml.safe_load(spec["runtimeEnvYAML"])["env_vars"]
        assert env_vars["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] == "900"
    if "elastic" in path:
        assert all("--min-slices" in m["spec"]["entrypoint"] for m in manifests)


def test_no_module_but_the_builder_writes_a_rayjob():
    """A RayJob is a builder's dict: nothing else in the package spells one out."""
    writers = [path.relative_to(REPO_ROOT) for path in source_files()
               if '"kind": "RayJob"' in path.read_text()]
    assert [str(path) for path in writers] == ["core/ray_job.py"]
