"""The submit command's edges: stack outputs, CLI errors, retries, run attempts, progress, the port-forward."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shlex
import signal
import socket
import threading
import warnings

import aiohttp
import pytest
import requests
import urllib3
from kubernetes import client as k8s_client

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.job_spec import JobSpec, submission_id_for
from gke_ray_tpu.training import submit
from gke_ray_tpu.training.driver import jobs_client as jobs
from gke_ray_tpu.training.driver import connection, outcome, port_forward, request, retry, stack_outputs
from gke_ray_tpu.training.driver.errors import ClusterError
from gke_ray_tpu.training.driver.progress import Progress, StepMetrics, WorkerGroup, parse_line
from tests.fakes import FakeCoreV1, FakeJobsClient, pod


@pytest.fixture(scope="module")
def dev_outputs(dev_run) -> dict:
    return dict(dev_run.outputs)


def write(tmp_path, outputs) -> str:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    return str(path)


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    rc = submit.main(list(argv))
    return rc, capsys.readouterr().err


@pytest.fixture
def delays(monkeypatch) -> list[float]:
    """The backoff's sleeps, recorded instead of slept."""
    slept: list[float] = []
    monkeypatch.setattr(retry, "DEFAULT", retry.Backoff(sleep=slept.append))
    return slept


@pytest.fixture(autouse=True)
def run_dirs(tmp_path, monkeypatch):
    """Job logs and loss curves go to a temporary directory, not the repository's local-runs/."""
    monkeypatch.setattr(request, "DEFAULT_LOCAL_DIR", tmp_path / "runs")
    return tmp_path / "runs"


@pytest.fixture
def fake_cluster(monkeypatch):
    """submit.main talks to this FakeJobsClient instead of a cluster; returns a setter.

    The loss curve of these runs would be read from a bucket: recorded, not drawn."""
    holder = {}

    @contextlib.contextmanager
    def job_client(request, outputs, workers, log):
        yield holder["client"]

    monkeypatch.setattr(connection, "job_client", job_client)
    monkeypatch.setattr(outcome, "report", lambda run_dir, record, title, log: holder.setdefault("reports", []).append(record))

    def use(client: FakeJobsClient) -> FakeJobsClient:
        holder["client"] = client
        return client
    return use


MISSING = object()

# --- stack outputs -------------------------------------------------------------------------


def test_dev_stack_outputs_load(tmp_path, dev_outputs):
    out = stack_outputs.load_file(write(tmp_path, dev_outputs))
    assert (out.namespace, out.ray_head_service, out.ray_dashboard_port) == (
        "default", "maxtext-tpu-cluster-head-svc", 8265,
    )
    assert (out.checkpoint_dir, out.num_slices, out.elastic_min_slices, out.capacity_mode.spot) == (
        "gs://my-tpu-project-maxtext-checkpoints", 2, 1, False,
    )
    assert (out.tpu_generation, out.topology, out.hosts_per_slice, out.chips_per_slice) == ("v6e", "4x4", 4, 16)


def test_outputs_from_stdin(monkeypatch, dev_outputs):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(dev_outputs)))
    assert stack_outputs.load_file("-").topology == "4x4"


@pytest.mark.parametrize(
    "change, key, message",
    [
        ({"rayDashboardPort": MISSING}, "rayDashboardPort", "a int output, which the stack exports"),
        ({"numSlices": "2"}, "numSlices", "expected a int"),
        ({"numSlices": True}, "numSlices", "expected a int"),
        ({"hostsPerSlice": 2}, "hostsPerSlice", "4 for a v6e 4x4 slice"),
        ({"acceleratorType": "TPU-V5P"}, "acceleratorType", "'TPU-V6E' for a v6e 4x4 slice"),
        ({"topology": "4x5"}, "outputs.json: topology", "a v6e topology"),
        ({"elasticMinSlices": 3}, "elasticMinSlices", "between 1 and numSlices (2)"),
        ({"scaleToZero": "false"}, "scaleToZero", "expected a bool"),
        ({"capacity": MISSING}, "capacity", "a str output, which the stack exports"),
        ({"capacity": "preemptible"}, "capacity", "one of on-demand, spot, flex-start, reservation"),
        ({"checkpointDir": " "}, "checkpointDir", "a non-empty str"),
        # A stack deployed before runs wrote to the bucket directly: its outputs must be refreshed.
        ({"checkpointDir": "/data"}, "checkpointDir", "gs://my-tpu-project-maxtext-checkpoints, the bucket runs"),
        ({"checkpointDir": "gs://another-bucket"}, "checkpointDir", "run `pulumi up` to update its outputs"),
        ({"rayDashboardPort": 0}, "rayDashboardPort", "a TCP port (1-65535)"),
    ],
)
def test_bad_outputs_name_the_output(tmp_path, dev_outputs, change, key, message):
    outputs = {k: v for k, v in {**dev_outputs, **change}.items() if v is not MISSING}
    with pytest.raises(ConfigError) as e:
        stack_outputs.load_file(write(tmp_path, outputs))
    assert key in e.value.key and message in str(e.value)


