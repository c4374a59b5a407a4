"""Shared fixtures: the real stack config files, and offline (mock-engine) runs of __main__.py."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def pytest_sessionfinish(session, exitstatus):
    """A skipped test is a failed run: on a fresh clone with ``bin/setup`` every test has what it needs,
    so a skip could only hide a check that did not run (a missing package, a file outside the checkout)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped and exitstatus == pytest.ExitCode.OK:
        reporter.write_line(f"{len(skipped)} skipped: no test may skip (tests/conftest.py)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
