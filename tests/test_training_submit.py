"""The submit command's edges: stack outputs, CLI errors, progress parsing, the port-forward."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from components.errors import ConfigError
from training import port_forward, stack_outputs, submit
from training.errors import ClusterError
from training.progress import Progress, parse_line
from training.testing import FakeCoreV1, pod


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


MISSING = object()

# --- stack outputs -------------------------------------------------------------------------


def test_dev_stack_outputs_load(tmp_path, dev_outputs):
    out = stack_outputs.load_file(write(tmp_path, dev_outputs))
    assert (out.namespace, out.ray_head_service, out.ray_dashboard_port) == (
        "default", "maxtext-tpu-cluster-head-svc", 8265,
    )
    assert (out.checkpoint_dir, out.num_slices, out.elastic_min_slices) == ("/data", 2, 1)
    assert out.shape().pod_type == "v6e-16"


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
        ({"topology": "4x5"}, "stack output topology", "a v6e topology"),
        ({"elasticMinSlices": 3}, "elasticMinSlices", "between 1 and numSlices (2)"),
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
        ("--outputs-file", f, "--preset", "llama3-405b"): "--preset='llama3-405b': expected one of llama3-8b",
        ("--outputs-file", f, "ici_fsdp_parallelism=4", "ici_tensor_parallelism=2"):
            "ici_fsdp_parallelism*ici_tensor_parallelism='4*2=8': expected a product of 16",
        ("--outputs-file", f, "--min-slices", "3"): "--min-slices=3: expected between 1 and --slices (2)",
        ("--outputs-file", f, "--preset", "tiny-cpu"): "a TPU preset for a cluster run",
        ("--outputs-file", f, "steps"): "override='steps': expected MaxText key=value",
        ("--outputs-file", str(tmp_path / "none.json")): "expected a readable file",
        ("--local", "--preset", "llama3-8b"): "a CPU preset for --local",
    }
    for argv, message in cases.items():
        rc, err = run_cli(capsys, *argv)
        assert (rc, err.count("\n")) == (2, 1), (argv, err)
        assert err.startswith("python -m training.submit: error: invalid config ") and message in err, err


def test_cli_needs_a_source(capsys):
    with pytest.raises(SystemExit) as e:
        submit.main(["--preset", "llama3-8b"])
    assert e.value.code == 2
    assert "one of --outputs-file, --stack or --local is required" in capsys.readouterr().err


def test_unreachable_cluster_is_one_line_and_status_3(capsys, tmp_path, dev_outputs):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "--address", f"http://127.0.0.1:{closed}")
    lines = err.strip().splitlines()
    assert rc == 3 and "Traceback" not in err
    assert lines[-1] == (
        f"python -m training.submit: error: cannot reach the Ray Jobs API at http://127.0.0.1:{closed}: "
        f"Failed to connect to Ray at address: http://127.0.0.1:{closed}. (is the dashboard reachable at --address?)"
    )


def test_no_kubeconfig_is_one_line_and_status_3(capsys, tmp_path, dev_outputs, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    rc, err = run_cli(capsys, "--outputs-file", write(tmp_path, dev_outputs), "--preset", "llama3-70b")
    assert rc == 3 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("python -m training.submit: error: no usable kubeconfig")


# --- progress ------------------------------------------------------------------------------

TUTORIAL_LINE = (
    "(RayTrainWorker pid=130520, ip=10.60.7.7) completed step: 99, seconds: 0.693, TFLOP/s/device: 83.171, "
    "Tokens/s/device: 11819.175, total_weights: 262144, loss: 0.334 [repeated 6x across cluster]"
)
MAXTEXT_025_LINE = (
    "\x1b[36m(RayTrainWorker pid=15485)\x1b[0m I1202 16:03:30.294371 139914449503936 metric_logger.py:265] "
    "completed step: 0, seconds: 0.580, TFLOP/s/device: 0.000, Tokens/s/device: 110.405, total_weights: 128, "
    "loss: 6.061, lm_loss: 6.061, perplexity: 428.997"
)


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
