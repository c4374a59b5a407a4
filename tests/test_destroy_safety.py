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


# --- the bucket's namespace: chosen at creation, never a reason to replace the bucket ------------

HNS_BUCKET = {BUCKET: {"hierarchicalNamespace": {"enabled": True}}}
"""A bucket this stack created when its default was a hierarchical namespace (what the provider reads back)."""


@pytest.mark.parametrize(("setting", "enabled"), [(None, False), ("true", True), ("false", False)])
def test_a_new_bucket_gets_the_namespace_the_config_asks_for(run_stack, setting, enabled):
    run = run_stack(bucketHierarchicalNamespace=setting)
    assert run.one(BUCKET).inputs["hierarchicalNamespace"] == {"enabled": enabled}
    assert run.outputs["bucketHierarchicalNamespace"] is enabled
    assert not [m for level, m in run.logs if level == "warning" and "namespace" in m]


def test_an_existing_hierarchical_bucket_is_kept_and_the_preview_says_so(dev_config):
    """Cloud Storage cannot convert a bucket and the provider would replace it: create-before-delete
    on a taken name fails, and retain_on_delete would orphan the checkpoints. The stack ignores the
    setting for an existing bucket, reports what it has, and warns."""
    from gke_ray_tpu.stack.mock_engine import MockGke, run_offline

    run = run_offline(dev_config, gke=MockGke(existing_state=HNS_BUCKET))
    bucket = run.one(BUCKET)
    assert bucket.ignore_changes == ["hierarchicalNamespace"] and bucket.retain_on_delete
    assert run.outputs["bucketHierarchicalNamespace"] is True
    assert run.outputs["checkpointDir"] == "gs://my-tpu-project-maxtext-checkpoints"  # runs still write there
    (warning,) = [m for level, m in run.logs if level == "warning" and "namespace" in m]
    assert "bucket my-tpu-project-maxtext-checkpoints has a hierarchical namespace and keeps it" in warning
    assert "not tested here" in warning and "Moving checkpoints to a new bucket" in warning
    # Saying true for it is how to acknowledge the hierarchical bucket: no warning then.
    quiet = run_offline({**dev_config, "gke-ray-tpu:bucketHierarchicalNamespace": "true"},
                        gke=MockGke(existing_state=HNS_BUCKET))
    assert not [m for level, m in quiet.logs if level == "warning" and "namespace" in m]


def test_the_namespace_setting_is_a_boolean(run_stack):
    from gke_ray_tpu.core.errors import ConfigError

    with pytest.raises(ConfigError, match="bucketHierarchicalNamespace='yes'"):
        run_stack(bucketHierarchicalNamespace="yes")
