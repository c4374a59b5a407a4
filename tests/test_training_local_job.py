"""The real thing on CPU: a local Ray head, the tiny MaxText job through the submit path.

One Ray head for the session (started and stopped here), one real training job
through ``python -m gke_ray_tpu.training.submit --local`` (with ``--address``: the head is
this fixture's), then the assertions on what the job left behind.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import math
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests
from ray.job_submission import JobStatus

from gke_ray_tpu.training import submit
from gke_ray_tpu.training.driver import connection, port_forward
from gke_ray_tpu.core.job_spec import submission_id_for
from gke_ray_tpu.training.driver.local_ray import LocalRayHead
from gke_ray_tpu.training.driver.progress import Progress
from gke_ray_tpu.training.driver.ray_auth import RayToken
from tests.conftest import REPO_ROOT, python_without_the_project
from tests.drill import jax_compile_seconds, maxtext_step_seconds
from tests.fakes import FakeCoreV1, pod

RUN = "pytest-tiny"
DECLARED = "pytest-declared"


def reported_losses(err: str, prefix: str) -> tuple[float, float]:
    """The first and last loss of a ``<prefix>, loss A -> B`` line the submit command printed."""
    match = re.search(re.escape(prefix) + r", loss (\S+) -> (\S+?)[,;]", err)
    assert match, err
    return float(match.group(1)), float(match.group(2))


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    # JAX_LOG_COMPILES: the workers log JAX's own timing of each compilation, which the goodput is checked against.
    with LocalRayHead(num_cpus=2, log_path=tmp_path_factory.mktemp("ray") / "ray-head.log",
                      env={"JAX_LOG_COMPILES": "1"}) as head:
        yield head


def _submit(ray_head: LocalRayHead, *argv: str) -> tuple[int, str]:
    """The submit command in this process, with the environment ``--address`` takes ``ray_head``'s token from."""
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as env, contextlib.redirect_stderr(err):
        for name, value in ray_head.address_env.items():
            env.setenv(name, value)
        rc = submit.main(list(argv))
    return rc, err.getvalue()


@pytest.fixture(scope="module")
def local_job(ray_head, tmp_path_factory):
    out = tmp_path_factory.mktemp("local-runs")
    # The command's span on the clock Ray stamps the job with (epoch seconds): the VM this runs on may step its
    # wall clock, which a monotonic span would not see.
    before = time.time()
    rc, err = _submit(ray_head, "--local", "--address", ray_head.address, "--output-dir", str(out), f"run_name={RUN}")
    return rc, err, out, (before, time.time())


@pytest.fixture(scope="module")
def warm_cache(local_job) -> Path:
    """The ``jax_cache_dir`` of the tiny model's programs the first run compiled (its goodput is checked against
    JAX's own compile log, so it compiles cold): the later runs of this module find them there and skip XLA."""
    return local_job[2] / "jax-cache"


def test_job_succeeds_and_the_loss_goes_down(ray_head, local_job):
    rc, err, _, _ = local_job
    assert rc == 0, err
    client = ray_head.jobs()
    sid = submission_id_for(RUN)
    assert client.get_job_status(sid) == JobStatus.SUCCEEDED
    progress = Progress()
    progress.feed(client.get_job_logs(sid))
    progress.flush()
    assert sorted(progress.steps) == list(range(10))
    assert progress.last.loss < progress.first.loss - 0.5, (progress.first, progress.last)
    # What the submit command showed while it streamed.
    assert "[submit] step 1/10  loss " in err and "[submit] step 10/10  loss " in err
    assert f"[submit] {sid} SUCCEEDED after " in err and "10 steps, loss " in err


def test_plain_output_is_the_commands_own_lines_one_per_step_and_the_log_goes_to_a_file(local_job):
    """Not a terminal (the test captures stderr): plain lines, nothing of the workers' logs."""
    rc, err, out, _ = local_job
    lines = err.splitlines()
    assert all(line.startswith("[submit] ") for line in lines), [l for l in lines if not l.startswith("[submit] ")]
    assert [sum(line.startswith(f"[submit] step {n}/10 ") for line in lines) for n in range(1, 11)] == [1] * 10
    assert len(lines) <= 25, err
    job_log = out / RUN / "job.log"
    assert f"[submit] job log: {job_log} (--verbose streams it here too)" in lines
    log = job_log.read_text()
    assert log.count("completed step: 9,") == 2 and "Config param" in log  # both workers, everything


