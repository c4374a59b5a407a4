"""Runs declared in the stack (``gke-ray-tpu:runs``): a KubeRay RayJob per run, under the mock engine."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from gke_ray_tpu.core.ray_job import SUBMISSION_MODE
from gke_ray_tpu.core.code_archive import package_files
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.stack.mock_engine import OfflineRun, run_offline
from tests.schemas import validate_ray_job
from tests.test_stack_dev import BUCKET, RAYCLUSTER, RAYJOB
from gke_ray_tpu.training.driver.request import SubmitRequest
from gke_ray_tpu.training.driver.stack_outputs import from_mapping
from gke_ray_tpu.training.driver.submission import for_cluster

BUCKET_OBJECT = "gcp:storage/bucketObject:BucketObject"


@pytest.fixture(scope="module")
def rayjob(dev_run) -> dict:
    manifest = dev_run.one(RAYJOB).inputs
    validate_ray_job(manifest)  # the KubeRay CRD, unknown fields refused
    return manifest


def test_the_dev_stacks_run_is_a_rayjob_on_the_stacks_raycluster(dev_run, rayjob):
    cluster = dev_run.one(RAYCLUSTER).inputs["metadata"]
    assert rayjob["metadata"] == {"name": "baseline-8b", "namespace": cluster["namespace"]}
    spec = rayjob["spec"]
    assert spec["clusterSelector"] == {"ray.io/cluster": cluster["name"]}
    assert spec["submissionMode"] == SUBMISSION_MODE == "HTTPMode"  # no submitter pod pulling the TPU image
    assert spec["backoffLimit"] == 0 and spec["shutdownAfterJobFinishes"] is False  # never touches the shared cluster
    assert "activeDeadlineSeconds" not in spec and "rayClusterSpec" not in spec
    assert spec["jobId"].startswith("maxtext-baseline-8b-rayjob-")


def test_the_rayjob_runs_exactly_what_the_submit_command_would(dev_run, rayjob):
    """One code path: the submit command's job for the same preset, overrides and run name."""
    request = SubmitRequest(outputs_file="-", preset="llama3-8b", overrides={"steps": 100, "run_name": "baseline-8b"})
    submitted = for_cluster(request, from_mapping(dev_run.outputs, "outputs"))
    # The same command, after the check of the code archive (tests/test_code_archive.py).
    check, _, command = rayjob["spec"]["entrypoint"].partition(" && ")
    assert check.startswith("python -I -c ") and command == submitted.entrypoint
    declared_env = yaml.safe_load(rayjob["spec"]["runtimeEnvYAML"])
    # The same environment; only the code travels differently (an archive in the bucket vs an upload).
    code = declared_env["env_vars"].pop("PYTHONPATH")
    assert declared_env == {"env_vars": submitted.runtime_env["env_vars"]}
    archive = dev_run.one(BUCKET_OBJECT).inputs
    assert code == f"/data/{archive['name']}" and archive["name"].startswith("_code/gke-ray-tpu-")
    assert archive["bucket"] == "my-tpu-project-maxtext-checkpoints" and archive["contentType"] == "application/zip"
    assert sorted(archive["source"].assets) == sorted(package_files())  # core/ and training/, nothing else
    assert dev_run.outputs["runs"] == [{
        "name": "baseline-8b", "submissionId": rayjob["spec"]["jobId"],
        "checkpointDir": "gs://my-tpu-project-maxtext-checkpoints/baseline-8b/checkpoints",
    }]


def names(urns) -> set[str]:
    return {urn.rsplit("::", 1)[1] for urn in urns}


def test_the_rayjob_waits_for_the_raycluster_through_its_inputs(dev_run):
    """MaxTextRun takes the RayTpuCluster: the RayJob's spec names the RayCluster by its output, and the code
    archive waits for it too (the bucket's name is plain: the job's command names it), without a depends_on."""
    job = dev_run.one(RAYJOB)
    assert names(job.input_dependencies["spec"]) == {"ray-raycluster"}
    assert names(dev_run.one(BUCKET_OBJECT).input_dependencies["bucket"]) == {"ray-raycluster"}
    # ... and for the read of the KubeRay CRDs the cluster serves: an operator without a field the stack sets fails
    # `pulumi up` before any run is created (fail closed).
    assert names(job.dependencies) == {"ray-raycluster", "run-baseline-8b-code", "served-kuberay-rayclusters",
                                       "served-kuberay-rayjobs"}
    assert job.provider.split("::")[-1].startswith("gke-k8s")


def test_a_changed_run_is_a_new_rayjob_and_a_new_job_of_the_same_run(dev_run, run_stack):
    """KubeRay ignores spec changes once it submitted: Pulumi replaces the RayJob, with a new job id."""
    job = dev_run.one(RAYJOB)
    assert (job.replace_on_changes, job.delete_before_replace) == (["spec"], True)
    changed = run_stack(runs=json.dumps([{"name": "baseline-8b", "overrides": {"steps": 200}}])).one(RAYJOB)
    assert changed.inputs["spec"]["jobId"] != job.inputs["spec"]["jobId"]
    assert changed.inputs["metadata"] == job.inputs["metadata"]
    # The same run_name: MaxText resumes from the run's checkpoints.
    assert "run_name=baseline-8b" in changed.inputs["spec"]["entrypoint"]