def test_outputs_file_not_json_or_missing(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("Current stack outputs (3):\n")
    with pytest.raises(ConfigError, match=r"pulumi stack output --json.*line 1"):
        stack_outputs.load_file(str(bad))
    with pytest.raises(ConfigError, match="a readable file"):
        stack_outputs.load_file(str(tmp_path / "absent.json"))
    with pytest.raises(ConfigError, match="a JSON object"):
        stack_outputs.from_mapping([1, 2], "x.json")


def test_stack_without_the_pulumi_cli(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ConfigError) as e:
        stack_outputs.load_stack("dev")
    assert e.value.key == "--stack" and "no `pulumi` is on PATH" in e.value.expected


# --- the CLI: one line on stderr, a status code, never a traceback --------------------------


def test_cli_errors_are_one_line_with_status_2(capsys, tmp_path, dev_outputs):
    f = write(tmp_path, dev_outputs)
    cases = {
        ("--outputs-file", f, "--preset", "llama3-405b"): "--preset='llama3-405b': expected one of llama3-70b, llama3-8b",
        ("--outputs-file", f, "ici_fsdp_parallelism=4", "ici_tensor_parallelism=2"):
            "ici_fsdp_parallelism*ici_tensor_parallelism='4*2=8': expected a product of 16",
        ("--outputs-file", f, "--min-slices", "3"): "--min-slices=3: expected an integer between elasticMinSlices (1) and numSlices (2)",
        ("--outputs-file", f, "--preset", "tiny-cpu"): "a TPU preset for a cluster run",
        ("--outputs-file", f, "steps"): "override='steps': expected MaxText key=value",
        ("--outputs-file", str(tmp_path / "none.json")): "expected a readable file",
        ("--local", "--preset", "llama3-8b"): "a CPU preset for --local",
        ("--local", "--slices", "64"): "--slices=64: expected at most",
        ("--local", "--output-dir", f): "--output-dir=",
        ("--outputs-file", f, "steps=abc"): "steps='abc': expected an integer >= 1",
    }
    for argv, message in cases.items():
        rc, err = run_cli(capsys, *argv)
        assert (rc, err.count("\n")) == (2, 1), (argv, err)
        assert err.startswith("python -m gke_ray_tpu.training.submit: error: invalid config ") and message in err, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--preset", "llama3-8b"], "one of --outputs-file, --stack or --local is required"),
        (["--local", "--slices", "two"], "argument --slices: invalid int value: 'two'"),
        (["--local", "--outputs-file", "o.json"], "argument --outputs-file: not allowed with argument --local"),
        (["--local", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_flag_errors_are_one_line_with_status_2(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        submit.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err == f"python -m gke_ray_tpu.training.submit: error: {message} (see --help)\n"


def test_unreachable_cluster_is_retried_then_one_line_and_status_3(capsys, tmp_path, dev_outputs, delays):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    address = f"http://127.0.0.1:{closed}"
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "--address", address)
    lines = err.strip().splitlines()
    assert rc == 3 and "Traceback" not in err
    assert delays == [1, 2, 4, 8, 16]
    assert lines[-1] == (
        f"python -m gke_ray_tpu.training.submit: error: cannot reach the Ray Jobs API at {address}: "
        f"Failed to connect to Ray at address: {address}. (still failing after 5 retries over 31 s) "
        "(is the dashboard reachable at --address?)"
    )
    assert lines[-2] == (
        f"[submit] cannot reach the Ray Jobs API at {address}: Failed to connect to Ray at address: {address}.; "
        "retry 5/5 in 16 s"
    )


def test_no_kubeconfig_is_one_line_and_status_3(capsys, tmp_path, dev_outputs, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "--preset", "llama3-70b")
    assert rc == 3 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("python -m gke_ray_tpu.training.submit: error: no usable kubeconfig")


# --- the Jobs API: retries, one job per run attempt, outcomes --------------------------------

RESET = requests.ConnectionError("('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))")


@pytest.mark.parametrize(
    "error, is_transient",
    [
        (requests.ConnectionError("refused"), True),
        (requests.ConnectTimeout("timed out"), True),
        (requests.ReadTimeout("read timed out"), True),
        (ConnectionRefusedError(111, "Connection refused"), True),
        (ConnectionError("Failed to connect to Ray at address: http://127.0.0.1:8265."), True),
        (TimeoutError(), True),
        (aiohttp.ServerDisconnectedError(), True),
        (RuntimeError("Request failed with status code 503: upstream connect error."), True),
        (RuntimeError("Request failed with status code 502: Bad Gateway."), True),
        (RuntimeError("WebSocket connection closed unexpectedly with close code 1006"), True),
        (RuntimeError("Request failed with status code 400: Job with submission_id x already exists."), False),
        (RuntimeError("Request failed with status code 404: Job x does not exist."), False),
        (k8s_client.ApiException(status=503, reason="Service Unavailable"), True),
        (k8s_client.ApiException(status=429, reason="Too Many Requests"), True),
        (k8s_client.ApiException(status=403, reason="Forbidden"), False),
        (urllib3.exceptions.MaxRetryError(None, "/apis/ray.io/v1", "Connection refused"), True),
        (ValueError("bad address"), False),
        (KeyError("x"), False),
    ],
)
def test_what_counts_as_transient(error, is_transient):
    assert retry.transient(error) is is_transient


def test_backoff_doubles_up_to_the_cap():
    assert [retry.Backoff().delay(i) for i in range(7)] == [1, 2, 4, 8, 16, 16, 16]


def test_a_flaky_api_is_retried_and_one_job_is_submitted(capsys, tmp_path, dev_outputs, fake_cluster, delays):
    """Every call fails twice (connection reset), then answers."""
    cluster = fake_cluster(FakeJobsClient(fail=2, error=RESET, log=STEPS_LOG))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "run_name=flaky")
    assert rc == 0, err
    assert [job["submission_id"] for job in cluster.submitted] == ["maxtext-flaky"]
    assert "[submit] listing the cluster's jobs: ('Connection aborted.', ConnectionResetError(104, " \
           "'Connection reset by peer')); retry 1/5 in 1 s" in err
    assert "[submit] submitting maxtext-flaky: ('Connection aborted.'" in err
    assert "[submit] following the log of maxtext-flaky: ('Connection aborted.'" in err
    # list, submit, the job's record, tail and the status poll after it: each 2 retries (1 s, 2 s).
    assert {name: cluster.calls[name] for name in ("list_jobs", "submit_job", "get_job_info", "tail_job_logs")} == {
        "list_jobs": 3, "submit_job": 3, "get_job_info": 4, "tail_job_logs": 3}
    assert delays == [1, 2] * 5
    assert "[submit] maxtext-flaky SUCCEEDED after " in err and ": 3 steps, loss 6.061 -> 5.282;" in err


def test_a_submit_whose_response_was_lost_is_not_submitted_twice(capsys, tmp_path, dev_outputs, fake_cluster, delays):
    cluster = fake_cluster(FakeJobsClient(lose_submit_response=True, log=STEPS_LOG))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "run_name=lost")
    assert rc == 0, err
    assert len(cluster.submitted) == 1 and delays == [1]
    assert "[submit] submitting maxtext-lost: [Errno 104] Connection reset by peer; retry 1/5 in 1 s" in err
    assert "[submit] maxtext-lost was submitted meanwhile; following it" in err


def test_an_api_that_never_answers_is_exit_3_and_one_line(capsys, tmp_path, dev_outputs, fake_cluster, delays):
    cluster = fake_cluster(FakeJobsClient(fail=10**9, error=RuntimeError("Request failed with status code 503: .")))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "run_name=down")
    assert (rc, cluster.submitted, delays) == (3, [], [1, 2, 4, 8, 16])
    assert "Traceback" not in err
    assert err.splitlines()[-1] == (
        "python -m gke_ray_tpu.training.submit: error: listing the cluster's jobs: Request failed with status code 503: . "
        "(still failing after 5 retries over 31 s)"
    )