def test_the_figure_is_drawn_from_the_metrics_maxtext_wrote(ray_head, local_job):
    from matplotlib.image import imread

    from gke_ray_tpu.training import report

    rc, err, out, _ = local_job
    png = out / RUN / "report.png"
    assert f"[submit] figure: {png}" in err
    image = imread(png)
    assert image.shape[:2] == (report.FIGURE_INCHES[1] * report.DPI, report.FIGURE_INCHES[0] * report.DPI)
    assert len({tuple(pixel) for pixel in image.reshape(-1, image.shape[2])[::97]}) > 20  # curves, text, the bar
    # The values read back from MaxText's event files are the job's own losses (float32 in the file).
    metrics = report.read_metrics(str(out / RUN / "tensorboard"))
    progress = Progress()
    progress.feed(ray_head.jobs().get_job_logs(submission_id_for(RUN)))
    progress.flush()
    losses = dict(metrics.series(report.LOSS))
    assert sorted(losses) == list(range(10)) and metrics.restarts == []
    assert [losses[n] for n in range(10)] == pytest.approx([progress.steps[n].loss for n in range(10)], abs=5e-4)
    assert all(value > 0 for _, value in metrics.series(report.TOKENS))
    # On demand, by run name: the same picture again.
    again = out / "again.png"
    assert report.main([RUN, "--output-dir", str(out), "-o", str(again)]) == 0
    assert (imread(again) == image).all()


