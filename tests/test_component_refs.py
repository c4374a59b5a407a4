"""Components that take the components they build on, used from Python under the mock engine.

A MaxTextRun is given the RayTpuCluster it runs on and nothing of the cluster besides: the RayJob's
namespace and cluster, the job's slices, shape and elastic lower bound, what Spot and scaling to zero
do to it, all come from the cluster, so the two cannot disagree. A RayTpuCluster is given the
GcsWorkloadIdentity whose service account and bucket its pods use.
"""

from __future__ import annotations

import shlex

import pytest
import yaml

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.job_spec import COLD_START_ENV_VARS
from gke_ray_tpu.stack.mock_engine import OfflineRun, run_offline
from tests.test_declared_runs import BUCKET_OBJECT
from tests.test_stack_dev import KSA, RAYCLUSTER, RAYJOB

PROGRAM = """
from gke_ray_tpu.components import GcsWorkloadIdentity, GcsWorkloadIdentityArgs, MaxTextRun, MaxTextRunArgs, RayTpuCluster, RayTpuClusterArgs

storage = GcsWorkloadIdentity("storage", GcsWorkloadIdentityArgs(
    bucket_name="team-ckpt", location="us-east5", project="my-project", project_number="123", namespace="training",
    ksa_name="trainer"))
ray = RayTpuCluster("ray", RayTpuClusterArgs(workload_identity=storage, ray_cluster_name="team-tpus", {cluster}))
MaxTextRun("run", MaxTextRunArgs(run_name="team-run", ray_cluster=ray, {run}))
"""


def run_program(tmp_path, cluster: str, run: str) -> OfflineRun:
    program = tmp_path / "__main__.py"
    program.write_text(PROGRAM.format(cluster=cluster, run=run))
    return run_offline({}, program=program, project="component-refs")


def argv(rayjob) -> list[str]:
    return shlex.split(rayjob.inputs["spec"]["entrypoint"])


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_a_run_takes_everything_of_its_cluster_from_the_cluster(tmp_path):
    run = run_program(tmp_path, 'num_slices=3, elastic_min_slices=2, capacity="spot", scale_to_zero=True',
                      'preset="llama3-8b-elastic"')
    # The cluster scales to zero: no RayCluster; the run brings its own, in the identity's namespace.
    assert run.of_type(RAYCLUSTER) == []
    job = run.one(RAYJOB).inputs
    cluster = job["spec"]["rayClusterSpec"]
    assert job["metadata"] == {"name": "team-run", "namespace": "training"}
    assert "clusterSelector" not in job["spec"] and job["spec"]["shutdownAfterJobFinishes"] is True
    args = argv(run.one(RAYJOB))
    assert (flag(args, "--slices"), flag(args, "--generation"), flag(args, "--topology")) == ("3", "v6e", "4x4")
    # The elastic lower bound is the cluster's, not 1: the RayCluster keeps no fewer slices.
    assert flag(args, "--min-slices") == "2" and cluster["workerGroupSpecs"][0]["maxReplicas"] == 3
    # Its slices start with its cluster: the job waits minutes for them.
    assert COLD_START_ENV_VARS.items() <= yaml.safe_load(job["spec"]["runtimeEnvYAML"])["env_vars"].items()
    # The code archive goes to the identity's bucket, which the cluster's pods mount and run as its account.
    assert run.one(BUCKET_OBJECT).inputs["bucket"] == "team-ckpt"
    pod = cluster["headGroupSpec"]["template"]["spec"]
    assert pod["serviceAccountName"] == run.one(KSA).inputs["metadata"]["name"] == "trainer"
    assert next(v for v in pod["volumes"] if "csi" in v)["csi"]["volumeAttributes"]["bucketName"] == "team-ckpt"


def test_a_run_on_a_held_cluster_is_sent_to_it(tmp_path):
    run = run_program(tmp_path, 'num_slices=2, capacity="spot"', 'preset="llama3-8b"')
    cluster, job = run.one(RAYCLUSTER).inputs, run.one(RAYJOB).inputs
    assert cluster["metadata"] == {"name": "team-tpus", "namespace": "training"}  # the identity's namespace
    assert job["metadata"] == {"name": "team-run", "namespace": "training"}
    assert job["spec"]["clusterSelector"] == {"ray.io/cluster": "team-tpus"}
    assert "rayClusterSpec" not in job["spec"] and job["spec"]["shutdownAfterJobFinishes"] is False


def test_a_static_run_on_spot_slices_restarts(tmp_path):
    args = argv(run_program(tmp_path, 'capacity="spot"', 'preset="llama3-8b"').one(RAYJOB))
    assert flag(args, "--max-failures") == "3" and "--min-slices" not in args


def test_a_run_cannot_ask_for_fewer_slices_than_its_cluster_keeps(tmp_path):
    with pytest.raises(ConfigError) as error:
        run_program(tmp_path, "num_slices=3, elastic_min_slices=2", 'elastic=True, min_slices=1')
    assert error.value.key == "MaxTextRunArgs.min_slices"
    assert "between elasticMinSlices (2) and numSlices (3): the RayCluster keeps no fewer slices" in error.value.expected


def test_the_run_and_the_cluster_wait_for_what_they_are_given(tmp_path):
    run = run_program(tmp_path, "num_slices=2", 'preset="llama3-8b"')

    def names(urns) -> set[str]:
        return {urn.rsplit("::", 1)[1] for urn in urns}

    # The bucket's name is plain (a run's command names it): the pods wait for the bucket through the account's bindings.
    assert names(run.one(RAYCLUSTER).input_dependencies["spec"]) == {
        "storage-ksa", "storage-object-user", "storage-bucket-reader"}
    assert names(run.one(RAYJOB).input_dependencies["spec"]) == {"ray-raycluster"}
    assert names(run.one(BUCKET_OBJECT).input_dependencies["bucket"]) == {"ray-raycluster"}


def test_a_run_with_its_own_cluster_waits_for_what_its_pods_need(tmp_path):
    run = run_program(tmp_path, 'num_slices=2, capacity="spot", scale_to_zero=True', 'preset="llama3-8b"')

    def names(urns) -> set[str]:
        return {urn.rsplit("::", 1)[1] for urn in urns}

    # Its pods run as the account (after its bindings) and claim the DCN NICs of the template the cluster created.
    assert {"storage-ksa", "ray-netdev-claim"} <= names(run.one(RAYJOB).input_dependencies["spec"])
