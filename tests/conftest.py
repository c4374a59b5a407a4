"""Shared fixtures: the real stack config files, and offline (mock-engine) runs of __main__.py."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = REPO_ROOT.parent / "shared"


@pytest.fixture(scope="session")
def dev_config() -> dict[str, str]:
    from stack.mock_engine import load_stack_file

    return load_stack_file(REPO_ROOT / "Pulumi.dev.yaml")


@pytest.fixture(scope="session")
def dev_run(dev_config):
    from stack.mock_engine import run_offline

    return run_offline(dev_config)


@pytest.fixture(scope="session")
def run_stack(dev_config):
    """Run the program on the dev config with some keys changed (None removes a key)."""
    from stack.mock_engine import run_offline

    def run(**overrides: str | None):
        config = dict(dev_config)
        for key, value in overrides.items():
            full_key = key if ":" in key else f"gke-ray-tpu:{key}"
            if value is None:
                config.pop(full_key, None)
            else:
                config[full_key] = value
        return run_offline(config)

    return run