def test_the_goodput_of_the_local_run_agrees_with_maxtexts_step_times_and_jaxs_compile_times(ray_head, local_job,
                                                                                              capsys):
    """Each bucket against a record the accounting does not read: MaxText's event files, JAX's compile log."""
    from gke_ray_tpu.training import report

    rc, err, out, (before, after) = local_job
    [line] = [line for line in err.splitlines() if line.startswith("[submit] goodput ")]
    assert report.main([RUN, "--output-dir", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["goodput"]
    buckets, wall = result["buckets"], result["wall_s"]
    # Productive: the steps' seconds MaxText wrote to its event files (float32 there, 3 decimals in the log the
    # accounting reads), less what the checkpoint saves inside the loop blocked.
    [recorded] = maxtext_step_seconds(out / RUN / "tensorboard")
    assert sorted(recorded) == list(range(10))
    steps_s = sum(recorded.values())
    assert steps_s - buckets["checkpoint_save"] - 0.01 <= buckets["productive"] <= steps_s + 0.01, (buckets, steps_s)
    # Compilation: what JAX timed itself from the checkpoint lookup to the train step's XLA compilation (tracing,
    # lowering, compiling), plus the little that is not JAX (state set-up, MaxText's memory report).
    log = (out / RUN / "job.log").read_text()
    progress = Progress()
    progress.feed(log)
    progress.flush()
    [group] = progress.groups
    jax_s, train_step_s = jax_compile_seconds(log, {r: p for p, r in group.ranks.items()}[0])
    assert train_step_s < buckets["compilation"] and 0.9 * jax_s <= buckets["compilation"] <= jax_s + max(2.0, 0.25 * jax_s), (
        buckets, jax_s)
    assert 0 < result["goodput_pct"] < 100 and line.startswith(f"[submit] goodput {result['goodput_pct']:.1f}%: ")
    # A clean run: it starts, compiles, checkpoints and trains; nothing restarted.
    assert min(buckets[name] for name in ("productive", "startup", "compilation", "checkpoint_save")) > 0
    assert buckets["recovery"] == buckets["lost_progress"] == buckets["checkpoint_restore"] == 0
    assert (result["restarts"], result["rerun_steps"]) == (0, 0)
    assert set(result["usd"].values()) == {0.0}  # a local run uses no TPU
    # The wall time is Ray's own submission-to-end (asked of the head, not read from the file the accounting reads),
    # and both stamps lie within the submit command's run on the same clock.
    info = ray_head.jobs().get_job_info(submission_id_for(RUN))
    submitted, ended = info.start_time / 1000, info.end_time / 1000
    assert before <= submitted < ended <= after, (before, submitted, ended, after)
    assert wall == pytest.approx(ended - submitted, abs=0.002)


def test_orbax_checkpoints_where_maxtext_puts_them(local_job):
    _, _, out, _ = local_job
    checkpoints = out / RUN / "checkpoints"
    assert sorted(int(p.name) for p in checkpoints.iterdir()) == [0, 5, 9]  # checkpoint_period=5, + the last
    last = checkpoints / "9"
    for name in ("_CHECKPOINT_METADATA", "commit_success.txt", "items/_METADATA", "items/manifest.ocdbt"):
        assert (last / name).is_file(), name
    # Both workers wrote their shards: one JAX program over two processes.
    assert sorted(p.name for p in (last / "items").glob("ocdbt.process_*")) == ["ocdbt.process_0", "ocdbt.process_1"]


def test_the_same_run_again_reports_it_and_submits_nothing(ray_head, local_job):
    _, _, out, _ = local_job
    client = ray_head.jobs()
    jobs_before = len(client.list_jobs())
    rc, err = _submit(ray_head, "--local", "--address", ray_head.address, "--output-dir", str(out), f"run_name={RUN}")
    assert rc == 0, err
    sid = submission_id_for(RUN)
    assert f"[submit] {sid} already SUCCEEDED; nothing to submit" in err
    # The report is read back from the finished job's log: the same figures the job logged.
    progress = Progress()
    progress.feed(client.get_job_logs(sid))
    progress.flush()
    first, last = reported_losses(err, f"[submit] {sid} SUCCEEDED: 10 steps")
    assert (first, last) == (round(progress.first.loss, 3), round(progress.last.loss, 3))
    assert math.isfinite(first) and math.isfinite(last) and last < first
    assert len(client.list_jobs()) == jobs_before


def test_port_forward_reaches_the_jobs_api(ray_head, monkeypatch):
    """The cluster path's forward, with the API server replaced by a plain TCP connection."""
    dashboard_port = int(ray_head.address.rsplit(":", 1)[1])

    class Stream:
        def __init__(self, *args, ports):
            assert args[1:] == ("head-b", "default") and ports == "8265"
            self.sock = socket.create_connection(("127.0.0.1", dashboard_port))

        def socket(self, port):
            return self.sock

    monkeypatch.setattr("kubernetes.stream.portforward", Stream)
    api = FakeCoreV1([pod("head-b")])
    with port_forward.PortForward("default", "head-svc", 8265, api=api) as pf:
        assert requests.get(f"{pf.url}/api/version", headers=ray_head.headers, timeout=10).json()["ray_version"] == "2.60.0"
        through_pf = connection.connect(pf.url, "test", print, token=RayToken(ray_head.token, "test")).list_jobs()
        direct = ray_head.jobs().list_jobs()
        assert sorted(j.submission_id for j in through_pf) == sorted(j.submission_id for j in direct)
        assert pf.stream_error is None


def _start_submit(ray_head, out, run: str, *overrides: str) -> subprocess.Popen:
    # Ctrl-C reaches it as on a terminal, even when the tests run where SIGINT is ignored
    # (a background job of a non-interactive shell starts with SIGINT ignored, and so would it).
    return subprocess.Popen(
        [sys.executable, "-m", "gke_ray_tpu.training.submit", "--local", "--address", ray_head.address,
         "--output-dir", str(out), f"run_name={run}", *overrides],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **ray_head.address_env}, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _read_until(proc: subprocess.Popen, text: str, timeout_s: float = 120) -> str:
    err = ""
    deadline = time.monotonic() + timeout_s
    while text not in err and time.monotonic() < deadline and proc.poll() is None:
        if select.select([proc.stderr], [], [], 1)[0]:
            err += proc.stderr.readline()
    assert text in err, err
    return err


def test_stopped_from_outside_then_resumed_as_attempt_2_then_ctrl_c(ray_head, tmp_path):
    """A job stopped with `ray job stop` exits 1 saying STOPPED; the same command submits attempt 2
    of the run (one job at a time), and Ctrl-C stops that one (exit 130)."""
    run = "pytest-stopped"
    client = ray_head.jobs()
    proc = _start_submit(ray_head, tmp_path, run)
    err = _read_until(proc, f"[submit] submitted {submission_id_for(run)}:")
    client.stop_job(submission_id_for(run))
    err += proc.communicate(timeout=120)[1]
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert f"[submit] {submission_id_for(run)} was STOPPED (Ctrl-C, `ray job stop` or the dashboard)" in err
    assert f"[submit] run the same command again to resume run {run} from its latest checkpoint" in err

    proc = _start_submit(ray_head, tmp_path, run)
    second = submission_id_for(run, 2)
    err = _read_until(proc, f"[submit] submitted {second}:")
    assert f"[submit] {submission_id_for(run)} STOPPED; submitting attempt 2 as {second} (same run_name" in err
    assert f"run_name={run}" in err.split(f"[submit] submitted {second}:")[1]
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=120)[1]
    assert proc.returncode == 130, err + rest
    assert f"[submit] interrupted: stopping {second}" in rest and "Traceback" not in rest
    statuses = {j.submission_id: j.status for j in client.list_jobs() if run in (j.submission_id or "")}
    assert statuses == {submission_id_for(run): JobStatus.STOPPED, second: JobStatus.STOPPED}


def test_a_job_that_maxtext_rejects_fails_with_its_error_lines(ray_head, tmp_path):
    """A value MaxText's own config refuses and the submit checks do not read (they refuse unknown keys, and
    type the keys the estimates read) passes them and fails in MaxText on every worker."""
    rc, err = _submit(ray_head, "--local", "--address", ray_head.address, "--output-dir", str(tmp_path),
                      "run_name=pytest-bad-key", "learning_rate=fast")
    sid = submission_id_for("pytest-bad-key")
    assert rc == 1 and "Traceback" not in err, err
    lines = err.splitlines()
    errors = lines[lines.index(f"[submit] {sid} FAILED; its last error lines:") + 1:-1]
    # (A worker-group start that waited for the previous test's CPUs may be logged first: Ray Train retries it.)
    # MaxText's pydantic config refuses the value (its field is named on the line after, not an exception line).
    assert "[submit]     pydantic_core._pydantic_core.ValidationError: 1 validation error for MaxTextConfig" in errors
    assert "[submit]     ray.train.WorkerGroupError: Training failed due to worker errors:" in errors
    assert ray_head.jobs().get_job_status(sid) == JobStatus.FAILED


def follow_in_a_terminal(ray_head: LocalRayHead, out: Path, run: str) -> tuple[int, str]:
    """``submit --follow run`` in a real terminal (a pty): its exit status and everything the terminal received."""
    import pty

    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gke_ray_tpu.training.submit", "--local", "--address", ray_head.address,
         "--output-dir", str(out), "--follow", run],
        cwd=REPO_ROOT, stdin=terminal, stdout=terminal, stderr=terminal, close_fds=True,
        env={**os.environ, **ray_head.address_env, "COLUMNS": "160", "LINES": "50", "TERM": "xterm-256color"},
    )
    os.close(terminal)
    screen = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the pty closes when the command exits
            break
        if not chunk:
            break
        screen += chunk
    os.close(controller)
    return proc.wait(timeout=300), screen.decode(errors="replace")


