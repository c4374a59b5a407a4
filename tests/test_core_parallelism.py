"""The sharding check (gke_ray_tpu.core.parallelism), shared by the submit command, preview and the trainer."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.parallelism import AUTO, MAXTEXT_DEFAULTS, check_elastic, check_static, mesh_values

TUTORIAL_8B = {"ici_fsdp_parallelism": "4", "ici_tensor_parallelism": "4"}
TUTORIAL_70B = {**TUTORIAL_8B, "dcn_fsdp_parallelism": "2", "dcn_data_parallelism": "1"}


def test_defaults_are_the_installed_maxtext_base_yml():
    base = yaml.safe_load((resources.files("maxtext") / "configs" / "base.yml").read_text())
    mesh_keys = {k: v for k, v in base.items() if k[:4] in ("ici_", "dcn_") and k.endswith("_parallelism")}
    assert mesh_keys == MAXTEXT_DEFAULTS
    assert (MAXTEXT_DEFAULTS["ici_fsdp_parallelism"], MAXTEXT_DEFAULTS["dcn_data_parallelism"]) == (AUTO, AUTO)


def test_tutorial_runs_fit_two_v6e_4x4_slices():
    check_static(TUTORIAL_8B, chips_per_slice=16, num_slices=2)  # dcn_data=-1 fills in 2
    check_static(TUTORIAL_70B, chips_per_slice=16, num_slices=2)
    check_elastic(TUTORIAL_8B, chips_per_slice=16, min_slices=1, max_slices=2)


def test_unset_keys_take_maxtext_defaults_not_one():
    assert mesh_values({}, "ici")["ici_fsdp_parallelism"] == AUTO
    assert mesh_values({"ici_tensor_parallelism": "4"}, "ici")["ici_tensor_parallelism"] == 4
    # Nothing set: fsdp fills the whole slice and data the whole DCN.
    check_static({}, chips_per_slice=256, num_slices=7)


def test_ici_product_not_the_slice_chips_names_keys_and_numbers():
    with pytest.raises(ConfigError) as e:
        check_static({"ici_fsdp_parallelism": "4", "ici_tensor_parallelism": "2"}, 16, 2, "v6e 4x4 slice")
    assert e.value.key == "ici_fsdp_parallelism*ici_tensor_parallelism"
    assert e.value.value == "4*2=8"
    assert "a product of 16, the 16 chips of one v6e 4x4 slice" in str(e.value)


def test_auto_axis_must_divide_the_target():
    with pytest.raises(ConfigError) as e:
        check_static({"ici_tensor_parallelism": "3"}, 16, 1)
    assert e.value.key == "ici_tensor_parallelism"
    assert "a divisor of 16" in e.value.expected and "ici_fsdp_parallelism=-1" in e.value.expected


def test_dcn_product_must_equal_the_slices():
    with pytest.raises(ConfigError) as e:
        check_static(TUTORIAL_70B, 16, 3)
    assert e.value.key == "dcn_fsdp_parallelism"
    assert e.value.value == "2"
    assert "the number of slices (3)" in e.value.expected


def test_two_auto_axes_and_bad_values_are_rejected():
    with pytest.raises(ConfigError, match="at most one ici_"):
        check_static({"ici_tensor_parallelism": "-1"}, 16, 1)
    with pytest.raises(ConfigError, match="an integer >= 1, or -1"):
        check_static({"ici_tensor_parallelism": "0"}, 16, 1)
    with pytest.raises(ConfigError, match="an integer >= 1, or -1"):
        check_static({"ici_tensor_parallelism": "four"}, 16, 1)
    with pytest.raises(ConfigError) as e:
        check_static({"ici_fdsp_parallelism": "4"}, 16, 1)
    assert e.value.key == "ici_fdsp_parallelism" and "ici_fsdp_parallelism" in e.value.expected


def test_elastic_needs_dcn_on_auto_for_every_slice_count():
    with pytest.raises(ConfigError) as e:
        check_elastic(TUTORIAL_70B, 16, 1, 2)
    assert "runs on 1 of 1..2" in e.value.expected
    check_elastic(TUTORIAL_70B, 16, 2, 2)  # a single-value range is a static run


def test_elastic_min_above_max():
    with pytest.raises(ConfigError) as e:
        check_elastic(TUTORIAL_8B, 16, 3, 2)
    assert e.value.key == "min_slices,max_slices"
    assert e.value.value == (3, 2)
    with pytest.raises(ConfigError, match="at least 1 slice"):
        check_elastic(TUTORIAL_8B, 16, 0, 2)