def test_an_answer_is_not_retried(capsys, tmp_path, dev_outputs, fake_cluster, delays):
    fake_cluster(FakeJobsClient(fail=1, error=RuntimeError("Request failed with status code 401: Unauthorized.")))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "run_name=denied")
    assert (rc, delays) == (3, [])
    assert err.splitlines()[-1] == (
        "python -m gke_ray_tpu.training.submit: error: listing the cluster's jobs: Request failed with status code 401: Unauthorized."
    )


def test_a_dropped_log_stream_is_reconnected_without_repeating_the_log(capsys, tmp_path, dev_outputs, fake_cluster,
                                                                         delays, run_dirs):
    cluster = fake_cluster(FakeJobsClient(log=STEPS_LOG, drop_stream=2))
    rc = submit.main(["--outputs-file", write(tmp_path, dev_outputs), "--verbose", "run_name=dropped"])
    out, err = capsys.readouterr()
    assert rc == 0 and cluster.streams == 2 and delays == [1]
    assert "[submit] following the log of maxtext-dropped: WebSocket connection closed unexpectedly" in err
    assert [err.count(f"[submit] step {n}/100 ") for n in (1, 2, 3)] == [1, 1, 1]
    assert out == STEPS_LOG + "\n"  # --verbose echoes the log, each line once
    assert (run_dirs / "dropped" / "job.log").read_text() == STEPS_LOG + "\n"  # and the file has it too


