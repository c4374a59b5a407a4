"""The compile check: XLA's own HBM verdict, compiled for the TPU topology on this CPU.

Real compiles (libtpu 0.0.50.1, MaxText 0.2.5), each under the dev stack's
pods' flags: the tiny preset's model for 2 x v6e-16 through the preview command
(it fits), the same run made elastic (1 x v6e-16 more), the same model made not
to fit (XLA refuses it), under the tutorial's own flags (XLA refuses them for
v6e: twice, as a refusal is not cached), and a flag libtpu does not know (the
child stops before compiling). Everything else reuses the first result from the cache, or stands
in for the compiler where only the plumbing is under test.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import os
import tempfile
import re
import time
from pathlib import Path

import pytest

from gke_ray_tpu.core.libtpu_flags import TUTORIAL_XLA_FLAGS
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.job_spec import DATA_MOUNT, build_job
from gke_ray_tpu.core.presets import get_preset
from gke_ray_tpu.core.tpu_catalogue import GENERATIONS, slice_shape
from gke_ray_tpu.preflight import xla_check, xla_compile
from gke_ray_tpu.stack import preview
from gke_ray_tpu.stack.parse import parse_stack_config
from gke_ray_tpu.stack.mock_engine import OfflineRun, run_offline
from tests.conftest import with_keys
from tests.test_stack_dev import RAYCLUSTER

V6E = GENERATIONS["v6e"]
TINY = ["--section", "training", "--preset", "tiny-cpu", "--compile", "--json"]
DOES_NOT_FIT = ["per_device_batch_size=4096", "max_target_length=4096"]
"""The tiny model with 16.7 M tokens per chip: XLA needs ~87 GiB of v6e's 31.24 and says so in about 12 s of CPU
(the same tokens as 256 sequences of 65,536, which XLA takes 30 s to refuse: 87.5 GiB either way)."""


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        directory = tmp_path_factory.mktemp("compile-check")
        patch.setenv(xla_check.CACHE_DIR_ENV, str(directory))
        patch.setattr(xla_check, "PROGRESS_EVERY_S", 1.0)
        yield directory


def run_preview(argv: list[str]) -> tuple[int, dict, str, float]:
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = preview.main(argv)
    return status, json.loads(out.getvalue()), err.getvalue(), time.monotonic() - started


@pytest.fixture(scope="module")
def tiny(cache):
    """The real compile: the tiny preset's train step for the dev stack's 2 x v6e-16."""
    return run_preview(TINY)


def test_the_tiny_model_compiles_for_two_v6e_16_slices(tiny, dev_run):
    status, out, err, _ = tiny
    xla = out["xla"]
    assert status == 0 and xla["fits"] is True and xla["status"] == "compiled" and not xla["cached"]
    # Under what the dev stack's TPU pods get, less the DCN interfaces: XLA compiles it.
    assert xla["libtpu_flags"] == [f for f in pods_flags(dev_run) if not f.startswith("--megascale_grpc_interface")]
    assert (xla["compile_topology"], xla["num_slices"], xla["per"]) == ("v6e-16", 2, "chip")
    # What XLA says one v6e chip may use: the catalogue's figure is the compiler's.
    assert xla["hbm_limit_gib"] == V6E.xla_hbm_limit_gib
    assert 0 < xla["arguments_gib"] and 0 < xla["peak_hbm_gib"] < xla["hbm_limit_gib"]
    # XLA's dump, read by storage, holds at its peak what its memory analysis says, to 1 MiB.
    assert abs(xla["live_set_gib"] - xla["peak_hbm_gib"]) * 1024 < 1
    assert xla["versions"]["libtpu"] == "0.0.50.1"
    # Progress while it ran: the elapsed time and MaxText's phase, every second here, on stderr.
    assert "compile check: local-tiny (default) on 2 x v6e-16: compiling the train step" in err
    ticks = re.findall(r"local-tiny \(default\) on 2 x v6e-16: \d+ s, (.+)", err)
    known = {"starting Python, importing MaxText", *(meaning for _, meaning in xla_check._PHASES)}
    assert len(ticks) >= 3 and set(ticks) <= known and len(set(ticks)) >= 2
    assert "fits (margin" in err.splitlines()[-1]


def test_the_json_has_xla_beside_the_estimate(tiny):
    _, out, _, _ = tiny
    assert set(out) == {"stack", "run", "sharding", "estimate", "warnings", "xla", "xla_by_slices"}
    assert out["xla_by_slices"] == {"2": out["xla"]}
    assert out["sharding"] == {"ok": True, "slice_counts": [2], "errors": []}
    assert {"peak_hbm_gib", "hbm_limit_gib", "fits", "margin_gib", "temporaries_gib", "generated_code_gib",
            "estimate_total_gib"} <= set(out["xla"])
    # The tiny preset's own base_* keys over MaxText's default model are the shape the estimate reads.
    assert 0 < out["estimate"]["total_gib"] == out["xla"]["estimate_total_gib"] < 0.01


def test_an_unchanged_run_is_answered_from_the_cache(tiny):
    status, out, err, seconds = run_preview(TINY)
    assert status == 0 and out["xla"]["cached"] is True and err == ""
    assert {k: v for k, v in out["xla"].items() if k != "cached"} == {k: v for k, v in tiny[1]["xla"].items() if k != "cached"}
    assert seconds < 1.0


def test_a_run_xla_refuses_reports_what_it_needs_and_fails_preview(cache):
    status, out, _, _ = run_preview([*TINY, *DOES_NOT_FIT])
    xla = out["xla"]
    assert status == 1 and xla["fits"] is False and xla["status"] == "oom"
    assert xla["hbm_limit_gib"] == V6E.xla_hbm_limit_gib
    assert xla["peak_hbm_gib"] > xla["hbm_limit_gib"] and xla["margin_gib"] < 0
    assert "CompileTimeHbmOom" in xla["message"]


def test_an_elastic_run_is_compiled_at_each_slice_count_it_may_train_on(tiny):
    status, out, err, _ = run_preview([*TINY, "--elastic"])
    by_slices = out["xla_by_slices"]
    assert status == 0 and out["sharding"]["slice_counts"] == [2, 1] and set(by_slices) == {"1", "2"}
    for count, xla in by_slices.items():
        assert (xla["num_slices"], xla["compile_topology"], xla["status"]) == (int(count), "v6e-16", "compiled")
        assert 0 < xla["peak_hbm_gib"] < xla["hbm_limit_gib"]
    # The 2-slice compile is the tiny fixture's, from the cache; 1 slice is another program, compiled now.
    assert by_slices["2"]["cached"] is True and by_slices["1"]["cached"] is False
    assert by_slices["1"]["digest"] != by_slices["2"]["digest"]
    assert "local-tiny (default) on 1 x v6e-16: compiling the train step" in err
    assert out["xla"] in by_slices.values()
    assert out["xla"]["margin_gib"] == min(xla["margin_gib"] for xla in by_slices.values())


def test_a_flag_libtpu_does_not_know_stops_the_check_naming_it(cache, tmp_path, monkeypatch):
    request = tiny_request(flags=("--xla_tpu_no_such_flag_for_this_test=true",))
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    with pytest.raises(xla_check.CompileCheckError) as error:
        xla_check.compile_check(request, progress=lambda _: None)
    assert "Unknown command line flag 'xla_tpu_no_such_flag_for_this_test'" in str(error.value)
    assert not (cache / f"{request.digest()}.json").exists()
    # libtpu ended the child before its temp folder's cleanup ran: that folder was in the check's own, removed.
    assert list(temp.iterdir()) == []


def test_xla_refuses_the_tutorials_flags_for_v6e_and_the_refusal_is_compiled_again(cache):
    # Why the pods leave out the all-gather fusion flag (gke_ray_tpu.core.libtpu_flags.ALL_GATHER_FUSION).
    request = tiny_request(flags=TUTORIAL_XLA_FLAGS)
    for _ in range(2):
        said = []
        result = xla_check.compile_check(request, progress=said.append)
        assert (result.status, result.fits, result.cached) == ("error", None, False)
        assert "FAILED_PRECONDITION: Continuation fusion for AllGather" in result.message
        assert "compiling the train step for 2 x v6e-16" in said[0]  # a compile of its own, each time
        assert "Jitting and compiling train step" in Path(result.log).read_text()
    assert not (cache / f"{request.digest()}.json").exists()


POD_FLAGS = ("--xla_tpu_scoped_vmem_limit_kib=122880", "--xla_enable_async_all_gather=true")


def test_a_large_run_compiles_without_flags_and_libtpu_judges_them_on_the_small_model(cache, monkeypatch):
    """Real compiles, the tiny run taken as large: it compiles without flags, and the small model on its mesh
    under the tutorial's flags is refused by libtpu for v6e (so the run is), under the pods' it is taken."""
    monkeypatch.setattr(xla_check, "SMALL_MODEL_PARAMS", 0)
    spec = build_job(get_preset("tiny-cpu"), base_output_directory=DATA_MOUNT + "/", run_name="local-tiny", slices=2)
    v6e = slice_shape("v6e", "4x4")
    [refused] = xla_check.check_job(spec, TUTORIAL_XLA_FLAGS, [2], v6e, progress=lambda _: None).by_slices.values()
    assert refused.request.libtpu_flags == () and refused.outcome["status"] == "compiled"
    assert refused.flags_check.request.libtpu_flags == tuple(TUTORIAL_XLA_FLAGS) and refused.flags_refused
    assert (refused.fits, refused.status) == (None, "flags_refused")
    assert "Continuation fusion for AllGather" in refused.message
    assert refused.verdict().startswith("libtpu refused the pods' flags on this mesh")
    taken = xla_check.check_job(spec, POD_FLAGS, [2], v6e, progress=lambda _: None)
    assert taken.fits and taken.by_slices[2].flags_check.fits and taken.by_slices[2].cached  # the run: from the cache
    assert taken.by_slices[2].peak_hbm_gib == refused.peak_hbm_gib


def tiny_request(flags=POD_FLAGS, slices=2, **overrides):
    spec = build_job(get_preset("tiny-cpu"), base_output_directory=DATA_MOUNT + "/", run_name="local-tiny",
                     slices=2, overrides=overrides)
    return xla_check.request_for_job(spec, flags, slice_shape("v6e", "4x4"), slices)


def test_the_digest_follows_the_program_not_where_the_run_writes(monkeypatch):
    base = tiny_request().digest()
    assert tiny_request(steps=11).digest() != base  # the learning-rate schedule is in the program
    assert tiny_request(per_device_batch_size=2).digest() != base
    assert tiny_request(slices=1).digest() != base
    same = build_job(get_preset("tiny-cpu"), base_output_directory="/elsewhere/", run_name="another-name",
                     slices=2, overrides={"checkpoint_period": 2}, compilation_cache_dir="/tmp/cache")
    assert xla_check.request_for_job(same, POD_FLAGS, slice_shape("v6e", "4x4"), 2).digest() == base
    # The pods' flags are in the program.
    assert tiny_request(flags=()).digest() != base
    assert tiny_request(flags=POD_FLAGS[:1]).digest() != base
    real = xla_check.versions()
    monkeypatch.setattr(xla_check, "versions", lambda: {**real, "libtpu": "0.0.51"})
    assert tiny_request().digest() != base
    monkeypatch.undo()
    # The caller's shell is not what the pods run: its flags reach neither the child nor the digest.
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_enable_latency_hiding_scheduler=false")
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    assert tiny_request().digest() == base
    env = xla_check._child_env(tiny_request())
    assert env["LIBTPU_INIT_ARGS"].split() == list(POD_FLAGS) and "XLA_FLAGS" not in env


def test_the_digest_follows_the_childs_code_not_its_docstrings_or_comments(monkeypatch, tmp_path):
    """A compile takes minutes: an edited docstring or comment in the child keeps every cached verdict, a changed
    statement does not."""
    base = tiny_request().digest()
    source = xla_check.CHILD_SOURCES[1].read_text()
    edits = {
        "docstring": source.replace('"""', '"""Edited. ', 1),
        "comment": source + "\n# an added comment\n",
        "attribute docstring": source + '\nLIMIT = 1\n"""Added."""\n',
        "code": source + "\nLIMIT = 1\n",
    }
    digests = {}
    for name, text in edits.items():
        edited = tmp_path / name.replace(" ", "_") / "xla_live_set.py"
        edited.parent.mkdir()
        edited.write_text(text)
        monkeypatch.setattr(xla_check, "CHILD_SOURCES", (xla_check.CHILD_SOURCES[0], edited))
        digests[name] = tiny_request().digest()
    assert digests["docstring"] == base and digests["comment"] == base
    assert digests["code"] != base
    assert digests["attribute docstring"] == digests["code"]


def test_the_digest_follows_the_configs_contents_not_where_they_sit(monkeypatch, tmp_path):
    """Another clone, or MaxText installed elsewhere, reads the same YAML: the same program, the same verdict."""
    base = tiny_request().digest()
    [(name, _)] = tiny_request()._config_files().items()
    original = xla_check.configs_dir() / name
    moved = tmp_path / "elsewhere" / "configs"
    moved.mkdir(parents=True)
    shutil.copy(original, moved / name)
    monkeypatch.setattr(xla_check, "configs_dir", lambda: moved)
    assert tiny_request()._config_files() != {} and tiny_request().digest() == base
    (moved / name).write_text(original.read_text() + "\n# another base config\n")
    assert tiny_request().digest() != base


def pods_flags(run) -> list[str]:
    """The TPU workers' LIBTPU_INIT_ARGS, as the rendered RayCluster sets them."""
    [group] = run.one(RAYCLUSTER).inputs["spec"]["workerGroupSpecs"]
    env = {e["name"]: e["value"] for e in group["template"]["spec"]["containers"][0]["env"]}
    return env["LIBTPU_INIT_ARGS"].split()


