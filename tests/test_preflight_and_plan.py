"""The planned run is checked at `pulumi preview` and by the offline preview, before any TPU exists."""

from __future__ import annotations

import json

import pytest

from gke_ray_tpu.stack import preview
from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.stack.mock_engine import OfflineRun, run_offline
from gke_ray_tpu.preflight.report import planned_run
from gke_ray_tpu.stack.checks import check_run
from gke_ray_tpu.stack.parse import parse_stack_config


def test_preview_reports_the_default_runs_estimate_and_its_cost(dev_run):
    """21.86 GiB estimated of 31.24: XLA's peak may be up to 1/0.68 of it, so preview cannot call it (XLA: 21.84)."""
    (info,) = [m for level, m in dev_run.logs
               if level == "info" and "HBM per chip" in m and not m.startswith("Declared run")]
    assert "Sharding over 2 slice(s): OK" in info
    assert "  total                               21.86 GiB\n" in info
    assert "verdict: uncertain: run the compile check (margin +9.38 GiB;" in info
    assert "$86.40/hour" in info and "run (ESTIMATE): 100 steps x 1.914 s" in info
    assert [m for level, m in dev_run.logs if level == "warning"] == [
        "estimated 21.86 GiB per chip is within the estimate's error of XLA's 31.24 GiB limit on a v6e chip: "
        "uncertain, run the compile check (python -m gke_ray_tpu.stack.preview --section training --compile; for declared "
        "runs gke-ray-tpu:compileCheck true)"
    ]


def test_preview_warns_when_the_planned_70b_run_exceeds_hbm(run_stack):
    run = run_stack(plannedPreset="llama3-70b")
    warnings = [m for level, m in run.logs if level == "warning"]
    assert warnings == [
        "estimated 53.09 GiB per chip exceeds the usable 31.24 GiB of a v6e chip: expect out-of-memory at compile time"
    ]
    assert run.resources  # an estimate warns; it does not block


def test_preview_says_uncertain_when_the_estimate_is_within_its_error_of_the_limit(run_stack):
    """70B, bfloat16 weights, batch 1, save_qkv_proj: 34.98 GiB estimated, XLA's figure may be 20.95-51.45
    (34.98 / 1.67 to 34.98 / 0.68)."""
    overrides = {"weight_dtype": "bfloat16", "per_device_batch_size": 1, "remat_policy": "save_qkv_proj"}
    run = run_stack(plannedPreset="llama3-70b", plannedOverrides=json.dumps(overrides))
    warnings = [m for level, m in run.logs if level == "warning"]
    assert warnings == [
        "estimated 34.98 GiB per chip is within the estimate's error of XLA's 31.24 GiB limit on a v6e chip: "
        "uncertain, run the compile check (python -m gke_ray_tpu.stack.preview --section training --compile; for declared "
        "runs gke-ray-tpu:compileCheck true)"
    ]
    [info] = [m for level, m in run.logs if level == "info" and "HBM per chip" in m and not m.startswith("Declared")]
    assert "verdict: uncertain: run the compile check (margin -3.74 GiB; XLA's peak likely 20.95-51.45 GiB)" in info


def test_preview_fails_on_a_planned_run_that_splits_a_kv_head(dev_config):
    """Gemma 2B has one KV head: the presets' tensor 4 would split it, which MaxText refuses on the slices."""
    config = {
        **dev_config,
        "gke-ray-tpu:plannedPreset": "llama3-8b",
        "gke-ray-tpu:plannedOverrides": json.dumps({"model_name": "gemma-2b"}),
    }
    run = OfflineRun()
    with pytest.raises(ConfigError, match=r"ici_tensor_parallelism=4: expected one of \[1\], .*KV heads of 1 does not divide by tensor 4"):
        run_offline(config, run=run)
    assert run.resources == []


def test_preview_fails_on_an_explicit_planned_run_that_cannot_shard(dev_config):
    config = {
        **dev_config,
        "gke-ray-tpu:plannedPreset": "llama3-8b",
        "gke-ray-tpu:plannedOverrides": json.dumps({"ici_tensor_parallelism": 2}),
    }
    run = OfflineRun()
    with pytest.raises(ConfigError, match=r"ici_fsdp_parallelism\*ici_tensor_parallelism='4\*2=8': expected a product of 16, the 16 chips of one v6e-16 slice"):
        run_offline(config, run=run)
    assert run.resources == []


def test_default_planned_run_on_another_shape_only_warns(run_stack):
    run = run_stack(tpuTopology="8x8", runs=None)  # 64 chips per slice: the 8B preset's 4 x 4 does not cover it
    warnings = [m for level, m in run.logs if level == "warning" and "planned run" in m]
    assert len(warnings) == 1 and "ici_fsdp_parallelism*ici_tensor_parallelism='4*4=16': expected a product of 64" in warnings[0]
    assert run.resources


def test_elastic_preset_must_shard_on_every_slice_count(dev_config):
    cfg = parse_stack_config(dev_config)
    maxtext, elastic = planned_run("llama3-8b-elastic", {}, "preset")
    assert elastic
    assert check_run(cfg, maxtext, elastic=True).slice_counts == (2, 1)
    assert check_run(cfg, maxtext, elastic=True).ok
    # Pinning FSDP over DCN to 2 slices cannot survive losing one.
    report = check_run(cfg, {**maxtext, "dcn_fsdp_parallelism": 2, "dcn_data_parallelism": 1}, elastic=True)
    assert [str(e) for e in report.errors] == [
        "invalid config dcn_fsdp_parallelism='2': expected a product of 1, "
        "the number of slices when the elastic job runs on 1 of 1..2 (or one axis set to -1)"
    ]


def test_preview_prints_resources_manifests_and_verdict(capsys):
    assert preview.main(["--stack", "dev"]) == 0
    out = capsys.readouterr().out
    assert "Resources of gke-ray-tpu/dev (pulumi up would create): 23 resources in 8 components" in out
    assert "gcp:container/nodePool:NodePool  slice-1-pool  (name=v6e-16-1  location=us-east5-b  machineType=ct6e-standard-4t  nodeCount=4)" in out
    assert "[kept on destroy]" in out
    assert "kind: RayCluster" in out and "numOfHosts: 4" in out and "count: 2" in out
    assert "kind: NetworkPolicy" in out and "mode: token" in out
    assert '"rayHeadService": "maxtext-tpu-cluster-head-svc"' in out
    assert "verdict: uncertain: run the compile check (margin +9.38 GiB;" in out


def test_preview_exit_codes(capsys):
    assert preview.main(["--section", "training", "ici_tensor_parallelism=2"]) == 1
    assert "MISMATCH" in capsys.readouterr().out
    assert preview.main(["--preset", "llama3-405b"]) == 2
    assert "invalid config --preset='llama3-405b': expected one of llama3-70b, llama3-8b, llama3-8b-elastic, tiny-cpu" in capsys.readouterr().err
    assert preview.main(["--stack", "nosuch"]) == 2
    assert "no stack file" in capsys.readouterr().err