@pytest.mark.parametrize(
    "existing, action, sid, why",
    [
        ({}, "submit", "maxtext-r", ""),
        ({1: "RUNNING"}, "follow", "maxtext-r",
         "maxtext-r is RUNNING; following it instead of submitting a second job of this run"),
        ({1: "FAILED", 2: "PENDING"}, "follow", "maxtext-r-attempt-2", None),
        ({1: "SUCCEEDED"}, "report", "maxtext-r", "maxtext-r already SUCCEEDED; nothing to submit"),
        ({1: "FAILED"}, "submit", "maxtext-r-attempt-2",
         "maxtext-r FAILED; submitting attempt 2 as maxtext-r-attempt-2 "
         "(same run_name: MaxText resumes from the run's latest checkpoint)"),
        ({1: "STOPPED", 2: "FAILED"}, "submit", "maxtext-r-attempt-3", "maxtext-r-attempt-2 FAILED; submitting attempt 3"),
        ({1: "FAILED", 2: "SUCCEEDED"}, "report", "maxtext-r-attempt-2", None),
    ],
)
def test_what_running_the_same_run_again_does(existing, action, sid, why):
    run_jobs = [jobs.RunJob(submission_id_for("r", a), status, started=a, attempt=a) for a, status in existing.items()]
    nxt = jobs.decide("r", run_jobs)
    assert (nxt.action, nxt.submission_id) == (action, sid)
    assert why is None or nxt.why.startswith(why)


def test_a_declared_runs_jobs_are_jobs_of_the_run_ordered_by_start():
    declared = jobs.RunJob("maxtext-r-rayjob-0a1b2c3d", "FAILED", started=200)
    cli = jobs.RunJob("maxtext-r", "SUCCEEDED", started=100, attempt=1)
    assert jobs.is_job_of("r", declared.submission_id) and not jobs.is_job_of("r2", declared.submission_id)
    # The newest job failed: the next attempt of the submit command resumes the run.
    assert jobs.decide("r", [cli, declared]).submission_id == "maxtext-r-attempt-2"
    assert jobs.latest("r", [cli, declared]) == jobs.Next("report", declared.submission_id, 0,
                                                           "maxtext-r-rayjob-0a1b2c3d is FAILED")
    running = jobs.RunJob("maxtext-r-rayjob-99", "RUNNING", started=50)
    assert jobs.latest("r", [cli, declared, running]).action == "follow"
    with pytest.raises(ConfigError, match="--follow='r': expected a run with a job on this Ray cluster"):
        jobs.latest("r", [])


def test_attempt_ids_belong_to_one_run():
    assert [jobs.attempt_of("r", sid) for sid in ("maxtext-r", "maxtext-r-attempt-12", "maxtext-r2",
                                                    "maxtext-r-attempt-", "raysubmit_x", None)] == [
        1, 12, None, None, None, None]


def test_a_failed_run_is_resubmitted_as_the_next_attempt(capsys, tmp_path, dev_outputs, fake_cluster):
    cluster = fake_cluster(FakeJobsClient({"maxtext-r": "STOPPED", "maxtext-r-attempt-2": "FAILED",
                                           "maxtext-other": "RUNNING"}, log=STEPS_LOG))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "run_name=r")
    assert rc == 0, err
    [job] = cluster.submitted
    assert job["submission_id"] == "maxtext-r-attempt-3" and job["metadata"] == {"run_name": "r", "attempt": "3"}
    # The same run: MaxText finds its checkpoints under the same run_name.
    assert JobSpec.from_argv(shlex.split(job["entrypoint"])[3:]).run_name == "r"
    assert "[submit] maxtext-r-attempt-2 FAILED; submitting attempt 3 as maxtext-r-attempt-3" in err


def test_a_running_run_is_followed_and_a_succeeded_one_reported(capsys, tmp_path, dev_outputs, fake_cluster):
    outputs = write(tmp_path, dev_outputs)
    cluster = fake_cluster(FakeJobsClient({"maxtext-r": "RUNNING"}, log=STEPS_LOG))
    rc, err = run_cli(capsys, "--outputs-file", outputs, "run_name=r")
    assert (rc, cluster.submitted) == (0, [])
    assert "[submit] maxtext-r is RUNNING; following it instead of submitting a second job of this run" in err
    cluster = fake_cluster(FakeJobsClient({"maxtext-r": "FAILED", "maxtext-r-attempt-2": "SUCCEEDED"}, log=STEPS_LOG))
    rc, err = run_cli(capsys, "--outputs-file", outputs, "run_name=r")
    assert (rc, cluster.submitted, cluster.streams) == (0, [], 0)
    assert err.splitlines()[-1] == (
        "[submit] maxtext-r-attempt-2 SUCCEEDED: 3 steps, loss 6.061 -> 5.282; "
        "checkpoints: gs://my-tpu-project-maxtext-checkpoints/r/checkpoints"
    )


def test_a_failed_job_shows_its_last_error_lines_and_exits_1(capsys, tmp_path, dev_outputs, fake_cluster):
    fake_cluster(FakeJobsClient(final="FAILED", log=STEPS_LOG + FAILURE_LOG))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "run_name=bad")
    assert rc == 1 and "Traceback" not in err
    assert err.splitlines()[-4:] == [
        "[submit] maxtext-bad FAILED; its last error lines:",
        "[submit]     ValueError: 'no_such_key' not in 'emb_dim', 'mlp_dim'.",
        "[submit]     ray.train.WorkerGroupError: Training failed due to worker errors:",
        "[submit] run the same command again to resume run bad from its latest checkpoint as a new attempt",
    ]


