"""A declared run's code archive is checked against the SHA-256 its RayJob names before anything imports it.

The archive is a real zip of the files MaxTextRun uploads; the check runs as the RayJob's entry point runs it
on the head, a shell command with the archive on PYTHONPATH.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gke_ray_tpu.core.ray_job import HeldCluster, RayJobRun, archived_command, ray_job
from gke_ray_tpu.core.code_archive import archive_path, digest, package_files, sha256, verifier_command
from gke_ray_tpu.core.job_spec import build_job
from gke_ray_tpu.core.presets import get_preset
from tests.test_stack_dev import RAYJOB


def build_archive(path: Path, files: dict[str, Path], extra: dict[str, bytes] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zipped:
        for name, source in files.items():
            zipped.write(source, name)
        for name, data in (extra or {}).items():
            zipped.writestr(name, data)
    return path


def run_on_head(command: str, archive: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``command`` as Ray's job supervisor runs an entry point: a shell, the runtime env's PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": str(archive), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", command], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def files():
    return package_files()


def test_the_genuine_archive_passes_and_the_next_command_runs(files, tmp_path):
    archive = build_archive(tmp_path / "genuine.zip", files)
    marker = tmp_path / "ran"
    result = run_on_head(f"{verifier_command(str(archive), sha256(files))} && touch {marker}", archive, tmp_path)
    assert result.returncode == 0, result.stderr
    assert marker.exists()
    assert digest(files) == sha256(files)[:12]


@pytest.mark.filterwarnings("ignore:Duplicate name")  # the duplicate is the tamper
@pytest.mark.parametrize("tamper", ["changed", "added", "duplicate", "removed"])
def test_a_tampered_archive_is_refused_before_anything_of_it_runs(files, tmp_path, tamper):
    marker, planted = tmp_path / "ran", tmp_path / "planted"
    payload = f"open({str(planted)!r}, 'w').write('pwned')\n".encode()
    kept = dict(files)
    extra: dict[str, bytes] = {}
    if tamper == "changed":
        extra["gke_ray_tpu/training/worker/trainer.py"] = payload
        del kept["gke_ray_tpu/training/worker/trainer.py"]
    elif tamper == "added":
        extra["sitecustomize.py"] = payload  # Python would run it at start-up from PYTHONPATH
    elif tamper == "duplicate":
        extra["gke_ray_tpu/core/__init__.py"] = payload  # a second entry of a name: zipimport takes the last one
    else:
        del kept["gke_ray_tpu/core/errors.py"]
    archive = build_archive(tmp_path / "tampered.zip", kept, extra)
    result = run_on_head(f"{verifier_command(str(archive), sha256(files))} && touch {marker}", archive, tmp_path)
    assert result.returncode != 0
    assert f"code archive {archive}: its contents hash to " in result.stderr
    assert f"not to the run's {sha256(files)}: refusing to import it" in result.stderr
    assert not marker.exists() and not planted.exists()


def test_a_missing_archive_is_refused(files, tmp_path):
    archive = tmp_path / "absent.zip"
    result = run_on_head(f"{verifier_command(str(archive), sha256(files))} && touch ran", archive, tmp_path)
    assert result.returncode != 0 and "cannot read it" in result.stderr
    assert not (tmp_path / "ran").exists()


def test_a_declared_runs_entry_point_checks_the_archive_it_puts_on_pythonpath(files, tmp_path):
    spec = build_job(get_preset("tiny-cpu"), base_output_directory=str(tmp_path), run_name="r", slices=2)
    manifest = ray_job(RayJobRun("r", "default", archived_command(spec, sha256(files), cold_start=False, mount="/data"),
                                  HeldCluster("c")))
    archive = archive_path(digest(files), "/data")
    command = manifest["spec"]["entrypoint"]
    check, _, rest = command.partition(" && ")
    assert check == verifier_command(archive, sha256(files))
    assert rest.startswith("python -m gke_ray_tpu.training.worker.trainer ")
    assert f"PYTHONPATH: {archive}" in manifest["spec"]["runtimeEnvYAML"]


def test_the_stacks_declared_run_names_the_hash_of_the_files_it_uploads(dev_run, files):
    (job,) = dev_run.of_type(RAYJOB)
    entrypoint = job.inputs["spec"]["entrypoint"]
    assert entrypoint.startswith("python -I -c ")
    assert f" /data/_code/gke-ray-tpu-{digest(files)}.zip {sha256(files)} && python -m " in entrypoint
