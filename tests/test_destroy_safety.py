"""What `pulumi destroy` would do to checkpoints and the cluster follows the stack config; defaults keep data."""

from __future__ import annotations

import pytest

from tests.test_stack_dev import BUCKET, CLUSTER


@pytest.mark.parametrize(
    ("setting", "retained", "force_destroy"),
    [
        (None, True, False),  # unset: the safe default
        ("retain", True, False),
        ("delete-empty", False, False),  # GCS refuses to delete a non-empty bucket: destroy stops, data stays
        ("force", False, True),  # the only setting that deletes checkpoints
    ],
)
def test_bucket_deletion_follows_config(run_stack, setting, retained, force_destroy):
    bucket = run_stack(bucketDeletion=setting).one(BUCKET)
    assert bucket.retain_on_delete is retained
    assert bucket.inputs["forceDestroy"] is force_destroy
    assert bucket.protect is False


def test_cluster_deletion_protection_defaults_on(run_stack):
    assert run_stack(deletionProtection=None).one(CLUSTER).inputs["deletionProtection"] is True
    assert run_stack(deletionProtection="true").one(CLUSTER).inputs["deletionProtection"] is True


def test_dev_stack_opts_out_of_cluster_protection_but_keeps_the_bucket(dev_run):
    assert dev_run.one(CLUSTER).inputs["deletionProtection"] is False
    assert dev_run.one(BUCKET).retain_on_delete is True
