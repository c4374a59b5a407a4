"""Model shapes (exact parameter counts) and MaxText parallelism resolution."""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from core.estimates import MODELS, get_model, resolve_mesh


def test_llama3_8b_parameter_count():
    """Per layer: q 4096^2 + k,v 2 x 4096 x 1024 + o 4096^2 = 41,943,040;
    MLP 3 x 4096 x 14,336 = 176,160,768; 2 norms 8192 -> 218,112,000 x 32 = 6,979,584,000.
    Embedding + untied head 2 x 128,256 x 4096 = 1,050,673,152; final norm 4096.
    Total 8,030,261,248 (Meta's "8B")."""
    assert MODELS["llama3-8b"].params_per_layer == 218_112_000
    assert MODELS["llama3-8b"].num_params == 8_030_261_248


def test_llama3_70b_parameter_count():
    """Per layer: q 8192^2 + k,v 2 x 8192 x 1024 + o 8192^2 = 150,994,944;
    MLP 3 x 8192 x 28,672 = 704,643,072; norms 16,384 -> 855,654,400 x 80 = 68,452,352,000.
    Embedding + head 2 x 128,256 x 8192 = 2,101,346,304; final norm 8192.
    Total 70,553,706,496."""
    assert MODELS["llama3-70b"].params_per_layer == 855_654_400
    assert MODELS["llama3-70b"].num_params == 70_553_706_496


def test_shapes_match_maxtext_model_ymls():
    m = MODELS["llama3-70b"]
    assert (m.num_layers, m.d_model, m.num_heads, m.num_kv_heads, m.head_dim, m.mlp_dim, m.vocab_size) == (
        80, 8192, 64, 8, 128, 28672, 128256
    )
    m = MODELS["llama3-8b"]
    assert (m.num_layers, m.d_model, m.num_heads, m.num_kv_heads, m.head_dim, m.mlp_dim, m.vocab_size) == (
        32, 4096, 32, 8, 128, 14336, 128256
    )
    assert MODELS["tiny"].maxtext_model_name is None
    assert MODELS["tiny"].maxtext_overrides()["base_emb_dim"] == 256


def test_unknown_model_is_config_error():
    with pytest.raises(ConfigError) as e:
        get_model("gpt-5", key="training:model")
    assert e.value.key == "training:model"


def test_tutorial_meshes():
    m = resolve_mesh({"ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 4}, 16, 2)
    assert (m.data, m.fsdp, m.tensor, m.param_shards, m.batch_shards, m.devices) == (2, 4, 4, 16, 8, 32)
    m = resolve_mesh(
        {"ici_tensor_parallelism": 4, "ici_fsdp_parallelism": 4,
         "dcn_fsdp_parallelism": 2, "dcn_data_parallelism": 1},
        16, 2,
    )
    assert (m.data, m.fsdp, m.tensor, m.param_shards, m.batch_shards) == (1, 8, 4, 32, 8)


def test_maxtext_defaults_fill_fsdp_and_dcn_data():
    m = resolve_mesh({}, 16, 2)
    assert (m.ici["fsdp"], m.dcn["data"]) == (16, 2)


def test_ici_product_must_match_chips():
    with pytest.raises(ConfigError) as e:
        resolve_mesh({"ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 8}, 16, 2)
    # The sharding check (core.parallelism) names the keys and shows the numbers.
    assert e.value.key == "ici_fsdp_parallelism*ici_tensor_parallelism"
    assert e.value.value == "4*8=32"


def test_fill_must_divide():
    with pytest.raises(ConfigError) as e:
        resolve_mesh({"ici_tensor_parallelism": 3}, 16, 2)
    assert e.value.key == "ici_tensor_parallelism"
    assert "a divisor of 16" in e.value.expected and "ici_fsdp_parallelism=-1" in e.value.expected


def test_two_fills_rejected():
    with pytest.raises(ConfigError) as e:
        resolve_mesh({"ici_tensor_parallelism": -1}, 16, 2)
    assert e.value.key == "ici_fsdp_parallelism,ici_tensor_parallelism"


def test_unmodelled_axis_rejected():
    with pytest.raises(ConfigError) as e:
        resolve_mesh({"ici_sequence_parallelism": 2, "ici_fsdp_parallelism": 8}, 16, 2)
    assert e.value.key == "ici_sequence_parallelism"


def test_unknown_parallelism_key_and_bad_value():
    with pytest.raises(ConfigError) as e:
        resolve_mesh({"ici_fdsp_parallelism": 4}, 16, 2)
    assert e.value.key == "ici_fdsp_parallelism"
    with pytest.raises(ConfigError) as e:
        resolve_mesh({"ici_tensor_parallelism": 0}, 16, 2)
    assert e.value.key == "ici_tensor_parallelism"
    with pytest.raises(ConfigError) as e:
        resolve_mesh({}, 16, 0)
    assert e.value.key == "num_slices"
