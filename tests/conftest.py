"""Shared fixtures: the real stack config files, and offline (mock-engine) runs of __main__.py."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from hypothesis import settings

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "components", "preflight", "stack", "training")
"""The project's packages: each installs as ``gke_ray_tpu.<name>`` from the folder ``<name>/`` at the root."""


def source_files() -> list[Path]:
    """Every Python file of the installed packages, in their folders at the repository's root."""
    return sorted(path for package in PACKAGES for path in (REPO_ROOT / package).rglob("*.py"))


settings.register_profile("suite", deadline=None)
settings.load_profile("suite")
"""No time limit on a hypothesis example (its default is 200 ms): a test's verdict must not depend on how loaded the
machine is."""

_PROCESSES = pytest.StashKey()


def pytest_configure(config):
    """Mark this session's processes (``tests/processes.py``): whatever a test starts ends with the session, also
    on Ctrl-C, SIGTERM or a kill of pytest; what an earlier, interrupted run left is ended first."""
    from tests.processes import Session

    config.stash[_PROCESSES] = session = Session(controller=not hasattr(config, "workerinput"))
    session.install_signal_handlers()


def pytest_unconfigure(config):
    session = config.stash.get(_PROCESSES, None)
    if session is not None and (killed := session.finish()):
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter:
            reporter.write_line(f"ended {len(killed)} processes the tests had left running: {killed}", yellow=True)


DURATIONS = REPO_ROOT / "tests" / "durations.json"
"""The last measured run of the suite (``bench/bench_suite_time.py --write-durations``): ``files``, seconds per test
file; ``measured``, pytest's and bin/setup's wall time on a fresh clone (the workflow's timeout follows them,
tests/test_workflow.py)."""


def pytest_collection_modifyitems(config, items):
    """Longest files first (``DURATIONS``; a file not measured yet after them, in collection order). pytest.ini runs
    the tests on xdist workers a file at a time (``--dist loadfile``: a module's fixtures, a fake-TPU cluster say,
    are set up once), each file to the next free worker in this order, so the longest do not start last."""
    import json

    seconds = json.loads(DURATIONS.read_text())["files"] if DURATIONS.is_file() else {}
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::", 1)[0], 0.0))


def pytest_sessionfinish(session, exitstatus):
    """A skipped test is a failed run: on a fresh clone with ``bin/setup`` every test has what it needs,
    so a skip could only hide a check that did not run (a missing package, a file outside the checkout)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped and exitstatus == pytest.ExitCode.OK:
        reporter.write_line(f"{len(skipped)} skipped: no test may skip (tests/conftest.py)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def python_without_the_project(where: Path) -> Path:
    """A venv (its bin folder) whose Python sees this one's packages but not the project's editable install: its
    site-packages names ours as a plain path, so our .pth files (the editable finder's among them) are not run."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    [site_packages] = where.glob("lib/python*/site-packages")
    (site_packages / "packages_without_the_project.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return where / "bin"


STACK_CONTEXT = "gke_my-tpu-project_us-east5-b_ray-tpu-multislice"
"""The kubeconfig context of the dev stack's cluster, as `gcloud container clusters get-credentials` names it."""


def write_kubeconfig(path: Path, current: str = STACK_CONTEXT, server: str = "https://203.0.113.10") -> Path:
    """A kubeconfig with one context, current, for a cluster at ``server`` (a token user: nothing to exec)."""
    import yaml

    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": current, "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": current, "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": current, "context": {"cluster": current, "user": current}}],
    }))
    return path


@pytest.fixture(autouse=True)
def kubeconfig(tmp_path_factory, monkeypatch) -> Path:
    """Every test sees a kubeconfig whose current context is the dev stack's cluster, never this machine's own
    (the submit command checks the context before any Kubernetes call; tests fake the calls themselves)."""
    path = write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
    monkeypatch.setenv("KUBECONFIG", str(path))
    return path


@pytest.fixture(scope="session")
def dev_config() -> dict[str, str]:
    from gke_ray_tpu.stack.mock_engine import load_stack_file

    return load_stack_file(REPO_ROOT / "Pulumi.dev.yaml")


@pytest.fixture(scope="session")
def dev_run(dev_config):
    from gke_ray_tpu.stack.mock_engine import run_offline

    return run_offline(dev_config)


def with_keys(config: dict[str, str], **changes: str | None) -> dict[str, str]:
    """``config`` with some keys changed (short keys are gke-ray-tpu's; None removes a key)."""
    changed = dict(config)
    for key, value in changes.items():
        full_key = key if ":" in key else f"gke-ray-tpu:{key}"
        if value is None:
            changed.pop(full_key, None)
        else:
            changed[full_key] = value
    return changed


@pytest.fixture(scope="session")
def run_stack(dev_config):
    """Run the program on the dev config with some keys changed (None removes a key)."""
    from gke_ray_tpu.stack.mock_engine import run_offline

    return lambda **changes: run_offline(with_keys(dev_config, **changes))