@pytest.fixture(scope="module")
def declared_job(ray_head, warm_cache, tmp_path_factory):
    """The RayJob's own entry point and runtime env (rendered for the CPU preset, the bucket mounted at the run's
    folder), with the code archive the submit command uploads for a run with its own cluster (the files
    MaxTextRun uploads), submitted as KubeRay submits it; then `--follow` by run name, in a terminal. Two tests read
    this one run: what a terminal shows, and that the archive alone ran it."""
    import yaml

    from gke_ray_tpu.core.ray_job import HeldCluster, RayJobRun, archived_command, ray_job
    from gke_ray_tpu.core.code_archive import archive_object, archive_zip, digest, package_files, sha256
    from gke_ray_tpu.core.job_spec import build_job
    from gke_ray_tpu.core.presets import get_preset

    out = tmp_path_factory.mktemp("declared")
    spec = build_job(get_preset("tiny-cpu"), base_output_directory=str(out), run_name=DECLARED, slices=2,
                     compilation_cache_dir=str(warm_cache))
    files = package_files()
    archive = out / archive_object(digest(files))
    archive.parent.mkdir(parents=True)
    archive.write_bytes(archive_zip(files))
    command = archived_command(spec, sha256(files), cold_start=False, mount=str(out))
    manifest = ray_job(RayJobRun(DECLARED, "default", command, HeldCluster("local")))
    env = yaml.safe_load(manifest["spec"]["runtimeEnvYAML"])
    sid = ray_head.jobs().submit_job(entrypoint=manifest["spec"]["entrypoint"], runtime_env=env,
                                     submission_id=manifest["spec"]["jobId"])
    rc, screen = follow_in_a_terminal(ray_head, out, DECLARED)
    return SimpleNamespace(out=out, archive=archive, manifest=manifest, env=env, sid=sid, rc=rc, screen=screen)