def test_a_job_that_failed_before_logging_shows_rays_message(capsys, tmp_path, dev_outputs, fake_cluster):
    fake_cluster(FakeJobsClient(final="FAILED", message="runtime_env setup failed:\nFailed to install uv packages.\n"))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "run_name=env")
    assert rc == 1
    assert err.splitlines()[-3:-1] == ["[submit]     runtime_env setup failed:", "[submit]     Failed to install uv packages."]


def test_a_job_stopped_from_outside_exits_1_saying_stopped(capsys, tmp_path, dev_outputs, fake_cluster):
    fake_cluster(FakeJobsClient(final="STOPPED", log=STEPS_LOG))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "run_name=s")
    assert rc == 1
    assert err.splitlines()[-2:] == [
        "[submit] maxtext-s was STOPPED (Ctrl-C, `ray job stop` or the dashboard)",
        "[submit] run the same command again to resume run s from its latest checkpoint as a new attempt",
    ]


class InterruptedCluster(FakeJobsClient):
    """A running job whose log stream gets a real SIGINT (Ctrl-C) after its first chunk."""

    async def tail_job_logs(self, sid):
        import asyncio

        self.streams += 1
        yield "step: 0, loss: 6.061\n"
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(60)


@pytest.fixture
def python_ctrl_c():
    """Python's own Ctrl-C handler, even where the tests were started with SIGINT ignored
    (a background job of a non-interactive shell starts so, and Python then installs none)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_while_streaming_stops_the_job_and_exits_130_cleanly(capsys, tmp_path, dev_outputs, fake_cluster,
                                                                   python_ctrl_c):
    cluster = fake_cluster(InterruptedCluster(final="RUNNING"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "run_name=c")
        gc.collect()
    assert (rc, cluster.stopped) == (130, ["maxtext-c"]), err
    assert "[submit] interrupted: stopping maxtext-c" in err and "Traceback" not in err
    assert [str(w.message) for w in caught if issubclass(w.category, (RuntimeWarning, ResourceWarning))] == []


@pytest.mark.parametrize("moment", ["as the handler that cancels the stream is installed", "as the stream's task is made"])
def test_ctrl_c_landing_as_the_log_stream_starts_stops_the_job_and_exits_130(capsys, caplog, tmp_path, dev_outputs,
                                                                          fake_cluster, python_ctrl_c, monkeypatch,
                                                                          moment):
    """A Ctrl-C as the log stream starts, at either moment: the job stopped, exit 130, no traceback, and nothing
    asyncio reports. asyncio.Runner.run (CPython 3.12) gets both wrong: it installs its handler and then zeroes its
    interrupt count, so a Ctrl-C in between came out as CancelledError (seen in CI as a traceback and exit 1); and it
    makes the task before it installs the handler, so a Ctrl-C in between left the task pending, and closing the
    loop reported it with a traceback (seen under load in tests/test_training_local_job.py)."""
    import asyncio

    fired = []

    def ctrl_c_once():
        if not fired:
            fired.append(moment)
            os.kill(os.getpid(), signal.SIGINT)  # Python runs the handler before the next line of this function

    if moment == "as the stream's task is made":
        make_task = asyncio.base_events.BaseEventLoop.create_task

        def make_then_ctrl_c(self, coro, **kwargs):
            task = make_task(self, coro, **kwargs)
            ctrl_c_once()
            return task

        monkeypatch.setattr(asyncio.base_events.BaseEventLoop, "create_task", make_then_ctrl_c)
    else:
        install = signal.signal

        def install_then_ctrl_c(signum, handler):
            previous = install(signum, handler)
            if signum == signal.SIGINT and handler not in (signal.default_int_handler, signal.SIG_DFL, signal.SIG_IGN):
                ctrl_c_once()
            return previous

        monkeypatch.setattr(signal, "signal", install_then_ctrl_c)
    cluster = fake_cluster(FakeJobsClient(log=STEPS_LOG, final="RUNNING"))
    with caplog.at_level("ERROR", logger="asyncio"):
        rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "run_name=early")
        gc.collect()
    assert fired == [moment]
    assert (rc, cluster.stopped) == (130, ["maxtext-early"]), err
    assert "[submit] interrupted: stopping maxtext-early" in err and "Traceback" not in err
    assert [record.getMessage() for record in caplog.records if record.name == "asyncio"] == []


def test_the_log_streams_event_loop_is_built_before_the_job_is_submitted(capsys, tmp_path, dev_outputs, fake_cluster,
                                                                         delays, monkeypatch):
    """Ctrl-C may land any time after the submission; a loop half-built at that moment prints a traceback
    from its finaliser (seen in CI), so no loop may be built after the job exists."""
    import asyncio

    events: list[str] = []
    build_loop = asyncio.events.new_event_loop

    def recording_new_event_loop():
        events.append("loop")
        return build_loop()

    class RecordingCluster(FakeJobsClient):
        def submit_job(self, **kwargs):
            events.append("submit")
            return super().submit_job(**kwargs)

    monkeypatch.setattr(asyncio.events, "new_event_loop", recording_new_event_loop)
    fake_cluster(RecordingCluster(log=STEPS_LOG, drop_stream=2))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "run_name=order")
    assert rc == 0, err
    assert events == ["loop", "submit"]


# --- progress ------------------------------------------------------------------------------

def worker(pid: int, text: str) -> str:
    """A worker's absl log line, as Ray streams it."""
    return traceback_line(pid, f"I1202 16:36:32.260998 139637597132480 {text}")