def test_removing_a_run_deletes_its_rayjob_and_keeps_the_checkpoints(run_stack):
    run = run_stack(runs=None)
    assert run.of_type(RAYJOB) == [] and run.of_type(BUCKET_OBJECT) == [] and run.outputs["runs"] == []
    assert run.one(BUCKET).retain_on_delete is True  # the bucket, and its checkpoints, outlive the stack


def test_an_elastic_run_on_spot_slices(run_stack):
    run = run_stack(capacity="spot", runs=json.dumps([{"name": "spot-8b", "preset": "llama3-8b-elastic",
                                                   "activeDeadlineSeconds": 86400}]))
    spec = run.one(RAYJOB).inputs["spec"]
    validate_ray_job(run.one(RAYJOB).inputs)
    argv = shlex.split(spec["entrypoint"])
    assert argv[argv.index("--min-slices") + 1] == "1" and "checkpoint_period=25" in argv
    assert spec["activeDeadlineSeconds"] == 86400


def test_preview_prints_each_runs_estimates(dev_run):
    [declared] = [m for level, m in dev_run.logs if level == "info" and m.startswith("Declared run baseline-8b")]
    assert "Sharding over 2 slice(s): OK" in declared and "verdict: uncertain" in declared and "/hour" in declared


@pytest.mark.parametrize(
    "runs, key, expected",
    [
        ([{"name": "r", "preset": "llama3-405b"}], "gke-ray-tpu:runs[0].preset", "one of llama3-70b"),
        ([{"name": "r", "preset": "tiny-cpu"}], "gke-ray-tpu:runs[0].preset", "a TPU preset"),
        ([{"name": "r", "overrides": {"ici_tensor_parallelism": 2}}],
         "gke-ray-tpu:runs[0].overrides.ici_fsdp_parallelism*ici_tensor_parallelism", "a product of 16"),
        ([{"name": "r", "preset": "llama3-70b", "elastic": True}],
         "gke-ray-tpu:runs[0] (dcn_fsdp_parallelism of preset llama3-70b)", "when the elastic job runs on 1"),
        ([{"name": "r", "elastic": True, "minSlices": 3}], "gke-ray-tpu:runs[0].minSlices", "between elasticMinSlices"),
        ([{"name": "r", "backoffLimit": 2}], "gke-ray-tpu:runs[0].backoffLimit", "KubeRay refuses RayJob retries"),
        ([{"name": "r"}, {"name": "r"}], "gke-ray-tpu:runs[1].name", "no other run of the stack has"),
        ([{"name": "r" * 48}], "gke-ray-tpu:runs[0].name", "a RayJob name: a DNS-1035 label of 1-47"),
        ([{"name": "r", "overrides": {"steps": 0}}], "gke-ray-tpu:runs[0].overrides.steps", "an integer >= 1"),
        ([{"name": "r", "overrides": {"run_name": "x"}}], "gke-ray-tpu:runs[0].overrides.run_name", "unset"),
        # A chosen run that does not fit the chips fails preview (the tutorial's 70B as written: 53.09 GiB).
        ([{"name": "big", "preset": "llama3-70b"}], "gke-ray-tpu:runs[0]", "a run that fits the chips: estimated 53.09"),
    ],
)
def test_a_bad_run_fails_before_anything_is_registered(dev_config, runs, key, expected):
    run = OfflineRun()
    with pytest.raises(ConfigError) as error:
        run_offline({**dev_config, "gke-ray-tpu:runs": json.dumps(runs)}, run=run)
    assert (error.value.key, run.resources) == (key, [])
    assert expected in error.value.expected


def test_the_70b_run_that_fits_previews(run_stack):
    runs = [{"name": "llama-70b", "preset": "llama3-70b",
             "overrides": {"weight_dtype": "bfloat16", "per_device_batch_size": 1}}]
    run = run_stack(runs=json.dumps(runs))
    validate_ray_job(run.one(RAYJOB).inputs)
    assert "weight_dtype=bfloat16" in run.one(RAYJOB).inputs["spec"]["entrypoint"]


def test_a_run_the_estimate_cannot_call_previews_and_says_to_compile(run_stack):
    """Within the estimate's error of the limit, only XLA can fail it (gke-ray-tpu:compileCheck)."""
    runs = [{"name": "llama-70b-qkv", "preset": "llama3-70b",
             "overrides": {"weight_dtype": "bfloat16", "per_device_batch_size": 1, "remat_policy": "save_qkv_proj"}}]
    run = run_stack(runs=json.dumps(runs))
    [declared] = [m for level, m in run.logs if level == "info" and m.startswith("Declared run llama-70b-qkv")]
    assert "verdict: uncertain: run the compile check" in declared
    assert "gke-ray-tpu:compileCheck true" in declared
    assert run.one(RAYJOB)
