"""The MaxText vocabulary of gke_ray_tpu.core.maxtext against the installed MaxText, and its typed values."""

from __future__ import annotations

import re
from importlib import resources

import pytest
import yaml
from omegaconf import OmegaConf

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.maxtext import BASE_DEFAULTS, DTYPES, OPTIMIZERS, REMAT_POLICIES, check_settings, parse_value, render
from gke_ray_tpu.preflight.memory import MODELLED_REMAT_POLICIES


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
                    "weight_dtype": "bfloat16", "ici_fsdp_parallelism": -1, "mlp_activations": ["silu"]})


def test_the_known_keys_and_models_are_the_installed_maxtexts():
    """What check_known reads from MaxText's files is what its config class accepts (imported here, not there)."""
    import typing

    from maxtext.configs import types

    from gke_ray_tpu.core.maxtext import installed

    maxtext = installed()
    base = yaml.safe_load((resources.files("maxtext") / "configs" / "base.yml").read_text())
    assert maxtext.settings == set(base)
    assert maxtext.keys == set(types.MaxTextConfig.model_fields)
    assert maxtext.models == set(typing.get_args(types.ModelName))


@pytest.mark.parametrize(
    "values, key, hint",
    [({"stpes": 3}, "stpes", "did you mean steps?"),
     ({"steps": 3, "per_device_batch": 2}, "per_device_batch", "did you mean per_device_batch_size"),
     ({"zzz": 1}, "zzz", "base.yml"),
     ({"model_name": "llama3-8B"}, "model_name", "did you mean llama3-8b"),
     # models/llama3-8b.yml sets 32 layers: MaxText refuses another value on its command line.
     ({"model_name": "llama3-8b", "base_num_decoder_layers": 2}, "base_num_decoder_layers", "unset or 32")],
)
def test_what_maxtexts_loader_refuses_is_refused_naming_the_key(values, key, hint):
    with pytest.raises(ConfigError) as error:
        check_settings(values, key=lambda name: f"runs[0].overrides.{name}")
    assert error.value.key == f"runs[0].overrides.{key}"
    assert hint in error.value.expected


def test_what_maxtexts_loader_accepts_passes():
    check_settings({"emb_dim": 128})  # a value MaxText derives: its loader takes it (and recomputes it)
    check_settings({"model_name": "llama3-8b", "base_num_decoder_layers": 32, "normalization_layer_epsilon": 1e-5,
                    "mlp_activations": "[silu,linear]"})  # the overlay's own values, as a command line types them
    check_settings({"model_name": "llama3-8b", "base_num_decoder_layers": 2, "override_model_config": True})
    check_settings({"model_name": "llama3.1-8b-Instruct"})  # its overlay is llama3.1-8b's


def test_without_maxtext_only_the_values_are_checked(monkeypatch):
    import gke_ray_tpu.core.maxtext

    monkeypatch.setattr(gke_ray_tpu.core.maxtext, "installed", lambda: None)
    check_settings({"stpes": 3, "model_name": "llama3-8B"})
    with pytest.raises(ConfigError):
        check_settings({"steps": 0})


def test_a_preset_with_a_key_maxtext_lacks_is_refused(monkeypatch, tmp_path):
    import gke_ray_tpu.core.presets

    (tmp_path / "typo.yml").write_text("description: d\nrun_name: r\nmaxtext:\n  stpes: 3\n")
    monkeypatch.setattr(gke_ray_tpu.core.presets, "PRESET_DIR", tmp_path)
    with pytest.raises(ConfigError) as error:
        gke_ray_tpu.core.presets._load("typo")
    assert error.value.key == "typo.yml: stpes" and "steps" in error.value.expected