def traceback_line(pid: int, text: str) -> str:
    """A line a worker printed to stderr (a traceback), as Ray streams it."""
    return f"\x1b[36m(RayTrainWorker pid={pid})\x1b[0m {text}"


def group_start(*pids: int) -> str:
    lines = [f"\x1b[36m(TrainController pid=9)\x1b[0m Started training worker group of size {len(pids)}: "]
    lines += [f"\x1b[36m(TrainController pid=9)\x1b[0m - (ip=192.0.2.2, pid={pid}) world_rank={rank}, "
              f"local_rank={rank}, node_rank=0" for rank, pid in enumerate(pids)]
    return "\n".join(lines)


def step(pid: int, n: int, loss: float) -> str:
    return worker(pid, f"metric_logger.py:265] completed step: {n}, seconds: 0.200, TFLOP/s/device: 0.000, "
                       f"Tokens/s/device: 320.200, total_weights: 128, loss: {loss}, lm_loss: {loss}, perplexity: 2.0")


STEPS_LOG = "\n".join([group_start(100, 101), *(step(pid, n, loss) for n, loss in enumerate((6.061, 5.660, 5.282))
                                                  for pid in (100, 101))])
FAILURE_LOG = "\n".join([
    "",
    traceback_line(100, "Traceback (most recent call last):"),
    traceback_line(100, "ValueError: 'no_such_key' not in 'emb_dim', 'mlp_dim'."),
    traceback_line(101, "ValueError: 'no_such_key' not in 'emb_dim', 'mlp_dim'."),
    "\x1b[36m(TrainController pid=9)\x1b[0m [FailurePolicy] RAISE",
    "\x1b[36m(TrainController pid=9)\x1b[0m Error: Training failed due to worker errors:",
    "\x1b[36m(TrainController pid=9)\x1b[0m ray.train.WorkerGroupError: Training failed due to worker errors:",
    "ray.train.WorkerGroupError: Training failed due to worker errors:",
])

TUTORIAL_LINE = (
    "(RayTrainWorker pid=130520, ip=10.60.7.7) completed step: 99, seconds: 0.693, TFLOP/s/device: 83.171, "
    "Tokens/s/device: 11819.175, total_weights: 262144, loss: 0.334 [repeated 6x across cluster]"
)
MAXTEXT_025_LINE = (
    "\x1b[36m(RayTrainWorker pid=15485)\x1b[0m I1202 16:03:30.294371 139914449503936 metric_logger.py:265] "
    "completed step: 0, seconds: 0.580, TFLOP/s/device: 0.000, Tokens/s/device: 110.405, total_weights: 128, "
    "loss: 6.061, lm_loss: 6.061, perplexity: 428.997"
)


COLD_START_LOG = (
    "(TrainController pid=7) Attempting to start training worker group of size 8 with the following resources: "
    "[{'TPU': 4}] * 8\n"
    "(TrainController pid=7) Using SlicePlacementGroup utility to reserve 2 slice(s) with topology '4x4'...\n"
    "(TrainController pid=7) The worker group startup timed out after 900.0 seconds waiting for 8 workers. "
    "Potential causes include: ...\n"
) + STEPS_LOG


def test_a_stack_that_holds_its_slices_submits_with_the_recovery_tuning(capsys, tmp_path, dev_outputs, fake_cluster):
    cluster = fake_cluster(FakeJobsClient(log=STEPS_LOG))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "run_name=r")
    assert rc == 0 and "TPU slices" not in err
    [job] = cluster.submitted
    assert job["runtime_env"]["env_vars"]["RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"] == "20"


def test_parse_the_tutorial_and_maxtext_025_lines():
    m = parse_line(TUTORIAL_LINE)
    assert (m.step, m.seconds, m.tflops_per_device, m.tokens_per_device, m.loss) == (99, 0.693, 83.171, 11819.175, 0.334)
    assert m.describe(100) == "step 100/100  loss 0.334  83.171 TFLOP/s/device  11819.2 tokens/s/device  0.693 s/step"
    m = parse_line(MAXTEXT_025_LINE)
    assert (m.step, m.loss, m.tokens_per_device) == (0, 6.061, 110.405)
    elastic = parse_line("completed step: 7, seconds: 1.000, live slice count: 1, TFLOP/s/device: 2.000, loss: 5.5")
    assert (elastic.step, elastic.tflops_per_device, elastic.loss) == (7, 2.0, 5.5)
    assert parse_line("completed profiler activation/deactivation step: 5") is None
    assert parse_line("Job 'raysubmit_X' succeeded") is None