COMPILED = {"status": "compiled", "peak_bytes": 20 * 2**30, "argument_bytes": 6 * 2**30, "output_bytes": 6 * 2**30,
            "alias_bytes": 6 * 2**30, "temp_bytes": 19 * 2**30, "generated_code_bytes": 2**26,
            "hbm_limit_gib": 31.24, "compile_seconds": 1.0, "peak_rss_mib": 1}
OOM = {"status": "oom", "needed_gib": 40.0, "available_gib": 31.24, "compile_seconds": 1.0, "peak_rss_mib": 1,
       "message": "RESOURCE_EXHAUSTED: ... the total memory required for HLO temporaries (40.00G) exceeds available HBM (31.24G)"}


class FakeCompiler:
    """Stands in for the child process: answers ``outcome`` and records each compile it was asked for."""

    def __init__(self):
        self.outcome = COMPILED
        self.calls = []

    def __call__(self, request, log, progress, every_s, timeout_s):
        self.calls.append(request)
        return {**self.outcome, "wall_seconds": 2.0}


@pytest.fixture
def compiler(monkeypatch, tmp_path):
    monkeypatch.setenv(xla_check.CACHE_DIR_ENV, str(tmp_path))
    fake = FakeCompiler()
    monkeypatch.setattr(xla_check, "_run_child", fake)
    return fake


