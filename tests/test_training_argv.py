"""Presets + stack outputs -> the trainer's argv -> Ray Train's configs, without a cluster."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.job_spec import DEFAULT_CONFIG, JobSpec, build_job, parse_overrides, run_location, submission_id_for
from gke_ray_tpu.core.presets import PRESETS, get_preset
from gke_ray_tpu.training.driver import stack_outputs
from gke_ray_tpu.training.driver.request import SubmitRequest
from gke_ray_tpu.core.code_archive import package_files
from gke_ray_tpu.training.driver.submission import Submission, for_cluster, for_local
from gke_ray_tpu.training.worker import trainer

# The MaxText part of the tutorial's `ray job submit ... -- python maxtext_multi_slice_trainer.py`
# commands, verbatim (after base.yml).
TUTORIAL_8B = (
    "base_output_directory=/data/ dataset_type=synthetic per_device_batch_size=4 max_target_length=4096 "
    "model_name=llama3-8b steps=100 ici_fsdp_parallelism=4 ici_tensor_parallelism=4 run_name=rayjob-multi-slice"
).split()
TUTORIAL_70B = (
    "base_output_directory=/data/ dataset_type=synthetic per_device_batch_size=2 max_target_length=4096 "
    "model_name=llama3-70b steps=100 ici_tensor_parallelism=4 ici_fsdp_parallelism=4 dcn_fsdp_parallelism=2 "
    "dcn_data_parallelism=1 remat_policy=full run_name=rayjob-multi-slice-70b-fsdp"
).split()
# The tutorial's elastic 8B run, plus a checkpoint every 25 steps: MaxText's default of 10000
# would make a restart redo the whole run.
TUTORIAL_ELASTIC_8B = [*TUTORIAL_8B[:-1], "checkpoint_period=25", "run_name=rayjob-elastic-8b"]
CACHE = "jax_cache_dir=/data/jax-cache"
"""A cluster run's compilation cache: in the bucket, shared by every host and every run of the stack."""


@pytest.fixture(scope="module")
def dev_outputs_file(dev_run, tmp_path_factory):
    """What `pulumi stack output --json` prints for the dev stack (the program run offline)."""
    path = tmp_path_factory.mktemp("outputs") / "dev.json"
    path.write_text(json.dumps(dev_run.outputs))
    return path


def plan(dev_outputs_file, *argv: str) -> Submission:
    request = SubmitRequest.from_argv(["--outputs-file", str(dev_outputs_file), *argv])
    return for_cluster(request, stack_outputs.load_file(request.outputs_file))


@pytest.fixture(scope="module")
def outputs_with(dev_run, tmp_path_factory):
    """An outputs file of the dev stack with some outputs changed."""
    def write(**changes) -> str:
        path = tmp_path_factory.mktemp("outputs") / "changed.json"
        path.write_text(json.dumps({**dev_run.outputs, **changes}))
        return str(path)
    return write


@pytest.mark.parametrize(
    "preset, tutorial",
    [("llama3-8b", TUTORIAL_8B), ("llama3-70b", TUTORIAL_70B), ("llama3-8b-elastic", TUTORIAL_ELASTIC_8B)],
)
def test_presets_render_the_tutorial_argv(preset, tutorial):
    p = get_preset(preset)
    spec = build_job(p, base_output_directory="/data/", run_name=p.run_name, slices=2, generation="v6e", topology="4x4")
    assert spec.maxtext_argv == [DEFAULT_CONFIG, *tutorial]


