"""The MaxText vocabulary of core.maxtext against the installed MaxText, and its typed values."""

from __future__ import annotations

import re
from importlib import resources

import pytest
import yaml
from omegaconf import OmegaConf

from core.errors import ConfigError
from core.maxtext import BASE_DEFAULTS, DTYPES, OPTIMIZERS, REMAT_POLICIES, check_settings, parse_value, render
from core.estimates.memory import MODELLED_REMAT_POLICIES


def test_base_defaults_are_the_installed_base_yml():
    base = yaml.safe_load((resources.files("maxtext") / "configs" / "base.yml").read_text())
    assert {key: base[key] for key in BASE_DEFAULTS} == BASE_DEFAULTS


def test_vocabularies_are_maxtexts_own():
    from maxtext.configs import types

    assert set(DTYPES) == {d.value for d in types.DType}
    assert set(OPTIMIZERS) == {o.value for o in types.OptimizerType}
    # Every policy the decoder branches on (anything else fails its assertion) is accepted, and no other.
    source = (resources.files("maxtext") / "layers" / "nnx_decoders.py").read_text()
    body = source[source.index("def get_remat_policy"):source.index("def get_norm_layer")]
    named = set(re.findall(r'remat_policy [!=]= "([a-z_]+)"', body))
    for group in re.findall(r"remat_policy in \{([^}]*)\}", body):
        named |= set(re.findall(r'"([a-z_]+)"', group))
    assert named == set(REMAT_POLICIES)
    assert set(MODELLED_REMAT_POLICIES) <= set(REMAT_POLICIES)


@pytest.mark.parametrize("text", ["4", "-1", "0", "1e-3", "0.001", "1.5e-05", "true", "False", "synthetic", "4x4",
                                  "010", "", "[silu,linear]", "1_000"])
def test_a_value_is_typed_as_maxtext_types_it_and_renders_back(text):
    value = parse_value(text)
    parsed_by_maxtext = OmegaConf.from_cli([f"k={text}"])["k"]
    if isinstance(value, (bool, int, float)):
        assert value == parsed_by_maxtext and type(value) is type(parsed_by_maxtext)
    # Whatever the type, rendering gives MaxText the same value back.
    assert OmegaConf.from_cli([f"k={render(value)}"])["k"] == parsed_by_maxtext


@pytest.mark.parametrize(
    "values, key",
    [({"per_device_batch_size": 0}, "per_device_batch_size"), ({"per_device_batch_size": True}, "per_device_batch_size"),
     ({"steps": 2.5}, "steps"), ({"steps": "010"}, "steps"), ({"max_target_length": -1}, "max_target_length"),
     ({"remat_policy": "everything"}, "remat_policy"), ({"weight_dtype": "int8"}, "weight_dtype"),
     ({"ici_fsdp_parallelism": 0}, "ici_fsdp_parallelism"), ({"dcn_data_parallelism": "x"}, "dcn_data_parallelism")],
)
def test_settings_break_their_keys_rule(values, key):
    with pytest.raises(ConfigError) as error:
        check_settings(values, key=lambda name: f"plannedOverrides.{name}")
    assert error.value.key == f"plannedOverrides.{key}"


def test_good_settings_pass():
    check_settings({"per_device_batch_size": 0.5, "steps": 1, "remat_policy": "minimal_offloaded", "mu_dtype": "",
                    "weight_dtype": "bfloat16", "ici_fsdp_parallelism": -1, "anything_else": [1]})