def _runs(calls):
    """The requests of the run itself, not the small model's beside it."""
    return [request for request in calls if "-wide 2-layer model" not in request.label]


def _small(calls):
    return [request for request in calls if "-wide 2-layer model" in request.label]


def test_the_pods_flags_less_their_network_interfaces_go_to_the_small_model_beside_the_run(compiler, dev_config):
    """The 8B (above SMALL_MODEL_PARAMS) compiles without flags; the small model on its mesh compiles under the
    pods' flags, less the DCN interfaces: what libtpu is asked to take is what the pods give it."""
    run = run_offline(with_keys(dev_config, compileCheck="true"))
    pods = pods_flags(run)
    interfaces = [flag for flag in pods if flag.startswith("--megascale_grpc_interface_prefixes=")]
    assert interfaces == ["--megascale_grpc_interface_prefixes=eth1,eth2,lo"]
    [request], [small] = _runs(compiler.calls), _small(compiler.calls)
    assert request.libtpu_flags == () and xla_check._child_env(request)["LIBTPU_INIT_ARGS"] == ""
    assert list(small.libtpu_flags) == [flag for flag in pods if flag not in interfaces] and len(pods) >= 2
    assert xla_check._child_env(small)["LIBTPU_INIT_ARGS"].split() == list(small.libtpu_flags)
    assert (small.compile_topology, small.num_slices) == (request.compile_topology, request.num_slices)