def test_70b_on_the_dev_stack_is_the_tutorial_command_writing_to_the_bucket(dev_outputs_file):
    """The tutorial's command, except that MaxText writes to gs://<bucket>/ instead of the pods' /data mount
    of it: there Orbax commits a step with a marker instead of renaming directories through GCS FUSE."""
    p = plan(dev_outputs_file, "--preset", "llama3-70b", "run_name=rayjob-multi-slice-70b-fsdp")
    assert shlex.split(p.entrypoint) == [
        "python", "-m", "gke_ray_tpu.training.worker.trainer",
        "--backend", "tpu", "--slices", "2", "--generation", "v6e", "--topology", "4x4",
        DEFAULT_CONFIG, "base_output_directory=gs://my-tpu-project-maxtext-checkpoints/", *TUTORIAL_70B[1:-1],
        CACHE, TUTORIAL_70B[-1],
    ]
    # Only the two packages the job imports travel, not the repository: the code archive's files, as a folder.
    [shipped] = p.runtime_env["py_modules"]
    assert Path(shipped).name == "gke_ray_tpu" and "working_dir" not in p.runtime_env
    assert sorted(path.name for path in Path(shipped).iterdir()) == ["__init__.py", "core", "training"]
    staged = {path.relative_to(Path(shipped).parent).as_posix() for path in Path(shipped).rglob("*") if path.is_file()}
    assert staged == set(package_files())
    assert p.runtime_env["env_vars"] == {"RAY_TRAIN_V2_ENABLED": "1", "RAY_DEDUP_LOGS": "0",
                                         "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "20"}
    assert p.checkpoints == "gs://my-tpu-project-maxtext-checkpoints/rayjob-multi-slice-70b-fsdp/checkpoints"


@pytest.mark.parametrize(
    "base, bucket, expected",
    [
        ("gs://b/", "b", "gs://b/r/checkpoints"),  # a cluster run: the bucket itself
        ("/data/", "b", "gs://b/r/checkpoints"),  # a job from before: the pods' mount of the bucket
        ("/data", "b", "gs://b/r/checkpoints"),
        ("/data/sub/", "b", "gs://b/sub/r/checkpoints"),
        ("/database/", "b", "/database/r/checkpoints"),  # not the mount, only a name that starts alike
        ("/tmp/local-runs", None, "/tmp/local-runs/r/checkpoints"),  # a local run
        ("/data/", None, "/data/r/checkpoints"),  # no bucket known: as the pods see it
    ],
)
def test_a_runs_files_are_shown_where_a_person_finds_them(base, bucket, expected):
    spec = JobSpec(backend="cpu", maxtext={"base_output_directory": base, "run_name": "r"}, slices=1)
    assert run_location(spec, "checkpoints", bucket) == expected


def test_the_trainer_turns_that_command_into_the_tutorial_scaling_config(dev_outputs_file):
    p = plan(dev_outputs_file, "--preset", "llama3-70b", "run_name=r1")
    spec = JobSpec.from_argv(shlex.split(p.entrypoint)[3:])
    assert spec == p.spec
    s = trainer.scaling_config(spec)
    assert (s.use_tpu, s.num_workers, s.topology, s.accelerator_type) == (True, 8, "4x4", "TPU-V6E")
    assert (s.resources_per_worker, s.placement_strategy) == ({"TPU": 4}, "SPREAD")
    r = trainer.run_config(spec)
    assert (r.name, r.failure_config.max_failures) == ("r1", 0)
    # The head's Python here is this venv: the workers get what it lacks of the lock, nothing it has.
    uv = r.worker_runtime_env["uv"]
    listed = {line.split("==")[0]: line.split("==")[1].split()[0] for line in uv["packages"]}
    assert {"jax", "jaxlib", "libtpu", "maxtext", "orbax-checkpoint", "ray"}.isdisjoint(listed)
    assert listed["protobuf"] == "7.36.2"  # this venv has 5.29.6 (pulumi-policy's); the lock MaxText's extra's
    assert all(line.count("--hash=sha256:") >= 1 for line in uv["packages"])
    assert uv["uv_pip_install_options"] == ["--no-deps", "--require-hashes", "--only-binary", ":all:", "--no-cache"]
    assert uv["uv_version"] == "==0.13.8" and r.worker_runtime_env["env_vars"] == trainer.WORKER_ENV
    assert trainer.WORKER_ENV["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"


def test_elastic_preset_spans_whole_slices_with_three_retries(dev_outputs_file):
    spec = plan(dev_outputs_file, "--preset", "llama3-8b-elastic").spec
    assert (spec.min_slices, spec.slices) == (1, 2)
    assert trainer.scaling_config(spec).num_workers == (4, 8)
    assert trainer.run_config(spec).failure_config.max_failures == 3
    assert "--min-slices 1" in " ".join(spec.to_argv())


def test_elastic_flag_and_min_slices_on_a_static_preset(dev_outputs_file):
    p = plan(dev_outputs_file, "--preset", "llama3-8b", "--elastic")
    assert p.spec.min_slices == 1
    # A run that may restart checkpoints every 25 steps unless told otherwise.
    assert p.spec.maxtext["checkpoint_period"] == 25 and p.spec.notes[0].startswith("checkpoint_period=25: ")
    spec = plan(dev_outputs_file, "--preset", "llama3-8b", "--min-slices", "2", "--max-failures", "5",
                "checkpoint_period=7").spec
    assert (spec.min_slices, spec.failures_allowed, spec.maxtext["checkpoint_period"]) == (2, 5, 7)
    assert trainer.scaling_config(spec).num_workers == (8, 8)
    # A static run keeps MaxText's default (no key at all), as in the tutorial.
    assert "checkpoint_period" not in plan(dev_outputs_file, "--preset", "llama3-8b").spec.maxtext


def test_elastic_range_is_the_stacks_min_and_num_slices_in_hosts(outputs_with):
    """num_workers=(elasticMinSlices*hostsPerSlice, numSlices*hostsPerSlice), read from the outputs."""
    p = plan(outputs_with(numSlices=3, elasticMinSlices=2), "--preset", "llama3-8b-elastic")
    assert (p.spec.min_slices, p.spec.slices) == (2, 3)
    assert trainer.scaling_config(p.spec).num_workers == (8, 12)
    assert "--slices 3 --min-slices 2" in p.entrypoint
    assert plan(outputs_with(numSlices=3, elasticMinSlices=2), "--elastic").spec.worker_range() == (8, 12)
    # --slices/--min-slices narrow the range; 0 is an error, not "the stack's value".
    assert plan(outputs_with(numSlices=3), "--elastic", "--slices", "2").spec.worker_range() == (4, 8)
    with pytest.raises(ConfigError, match="--slices=0: expected at least 1"):
        plan(outputs_with(numSlices=3), "--slices", "0")
    with pytest.raises(ConfigError, match=r"--min-slices=0: expected an integer between elasticMinSlices \(1\)"):
        plan(outputs_with(numSlices=3), "--min-slices", "0")
    # Below the stack's elasticMinSlices the cluster would keep slices the run never asked to wait for.
    with pytest.raises(ConfigError, match=r"--min-slices=1: expected an integer between elasticMinSlices \(2\) and "
                                          r"numSlices \(3\): the RayCluster keeps no fewer slices"):
        plan(outputs_with(numSlices=3, elasticMinSlices=2), "--min-slices", "1")


def test_spot_stack_makes_a_static_run_restartable(outputs_with):
    spot = outputs_with(capacity="spot")
    p = plan(spot, "--preset", "llama3-8b")
    assert (p.spec.elastic, p.spec.failures_allowed, p.spec.maxtext["checkpoint_period"]) == (False, 3, 25)
    assert "--max-failures 3" in p.entrypoint
    assert p.spec.notes[0].startswith("Spot slices: max_failures=3, so a reclaimed slice restarts the job")
    assert trainer.run_config(p.spec).failure_config.max_failures == 3
    # Asked to fail fast: no retries, no extra checkpoints.
    p = plan(spot, "--preset", "llama3-8b", "--max-failures", "0")
    assert (p.spec.failures_allowed, "checkpoint_period" in p.spec.maxtext, p.spec.notes) == (0, False, ())
    # The elastic preset gets the elastic default of 3 and the restart period.
    p = plan(spot, "--preset", "llama3-8b-elastic")
    assert (p.spec.failures_allowed, p.spec.maxtext["checkpoint_period"]) == (3, 25)
    # Not a Spot stack: a static run stays the tutorial's (max_failures=0).
    assert plan(outputs_with(capacity="on-demand"), "--preset", "llama3-8b").spec.failures_allowed == 0


def test_unique_run_name_and_its_submission_id(dev_outputs_file):
    spec = plan(dev_outputs_file, "--preset", "llama3-8b").spec
    assert spec.run_name.startswith("rayjob-multi-slice-2") and len(spec.run_name) == len("rayjob-multi-slice-") + 15
    assert submission_id_for(spec.run_name) == f"maxtext-{spec.run_name}"
    assert submission_id_for(spec.run_name, attempt=3) == f"maxtext-{spec.run_name}-attempt-3"


@pytest.mark.parametrize(
    "item, key",
    [("run_name=a b", "run_name"), ("run_name=a/b", "run_name"), ("run_name=../x", "run_name"),
     ("run_name=" + "x" * 101, "run_name"), ("run_name=x-attempt-2", "run_name"), ("run_name=x\n", "run_name"),
     ("steps=0", "steps"), ("steps=ten", "steps"), ("steps=1.5", "steps"), ("steps=\u00b2", "steps"),
     ("checkpoint_period=-4", "checkpoint_period"), ("checkpoint_period=", "checkpoint_period")],
)
def test_run_name_steps_and_checkpoint_period_are_checked(dev_outputs_file, item, key):
    """A run name is a directory and a job id (one run, one id); steps and the period are counts."""
    with pytest.raises(ConfigError) as e:
        plan(dev_outputs_file, item)
    assert e.value.key == key
    assert plan(dev_outputs_file, "run_name=My_run.v2-1", "steps=20").spec.run_name == "My_run.v2-1"


def test_overrides_replace_in_place_and_new_keys_go_before_run_name(dev_outputs_file):
    argv = plan(dev_outputs_file, "--preset", "llama3-8b", "steps=20", "checkpoint_period=5", "run_name=mine").spec.maxtext_argv
    assert argv[argv.index("steps=20") - 1] == "model_name=llama3-8b"
    assert argv[-3:] == ["checkpoint_period=5", CACHE, "run_name=mine"]
    assert "steps=100" not in argv


def test_parse_overrides_rejects_items_without_a_key():
    # Typed as MaxText's parser types them: ints, floats and booleans, else text.
    assert parse_overrides(["a=1", "b=x=y", "c=", "d=1e-3", "e=true", "f=4x4"]) == {
        "a": 1, "b": "x=y", "c": "", "d": 0.001, "e": True, "f": "4x4"
    }
    for bad in ("steps", "=5", "1x=2", "--steps=5"):
        with pytest.raises(ConfigError, match="key=value"):
            parse_overrides([bad])


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ConfigError) as e:
        get_preset("llama3-405b")
    assert e.value.key == "--preset" and e.value.expected == f"one of {', '.join(PRESETS)}"


def test_mismatch_on_the_dev_stack_names_the_keys(dev_outputs_file):
    with pytest.raises(ConfigError) as e:
        plan(dev_outputs_file, "--preset", "llama3-8b", "ici_tensor_parallelism=2")
    assert e.value.key == "ici_fsdp_parallelism*ici_tensor_parallelism" and e.value.value == "4*2=8"
    assert "16 chips of one v6e-16 slice" in e.value.expected


def test_elastic_min_above_the_stack_slices(dev_outputs_file):
    with pytest.raises(ConfigError) as e:
        plan(dev_outputs_file, "--preset", "llama3-8b", "--min-slices", "3")
    assert e.value.key == "--min-slices" and e.value.value == 3
    with pytest.raises(ConfigError, match="at most the stack's numSlices"):
        plan(dev_outputs_file, "--preset", "llama3-8b", "--slices", "3")


def test_the_trainer_validates_a_hand_written_command_too():
    base = ["--generation", "v6e", "--topology", "4x4", DEFAULT_CONFIG, "base_output_directory=/data/"]
    with pytest.raises(ConfigError, match="run_name"):
        JobSpec.from_argv(["--slices", "2", *base]).validate()
    with pytest.raises(ConfigError, match="ending in .yml"):
        JobSpec.from_argv(["--slices", "1", "--generation", "v6e", "--topology", "4x4", "base.yaml"]).validate()
    with pytest.raises(ConfigError) as e:
        JobSpec.from_argv(["--slices", "2", "--min-slices", "3", *base, "run_name=x"]).validate()
    assert e.value.key == "--min-slices"
    with pytest.raises(ConfigError, match="v6e topology"):
        JobSpec.from_argv(["--slices", "1", "--generation", "v6e", "--topology", "3x3", DEFAULT_CONFIG,
                           "base_output_directory=/d", "run_name=x"]).validate()
    assert trainer.main(["--slices", "2", *base]) == 2


def test_trainer_flag_errors_exit_2_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as e:
        JobSpec.from_argv(["--slices", "two", DEFAULT_CONFIG])
    assert e.value.code == 2
    assert "argument --slices: invalid int value: 'two'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        JobSpec.from_argv(["--slices", "2", DEFAULT_CONFIG])  # tpu without --generation/--topology
    assert "--backend tpu needs --generation and --topology" in capsys.readouterr().err


def test_cpu_backend_validates_mesh_as_one_slice_of_workers():
    spec = JobSpec("cpu", {"base_output_directory": "/o", "run_name": "r"}, slices=2)
    spec.validate()
    assert trainer.scaling_config(spec).num_workers == 2
    assert trainer.scaling_config(spec).resources_per_worker == {"CPU": 1}
    assert trainer.run_config(spec).worker_runtime_env == {"env_vars": {**trainer.WORKER_ENV, "JAX_PLATFORMS": "cpu"}}
    with pytest.raises(ConfigError, match="local run of 2 CPU workers"):
        JobSpec("cpu", {"base_output_directory": "/o", "run_name": "r", "ici_tensor_parallelism": 4}, slices=2).validate()


def test_every_process_of_a_local_job_keeps_jax_on_the_cpu(tmp_path):
    """libtpu is installed (the compile check's compiler): nothing of the local run may look for a TPU."""
    local = for_local(SubmitRequest.from_argv(["--local", "--output-dir", str(tmp_path)]))
    assert local.runtime_env["env_vars"]["JAX_PLATFORMS"] == "cpu"  # job driver, Ray Train controller
    assert trainer.CPU_WORKER_ENV["JAX_PLATFORMS"] == "cpu"  # the training workers


def test_worker_argv_makes_an_existing_config_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.yml").write_text("steps: 1\n")
    spec = JobSpec("cpu", {"base_output_directory": "/o", "run_name": "r"}, slices=1, config="base.yml")
    assert trainer.worker_argv(spec) == [
        "gke_ray_tpu.training.worker.trainer", str(tmp_path / "base.yml"), "base_output_directory=/o", "run_name=r",
        "skip_jax_distributed_system=true",
    ]
    # Not a file here: left for MaxText to resolve in its installed package.
    tpu = JobSpec("tpu", {"run_name": "r"}, slices=1, generation="v6e", topology="4x4")
    assert trainer.worker_argv(tpu) == ["gke_ray_tpu.training.worker.trainer", DEFAULT_CONFIG, "run_name=r"]