def test_progress_across_chunks_and_workers():
    p = Progress()
    text = f"noise\n{MAXTEXT_025_LINE}\n{MAXTEXT_025_LINE}\n{TUTORIAL_LINE}"
    new = p.feed(text[:50]) + p.feed(text[50:130]) + p.feed(text[130:])
    assert [m.step for m in new] == [0]  # the second worker's copy is not news; the last line has no newline yet
    assert [m.step for m in p.flush()] == [99]
    assert (p.first.loss, p.last.loss, sorted(p.steps)) == (6.061, 0.334, [0, 99])


def test_progress_through_a_restart():
    """Ray Train restarts the group after a worker died; MaxText restores step 4 and re-runs 5 and 6."""
    log = "\n".join([
        group_start(100, 101),
        *(step(pid, n, 6.0 - n / 10) for n in range(7) for pid in (100, 101)),
        traceback_line(100, "jax.errors.JaxRuntimeError: INTERNAL: Gloo all-reduce failed: Connection reset by peer"),
        group_start(200, 201),
        step(101, 6, 6.0 - 6 / 10),  # a late copy from the old group is the old group's, not news
        worker(200, "checkpointing.py:705] restoring from this run's directory step 4"),
        worker(201, "checkpointing.py:705] restoring from this run's directory step 4"),
        *(step(pid, n, 6.0 - n / 10) for n in range(5, 8) for pid in (200, 201)),
    ]) + "\n"
    p = Progress()
    news = [item.describe(8) for item in p.feed(log)]
    assert news[7:] == [
        "worker group 2: Ray Train restarted training with 2 workers",
        "worker group 2: MaxText restored checkpoint 4 (saved after step 5/8); continuing with step 6/8",
        *(p.groups[1].steps[n].describe(8) for n in (5, 6, 7)),
    ]
    first, second = p.groups
    assert (first.ranks, sorted(first.steps), first.restored_step) == ({100: 0, 101: 1}, [0, 1, 2, 3, 4, 5, 6], None)
    assert (second.ranks, sorted(second.steps), second.restored_step) == ({200: 0, 201: 1}, [5, 6, 7], 4)
    assert isinstance(first, WorkerGroup) and p.last.loss == 6.0 - 7 / 10
    assert list(p.errors) == ["jax.errors.JaxRuntimeError: INTERNAL: Gloo all-reduce failed: Connection reset by peer"]
    assert outcome.summary(p) == "8 steps, loss 6.000 -> 5.300, 1 restart (restored checkpoint 4)"


def test_a_group_start_logged_twice_is_one_group():
    """Two Ray nodes on one host stream every line twice (both log monitors read the session's logs)."""
    p = Progress()
    line_by_line = "\n".join(line for line in group_start(100, 101).split("\n") for _ in range(2))
    news = p.feed("\n".join([line_by_line, step(100, 0, 6.0), group_start(100, 101), step(101, 0, 6.0),
                              group_start(200), group_start(200), ""]))
    assert [g.ranks for g in p.groups] == [{100: 0, 101: 1}, {200: 0}]
    assert [n.describe() for n in news if not isinstance(n, StepMetrics)] == [
        "worker group 2: Ray Train restarted training with 1 workers"]


def test_error_lines_are_exception_lines_without_rays_prefix():
    p = Progress()
    p.feed("\n".join([
        traceback_line(1, "Error count: 1 (max allowed: 3)"),
        traceback_line(1, "  File \"train.py\", line 3, in main"),
        worker(1, "checkpointing.py:1] RuntimeError: an absl line is not a traceback's end"),
        traceback_line(1, "RuntimeError: " + "x" * 400),
        "KeyboardInterrupt",
        "jax.errors.JaxRuntimeError: UNKNOWN: Gloo all-reduce failed",
    ]) + "\n")
    assert list(p.errors) == [
        "RuntimeError: " + "x" * 283 + "...", "KeyboardInterrupt", "jax.errors.JaxRuntimeError: UNKNOWN: Gloo all-reduce failed",
    ]


# --- port-forward --------------------------------------------------------------------------


def test_service_resolves_to_a_ready_pod_and_its_port():
    api = FakeCoreV1([pod("head-b"), pod("head-a", ready="False"), pod("head-c", phase="Pending")])
    assert port_forward.resolve_pod(api, "default", "head-svc", 8265) == ("head-b", 8265)
    api = FakeCoreV1([pod("head-b")], target_port="dashboard")
    assert port_forward.resolve_pod(api, "default", "head-svc", 8265) == ("head-b", 8265)


def test_service_errors_say_what_is_missing():
    with pytest.raises(ClusterError, match="cannot read service default/other-svc .404 Not Found."):
        port_forward.resolve_pod(FakeCoreV1([]), "default", "other-svc", 8265)
    with pytest.raises(ClusterError, match=r"no port 8266 \(ports: 6379, 8265\)"):
        port_forward.resolve_pod(FakeCoreV1([pod("h")]), "default", "head-svc", 8266)
    with pytest.raises(ClusterError, match="no running, ready pod .* pods: h=Pending"):
        port_forward.resolve_pod(FakeCoreV1([pod("h", phase="Pending")]), "default", "head-svc", 8265)


