"""A restore never takes an incomplete checkpoint on the path cluster runs write to (``gs://<bucket>/``).

Orbax 0.12.8 decides by the path: on ``gs://`` a step counts only once its ``commit_success.txt``
exists; on a local path (which is what the pods' GCS FUSE mount of the bucket is) any directory
without the temporary suffix counts, so a half-copied rename would be restored. Both are shown here
with MaxText's own checkpoint manager, the ``gs://`` one against a Cloud Storage emulator on
127.0.0.1 (``tests/gcs_emulator.py``). The second kill of ``tests/test_training_elastic.py`` loses
the writer of a real save.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gke_ray_tpu.components.gcs_workload_identity import DEFAULT_HIERARCHICAL_NAMESPACE
from tests.conftest import REPO_ROOT
from tests.gcs_emulator import GcsEmulator


def test_orbax_commits_with_a_marker_on_gs_and_by_renaming_on_a_local_path():
    """The rule the cluster runs rely on, pinned to the installed Orbax (the TPU workers' lock's:
    tests/test_worker_env.py)."""
    from etils import epath
    from orbax.checkpoint._src.path import atomicity, atomicity_defaults

    choose = atomicity_defaults.get_default_temporary_path_class
    assert choose(epath.Path("gs://bucket/run/checkpoints")) is atomicity.CommitFileTemporaryPath
    assert choose(epath.Path("/data/run/checkpoints")) is atomicity.AtomicRenameTemporaryPath


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    out = tmp_path_factory.mktemp("commit")
    with GcsEmulator("commit-probe", out / "fake-gcs-server.log") as gcs:
        env = dict(os.environ, **gcs.env, JAX_PLATFORMS="cpu")

        def run(*argv: str) -> dict:
            done = subprocess.run([sys.executable, "-m", "tests.orbax_probe", *argv], env=env, cwd=REPO_ROOT,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-3000:]
            return json.loads(done.stdout.strip().splitlines()[-1])
        yield run, out


def test_a_step_without_its_commit_marker_is_skipped_on_gs(probe):
    run, _ = probe
    result = run("torn", "gs://commit-probe/run/checkpoints")
    # Orbax asked the bucket and took the flat-namespace path: the one a stack's default bucket gets.
    assert result["hierarchical_namespace"] is DEFAULT_HIERARCHICAL_NAMESPACE is False
    assert "commit_success.txt" in result["complete_files"] and "commit_success.txt" not in result["torn_files"]
    assert "_CHECKPOINT_METADATA" in result["torn_files"]  # step 8 is there, half written
    assert (result["latest"], result["steps"]) == (4, [0, 4])  # and a restore takes step 4


def test_on_a_local_path_the_same_torn_step_would_be_restored(probe):
    """Why cluster runs no longer write through the /data mount: a torn directory counts as complete."""
    run, out = probe
    result = run("torn", str(out / "local" / "checkpoints"))
    assert (result["latest"], result["steps"]) == (8, [0, 4, 8])


def test_the_tpu_workers_install_what_orbax_imports_on_a_hierarchical_bucket():
    """Opting into a hierarchical namespace (``bucketHierarchicalNamespace``) needs no extra package on the
    workers: Orbax imports ``google.cloud.storage_control_v2`` to delete folders, and the workers' lock has
    it (MaxText's ``tpu`` extra asks for it, its base requirements do not). The folder paths themselves are
    not run here (the emulator has none)."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    from gke_ray_tpu.core.worker_env import locked_versions

    assert "google-cloud-storage-control" in locked_versions()
    assert "google-cloud-storage-control" not in {r.name for r in map(Requirement, requires("maxtext")) if not r.marker}


@pytest.mark.parametrize("moment", ["hold", "pause after"])
def test_the_emulator_keeps_a_commit_markers_writer_waiting_before_or_after_the_marker_is_in_the_bucket(tmp_path, moment):
    """The two moments the kill drill (tests/test_training_elastic.py) loses a writer at, with the client Orbax
    writes the marker with (etils' epath: a gcsfs resumable upload, which names the object in its first request
    and sends the bytes in a second): a held marker is not in the bucket and its writer waits until ``release``;
    a paused one is, committed, and its writer waits until ``resume``; a step of another number passes."""
    import threading

    from etils import epath

    step = {"hold": {"hold_commit_of": 4}, "pause after": {"pause_after_commit_of": 4}}[moment]
    with GcsEmulator("commit-waits", tmp_path / "fake-gcs-server.log", **step) as gcs, gcs.clients_here():
        for other in (14, 0):  # not the held or paused step, though "4" is in "14"
            epath.Path(f"gs://commit-waits/run/checkpoints/{other}/commit_success.txt").write_text("done")
        writer = threading.Thread(daemon=True, target=epath.Path(
            "gs://commit-waits/run/checkpoints/4/commit_success.txt").write_text, args=("done",))
        writer.start()
        event = gcs.held if moment == "hold" else gcs.paused
        assert event.wait(timeout=30)
        writer.join(timeout=2)
        assert writer.is_alive()  # waiting for an answer
        assert gcs.committed_steps("run/checkpoints") == ([0, 14] if moment == "hold" else [0, 4, 14])
        (gcs.release if moment == "hold" else gcs.resume)()
        writer.join(timeout=30)
        assert not writer.is_alive()