def test_a_terminal_gets_a_progress_bar_and_at_most_40_lines(declared_job):
    """A real terminal (a pty): the bar redraws in place; the worker logs stay in the job log."""
    text = declared_job.screen
    assert declared_job.rc == 0, text[-3000:]
    assert text.count("\n") <= 40, text
    assert "10/10" in text and "\x1b[" in text  # the bar, drawn with terminal control sequences
    assert "completed step:" not in text and "Config param" not in text
    assert "SUCCEEDED" in text and "figure: " in text and "goodput " in text
    assert (declared_job.out / DECLARED / "job.log").read_text().count("completed step: 9,") == 2


def test_a_declared_runs_job_runs_from_its_code_archive_and_is_followed(ray_head, declared_job):
    """It runs to completion from the archive alone, and `--follow` attaches to it by run name."""
    env, sid, out, text = dict(declared_job.env), declared_job.sid, declared_job.out, declared_job.screen
    assert env["env_vars"]["PYTHONPATH"] == str(declared_job.archive) and "py_modules" not in env
    assert declared_job.rc == 0, text[-3000:]
    assert f"[submit] {sid} is " in text and "10/10" in text
    assert f"[submit] {sid} SUCCEEDED after " in text and f"figure: {out / DECLARED / 'report.png'}" in text
    client = ray_head.jobs()
    assert client.get_job_status(sid) == JobStatus.SUCCEEDED
    assert sorted(int(p.name) for p in (out / DECLARED / "checkpoints").iterdir()) == [0, 5, 9]

    # The control: the same job without the archive on PYTHONPATH finds no code on the cluster. Its `python` is
    # one that has Ray and MaxText but not this project, as the cluster's image has: this checkout's .venv
    # installs the project (editable), a cluster's Python does not.
    env["env_vars"] = {k: v for k, v in env["env_vars"].items() if k != "PYTHONPATH"}
    env["env_vars"]["PATH"] = f"{python_without_the_project(out / 'bare')}:{os.environ['PATH']}"
    control = client.submit_job(entrypoint=declared_job.manifest["spec"]["entrypoint"], runtime_env=env)
    deadline = time.monotonic() + 120
    while client.get_job_status(control) not in (JobStatus.SUCCEEDED, JobStatus.FAILED) and time.monotonic() < deadline:
        time.sleep(1)
    assert client.get_job_status(control) == JobStatus.FAILED
    assert "No module named 'gke_ray_tpu'" in client.get_job_logs(control)