def test_relay_copies_both_ways_until_one_side_closes():
    client, local = socket.socketpair()
    remote, server = socket.socketpair()
    t = threading.Thread(target=port_forward.relay, args=(local, remote))
    t.start()
    client.sendall(b"GET /api/version")
    assert server.recv(100) == b"GET /api/version"
    server.sendall(b"HTTP/1.1 200 OK")
    assert client.recv(100) == b"HTTP/1.1 200 OK"
    client.close()
    t.join(timeout=5)
    assert not t.is_alive() and server.recv(100) == b""
    server.close()


# --- the job's record and the dashboard ----------------------------------------------------


def test_the_jobs_record_has_rays_times_and_the_price_of_the_chips_it_held(capsys, tmp_path, dev_outputs, fake_cluster,
                                                                           run_dirs):
    from gke_ray_tpu.training.driver.run_files import JobRecord

    cluster = fake_cluster(FakeJobsClient(log=STEPS_LOG))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "run_name=priced")
    assert rc == 0, err
    record = JobRecord.load(run_dirs / "priced")
    submitted = FakeJobsClient.SUBMITTED_MS / 1000
    assert (record.submission_id, record.status) == ("maxtext-priced", "SUCCEEDED")
    assert (record.submitted_at, record.ended_at) == (submitted, submitted + 60)
    assert record.metrics_dir == "gs://my-tpu-project-maxtext-checkpoints/priced/tensorboard"
    # The dev stack holds 2 v6e 4x4 slices in us-east5 on demand: 32 chips at the price table's rate.
    assert (record.chips, record.usd_per_chip_hour) == (32, 43.2 / 16)
    assert "on-demand list price, v6e in us-east5" in record.price_note
    assert cluster.calls["get_job_info"] == 2  # when the log starts, and once the job ended


def test_dashboard_forwards_to_the_head_until_ctrl_c(capsys, tmp_path, dev_outputs, monkeypatch):
    """The URL on stdout reaches the head pod's dashboard port through the forward; Ctrl-C closes it (exit 0)."""
    import http.server

    class Dashboard(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ray dashboard")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Dashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    class Stream:
        def __init__(self, *args, ports):
            assert args[1:] == ("head-b", "default") and ports == "8265"
            self.sock = socket.create_connection(server.server_address)

        def socket(self, port):
            return self.sock

    monkeypatch.setattr("kubernetes.stream.portforward", Stream)
    monkeypatch.setattr(port_forward, "_core_api", lambda context, log=None: FakeCoreV1([pod("head-b")]))
    seen = {}

    def hold():
        out, seen["err"] = capsys.readouterr()
        seen["url"], seen["page"] = out.strip(), requests.get(out.strip(), timeout=10).text
        raise KeyboardInterrupt

    monkeypatch.setattr(submit, "hold", hold)
    outputs = write(tmp_path, {**dev_outputs, "rayHeadService": "head-svc"})
    try:
        rc = submit.main(["--outputs-file", outputs, "--dashboard"])
    finally:
        server.shutdown()
    err = seen["err"] + capsys.readouterr().err
    assert rc == 0 and seen["page"] == "ray dashboard" and seen["url"].startswith("http://127.0.0.1:")
    assert "[submit] Ray dashboard of default/head-svc (pod head-b, port 8265) at the URL below" in err
    assert err.splitlines()[-1] == "[submit] port-forward closed"
    with pytest.raises(requests.ConnectionError):  # the forward is closed
        requests.get(seen["url"], timeout=2)


@pytest.mark.parametrize("argv", [["--local", "--dashboard"], ["--dashboard", "--address", "http://127.0.0.1:8265"],
                                  ["--dashboard", "steps=2"]])
def test_dashboard_is_only_the_forward(capsys, argv):
    with pytest.raises(SystemExit) as e:
        request.SubmitRequest.from_argv([*argv, *([] if "--local" in argv else ["--outputs-file", "o.json"])])
    assert e.value.code == 2
    assert "--dashboard opens the stack's Ray dashboard only" in capsys.readouterr().err


def test_dashboard_of_a_run_is_for_stacks_with_a_cluster_per_run(capsys, tmp_path, dev_outputs):
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "--dashboard", "--follow", "r")
    assert (rc, err.count("\n")) == (2, 1) and "--follow='r': expected no --follow with --dashboard" in err


def test_dashboard_without_a_head_is_one_line_and_exit_3(capsys, tmp_path, dev_outputs, monkeypatch):
    monkeypatch.setattr(port_forward, "_core_api", lambda context, log=None: FakeCoreV1([pod("head-b", phase="Pending")]))
    outputs = write(tmp_path, {**dev_outputs, "rayHeadService": "head-svc"})
    assert submit.main(["--outputs-file", outputs, "--dashboard"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no running, ready pod behind service default/head-svc" in err