def test_the_small_model_takes_the_runs_mesh_and_splits_evenly_on_it():
    """Every dimension the mesh splits is a multiple of its shards, so the small model shards as the run does."""
    from gke_ray_tpu.core.sharding import check_sharding

    for overrides, shape in (({}, slice_shape("v6e", "4x4")),
                             ({"ici_fsdp_parallelism": 1, "ici_tensor_parallelism": 8}, slice_shape("v5p", "2x2x2")),
                             ({"dcn_tensor_parallelism": 2, "dcn_data_parallelism": 1}, slice_shape("v6e", "4x4"))):
        spec = build_job(get_preset("llama3-8b"), base_output_directory=DATA_MOUNT + "/", run_name="r", slices=2,
                         overrides=overrides, generation=shape.generation.name, topology=shape.topology)
        settings = xla_check.small_model_settings(spec, shape, 2)
        for key, value in spec.maxtext.items():
            if key.endswith("_parallelism") or key in ("steps", "run_name", "base_output_directory"):
                assert settings[key] == value
        assert settings["model_name"] == "default" and settings["base_num_decoder_layers"] == 2
        check_sharding(settings, shape, [2])


def test_a_refusal_of_the_pods_flags_refuses_the_run(monkeypatch, tmp_path, capsys):
    class FlagsRefused(FakeCompiler):
        def __call__(self, request, log, progress, every_s, timeout_s):
            self.outcome = ERROR_FLAGS if request.libtpu_flags else COMPILED
            return super().__call__(request, log, progress, every_s, timeout_s)

    monkeypatch.setenv(xla_check.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(xla_check, "_run_child", FlagsRefused())
    assert preview.main(["--section", "training", "--compile", "--json"]) == 1
    captured = capsys.readouterr()
    xla = json.loads(captured.out)["xla"]
    assert (xla["fits"], xla["status"], xla["flags_check"]["accepted"]) == (None, "flags_refused", False)
    assert "Continuation fusion for AllGather" in xla["message"]
    assert "libtpu refused the pods' flags on this mesh" in captured.err


ERROR_FLAGS = {"status": "error", "compile_seconds": 1.0, "peak_rss_mib": 1,
               "message": "JaxRuntimeError: FAILED_PRECONDITION: Continuation fusion for AllGather is enabled on platform"}


def test_exact_flags_compiles_the_run_itself_under_them(compiler, capsys):
    assert preview.main(["--section", "training", "--compile", "--json", "--exact-flags"]) == 0
    [request] = compiler.calls
    xla = json.loads(capsys.readouterr().out)["xla"]
    assert request.libtpu_flags and xla["flags_check"] is None and xla["libtpu_flags"] == list(request.libtpu_flags)
    assert xla["compiled_under"].startswith("the run, under the pods'")
    assert preview.main(["--section", "training", "--exact-flags"]) == 2


def test_the_compiles_of_every_count_run_at_once(monkeypatch, tmp_path):
    """An elastic run's counts and the small model beside each: four children, two at a time on two cores."""
    import threading

    running, most = [0], [0]
    lock = threading.Lock()

    def child(request, log, progress, every_s, timeout_s):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.3)
        with lock:
            running[0] -= 1
        return {**COMPILED, "wall_seconds": 0.3}

    monkeypatch.setenv(xla_check.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(xla_check, "_run_child", child)
    spec = build_job(get_preset("llama3-8b-elastic"), base_output_directory=DATA_MOUNT + "/", run_name="e", slices=2,
                     generation="v6e", topology="4x4")
    results = xla_check.check_job(spec, POD_FLAGS, [1, 2], slice_shape("v6e", "4x4"), jobs=2, progress=lambda _: None)
    assert set(results.by_slices) == {1, 2} and results.fits and most[0] == 2
    assert all(result.flags_check is not None and not result.flags_refused for result in results.by_slices.values())
    assert xla_check.parallel_compiles(3) == 3 and 1 <= xla_check.parallel_compiles() <= (os.cpu_count() or 1)


def test_a_changed_run_compiles_again_and_an_unchanged_one_does_not(compiler):
    assert xla_check.compile_check(tiny_request(), progress=lambda _: None).cached is False
    assert xla_check.compile_check(tiny_request(), progress=lambda _: None).cached is True
    assert xla_check.compile_check(tiny_request(steps=12), progress=lambda _: None).cached is False
    assert len(compiler.calls) == 2


ERROR = {"status": "error", "message": "ValueError: MaxText refused a setting", "compile_seconds": 1.0, "peak_rss_mib": 1}


def test_an_error_is_not_cached_as_a_verdict_and_a_rerun_compiles_again(compiler):
    compiler.outcome = ERROR
    for _ in range(2):
        result = xla_check.compile_check(tiny_request(), progress=lambda _: None)
        assert (result.status, result.fits, result.cached) == ("error", None, False)
    assert len(compiler.calls) == 2
    # Once the cause is gone, the same digest gets its verdict, and keeps it.
    compiler.outcome = COMPILED
    assert xla_check.compile_check(tiny_request(), progress=lambda _: None).fits is True
    assert xla_check.compile_check(tiny_request(), progress=lambda _: None).cached is True
    assert len(compiler.calls) == 3


def test_an_error_cached_by_an_older_check_is_compiled_again(compiler, tmp_path):
    request = tiny_request()
    (tmp_path / f"{request.digest()}.json").write_text(json.dumps({"outcome": ERROR, "wall_seconds": 1.0}))
    assert xla_check.compile_check(request, progress=lambda _: None).cached is False
    assert len(compiler.calls) == 1


class OneSliceTooFew(FakeCompiler):
    """Fits on 2 slices, out of HBM on 1 (parameters sharded over half the chips)."""

    def __call__(self, request, log, progress, every_s, timeout_s):
        self.outcome = OOM if request.num_slices == 1 and not _small([request]) else COMPILED
        return super().__call__(request, log, progress, every_s, timeout_s)


def test_a_slice_count_xla_refuses_fails_preview_naming_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(xla_check.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(xla_check, "_run_child", compiler := OneSliceTooFew())
    assert preview.main(["--section", "training", "--compile", "--json", "--elastic"]) == 1
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert sorted(request.num_slices for request in _runs(compiler.calls)) == [1, 2]
    assert out["xla_by_slices"]["2"]["fits"] is True and out["xla_by_slices"]["1"]["fits"] is False
    assert out["xla"]["num_slices"] == 1 and out["xla"]["status"] == "oom"
    # The estimate is made for 2 slices: it stands beside that count only.
    assert out["xla_by_slices"]["2"]["estimate_total_gib"] == out["estimate"]["total_gib"]
    assert out["xla"]["estimate_total_gib"] is None
    assert "XLA does not compile the run within HBM at 1 x v6e-16: does NOT fit: XLA needs 40.00 GiB" in captured.err


def test_a_declared_elastic_run_is_compiled_at_each_count_and_refused_naming_the_count(monkeypatch, tmp_path, dev_config):
    monkeypatch.setenv(xla_check.CACHE_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(xla_check, "_run_child", compiler := OneSliceTooFew())
    runs = '[{"name": "elastic-8b", "preset": "llama3-8b-elastic"}]'
    with pytest.raises(ConfigError) as error:
        run_offline(with_keys(dev_config, compileCheck="true", runs=runs))
    assert (error.value.key, error.value.value) == ("gke-ray-tpu:runs[0]", "elastic-8b")
    assert "at each slice count it may train on (1, 2): at 1 x v6e-16: does NOT fit" in error.value.expected
    assert sorted(request.num_slices for request in _runs(compiler.calls)) == [1, 2]


def results_of(*outcomes) -> xla_check.SliceCountResults:
    request = tiny_request()
    return xla_check.SliceCountResults(
        {n: xla_check.XlaResult(request, outcome, "d", {}, 1.0, "log") for n, outcome in enumerate(outcomes, 1)}
    )


def test_the_largest_buffers_name_what_a_buffer_was_written_over():
    buffers = [{"name": "multiply_convert_fusion", "bytes": 8 * 2**30, "shape": "bf16[32,4096,32064]",
                "op": "jit(train_step)/transpose(jvp())/convert_element_type", "shares": ["fusion.287"]},
               {"name": "while.56{2}", "bytes": 2**32, "shape": "bf16[32,16,4096,1024]", "op": "", "shares": []}]
    result = results_of({**COMPILED, "peak_buffers": buffers}).worst
    assert result.largest_buffers() == [
        "8.00 GiB bf16[32,4096,32064] jit(train_step)/transpose(jvp())/convert_element_type (in place of fusion.287)",
        "4.00 GiB bf16[32,16,4096,1024] while.56{2}"]


def test_the_worst_count_is_out_of_hbm_then_refused_then_the_smallest_margin():
    tight = {**COMPILED, "peak_bytes": 30 * 2**30}
    assert results_of(COMPILED, tight).worst.outcome is tight
    assert results_of(tight, ERROR, COMPILED).worst.outcome is ERROR
    assert results_of(ERROR, OOM, tight).worst.outcome is OOM
    assert results_of(COMPILED, tight).fits and not results_of(COMPILED, ERROR).fits


def test_a_run_within_the_runtimes_reserve_is_warned_naming_the_reserve(compiler, capsys):
    """XLA fits it, but leaves less than the TPU runtime held beyond XLA's peak on the chip (RUNTIME_RESERVE_GIB;
    a third of a buffer over 4 GiB): a warning with both figures, not a plain "fits"; the run is not refused."""
    near = {**COMPILED, "peak_bytes": int(31.10 * 2**30)}
    result = results_of(near).worst
    assert result.fits and result.within_reserve and result.runtime_reserve_gib == xla_check.RUNTIME_RESERVE_GIB
    assert result.verdict().startswith("fits XLA's limit, but WARNING: XLA leaves 0.14 GiB of the 31.24 GiB, less "
                                       "than the 0.25 GiB the TPU runtime may hold")
    logits = [{"name": "fusion", "bytes": 6 * 2**30, "shape": "bf16[16,2048,196608]", "op": "dot_general", "shares": []}]
    clear = results_of({**COMPILED, "peak_bytes": 29 * 2**30, "peak_buffers": logits}).worst
    assert clear.runtime_reserve_gib == 2.0 and not clear.within_reserve and clear.warning() is None
    tight = results_of({**COMPILED, "peak_bytes": int(29.5 * 2**30), "peak_buffers": logits}).worst
    assert "the 2.00 GiB the TPU runtime may hold beyond XLA's peak (a third of its 6.00 GiB buffer" in tight.verdict()
    compiler.outcome = near
    assert preview.main(["--section", "training", "--compile", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["xla"]["fits"] is True and out["xla"]["runtime_reserve_gib"] == xla_check.RUNTIME_RESERVE_GIB
    assert out["xla"]["warning"].startswith("XLA leaves 0.14 GiB")


def test_the_estimate_stands_beside_xla_in_the_json(compiler, capsys):
    assert preview.main(["--section", "training", "--compile", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["xla"]["peak_hbm_gib"] == 20.0 and out["xla"]["fits"] is True
    assert out["xla"]["estimate_total_gib"] == out["estimate"]["total_gib"]
    assert out["xla"]["estimate_over_xla"] == out["estimate"]["total_gib"] / 20.0


def test_text_output_shows_xla_figures_under_the_estimate(compiler, capsys):
    assert preview.main(["--section", "training", "--compile"]) == 0
    text = capsys.readouterr().out
    assert "HBM per chip (XLA, compiled for 2 x v6e-16; MaxText 0.2.5, libtpu 0.0.50.1" in text
    assert "  compiled: the run without flags" in text
    assert ("the pods' 7 flags on a 1024-wide 2-layer model on 2 x v6e-16 with rayjob-multi-slice's mesh: "
            "libtpu took them") in text
    assert "  peak                                               20.00 GiB" in text
    assert "verdict (XLA): fits (margin +11.24 GiB)" in text


def test_flags_that_do_not_go_together(capsys):
    assert preview.main(["--json"]) == 2
    assert "--json prints the training section: add --section training" in capsys.readouterr().err
    assert preview.main(["--section", "manifests", "--compile"]) == 2
    assert "--compile checks the planned run" in capsys.readouterr().err


def test_no_compiler_is_exit_3_naming_what_to_install(monkeypatch, capsys):
    def missing():
        raise xla_check.CompileCheckError("libtpu is not installed in /x/python: ... bin/setup installs both")

    monkeypatch.setattr(xla_check, "versions", missing)
    assert preview.main(["--section", "training", "--compile"]) == 3
    assert "the compile check could not run: libtpu is not installed" in capsys.readouterr().err


def test_preview_fails_a_declared_run_xla_refuses(compiler, dev_config):
    compiler.outcome = OOM
    run = OfflineRun()
    with pytest.raises(ConfigError) as error:
        run_offline(with_keys(dev_config, compileCheck="true"), run=run)
    assert (error.value.key, error.value.value, run.resources) == ("gke-ray-tpu:runs[0]", "baseline-8b", [])
    assert ("a run XLA compiles within the chips' HBM at each slice count it may train on (2): at 2 x v6e-16: "
            "does NOT fit: XLA needs 40.00 GiB of the 31.24 GiB") in error.value.expected


def test_preview_shows_xla_figures_for_a_declared_run_it_fits(compiler, dev_config):
    run = run_offline(with_keys(dev_config, compileCheck="true"))
    [declared] = [m for level, m in run.logs if level == "info" and m.startswith("Declared run baseline-8b")]
    assert "verdict: uncertain" in declared and "verdict (XLA): fits (margin +11.24 GiB)" in declared
    assert "the estimate said 21.86 GiB: 1.09 x XLA's figure" in declared
    [request] = _runs(compiler.calls)
    assert request.compile_topology == "v6e-16" and request.num_slices == 2
    assert "run_name=baseline-8b" in request.maxtext_argv  # the declared run's own job


def test_without_compile_check_preview_compiles_nothing(compiler, dev_config):
    run_offline(dev_config)
    assert compiler.calls == []


def test_a_compile_check_that_cannot_run_fails_preview_under_its_key(monkeypatch, tmp_path, dev_config):
    def broken(request, log, progress, every_s, timeout_s):
        raise xla_check.CompileCheckError("the compile of x exited with status -9 and no verdict (log: l)")

    monkeypatch.setattr(xla_check, "_run_child", broken)
    monkeypatch.setenv(xla_check.CACHE_DIR_ENV, str(tmp_path))
    with pytest.raises(ConfigError) as error:
        run_offline(with_keys(dev_config, compileCheck="true"))
    assert error.value.key == "gke-ray-tpu:compileCheck"
    assert "exited with status -9" in error.value.expected


@pytest.mark.parametrize(
    "message, found",
    [
        ("RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory required for "
         "HLO temporaries (87.44G) exceeds available HBM (31.24G). HLO module: jit_train_step.", (87.44, 31.24)),
        ("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used 33.50G of 31.24G hbm.", (33.5, 31.24)),
        ("RESOURCE_EXHAUSTED: ... required for HLO temporaries (512.00M) exceeds available HBM (15.75G)", (0.5, 15.75)),
        ("INTERNAL: RET_CHECK failure", None),
    ],
)
def test_xlas_out_of_memory_messages_are_read_in_gib(message, found):
    assert xla_compile.parse_oom(message) == found


@pytest.mark.parametrize("name", sorted(GENERATIONS))
def test_every_catalogue_slice_has_maxtexts_compile_topology_name(name):
    from maxtext.utils.accelerator_to_spec_map import UserFacingNameToSystemCharacteristics as maxtext_names

    for topology in GENERATIONS[name].topologies:
        assert slice_shape(name, topology).maxtext_accelerator in maxtext_names, (name, topology)


def test_the_cache_lives_outside_the_repository_unless_told(monkeypatch, tmp_path):
    monkeypatch.delenv(xla_check.CACHE_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert xla_check.cache_dir() == tmp_path / "gke-ray-tpu" / "compile-check"
    monkeypatch.setenv(xla_check.CACHE_DIR_ENV, str(tmp_path / "mine"))
    assert xla_check.cache_dir() == tmp_path / "mine"
