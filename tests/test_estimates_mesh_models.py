"""Model shapes (read from the installed MaxText, checked against published parameter counts) and MaxText
parallelism resolution."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.models import COMPILE_CHECK, get_model, model_shape, modelled_models, NoEstimate
from gke_ray_tpu.preflight.mesh import resolve_mesh
from gke_ray_tpu.core.sharding import check_sharding
from gke_ray_tpu.core.job_spec import build_job
from gke_ray_tpu.core.maxtext import installed
from gke_ray_tpu.core.presets import get_preset
from gke_ray_tpu.core.tpu_catalogue import slice_shape
from tests.conftest import REPO_ROOT


def test_llama3_8b_parameter_count():
    """Per layer: q 4096^2 + k,v 2 x 4096 x 1024 + o 4096^2 = 41,943,040;
    MLP 3 x 4096 x 14,336 = 176,160,768; 2 norms 8192 -> 218,112,000 x 32 = 6,979,584,000.
    Embedding + untied head 2 x 128,256 x 4096 = 1,050,673,152; final norm 4096.
    Total 8,030,261,248 (Meta's "8B")."""
    assert get_model("llama3-8b").params_per_layer == 218_112_000
    assert get_model("llama3-8b").num_params == 8_030_261_248


def test_llama3_70b_parameter_count():
    """Per layer: q 8192^2 + k,v 2 x 8192 x 1024 + o 8192^2 = 150,994,944;
    MLP 3 x 8192 x 28,672 = 704,643,072; norms 16,384 -> 855,654,400 x 80 = 68,452,352,000.
    Embedding + head 2 x 128,256 x 8192 = 2,101,346,304; final norm 8192.
    Total 70,553,706,496."""
    assert get_model("llama3-70b").params_per_layer == 855_654_400
    assert get_model("llama3-70b").num_params == 70_553_706_496


# Shapes read from the installed MaxText's configs/models/<model_name>.yml, against the parameter counts the
# model's authors publish (total, and without the embedding tables where they give it): a wrong key, a
# missed tied embedding or a miscounted MLP moves these by far more than the tolerance.
PUBLISHED = {
    # model_name: (total, non-embedding or None, source)
    "mistral-7b": (7.24e9, None, "Mistral 7B v0.1 model card: 7.24B parameters"),
    "llama2-7b": (6.74e9, None, "Llama 2 7B: 6,738,415,616 parameters in Meta's checkpoint"),
    "gemma-2b": (2.506e9, 1.982e9, "Gemma report (2024) table 2: 524,550,144 embedding + 1,981,884,416"),
    "gemma-7b": (8.538e9, 7.751e9, "Gemma report (2024) table 2: 786,825,216 embedding + 7,751,248,896"),
    "qwen2.5-7b": (7.61e9, 6.53e9, "Qwen2.5-7B model card: 7.61B, 6.53B non-embedding"),
    "qwen3-8b": (8.2e9, 6.95e9, "Qwen3-8B model card: 8.2B, 6.95B non-embedding"),
    "qwen3-0.6b": (0.6e9, 0.44e9, "Qwen3-0.6B model card: 0.6B, 0.44B non-embedding (tied embeddings)"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shapes_from_maxtext_match_published_parameter_counts(name):
    total, non_embedding, _ = PUBLISHED[name]
    m = get_model(name)
    assert m.num_params == pytest.approx(total, rel=0.01)
    if non_embedding is not None:
        assert m.num_params - m.embedding_params == pytest.approx(non_embedding, rel=0.01)


def test_shape_follows_the_runs_own_keys_with_override_model_config():
    """The CPU preset trains MaxText's default model with its own base_* keys: the estimate sees that shape."""
    m = model_shape({"base_emb_dim": 64, "base_num_decoder_layers": 2, "base_mlp_dim": 128, "head_dim": 32,
                     "base_num_query_heads": 2, "base_num_kv_heads": 2, "vocab_size": 256})
    assert (m.name, m.d_model, m.num_layers, m.vocab_size) == ("default", 64, 2, 256)
    wider = model_shape({"model_name": "llama3-8b", "override_model_config": True, "base_emb_dim": 5120})
    assert wider.d_model == 5120 and wider.num_params > get_model("llama3-8b").num_params


def test_every_dense_model_maxtext_ships_is_modelled():
    names = modelled_models()
    for name in ("mistral-7b", "llama2-13b", "llama3.1-405b", "gemma-7b", "qwen2.5-14b", "qwen3-32b"):
        assert name in names
    assert all(get_model(name).num_params > 0 for name in names)


def _overlay(name: str) -> dict:
    return yaml.safe_load((installed().configs / "models" / f"{name}.yml").read_text())


def test_mixtures_of_experts_get_no_estimate():
    """Every model whose own yml sets num_experts > 1 is refused with the compile check as the way on."""
    moe = [path.stem for path in (installed().configs / "models").glob("*.yml")
           if (_overlay(path.stem).get("num_experts") or 1) > 1 and path.stem in installed().models]
    assert "mixtral-8x7b" in moe and len(moe) >= 10
    for name in moe:
        with pytest.raises(NoEstimate) as e:
            get_model(name)
        assert e.value.key == "model_name" and e.value.value == name
        assert COMPILE_CHECK in str(e.value) and "no estimate" in str(e.value)
    assert not set(moe) & set(modelled_models())


@pytest.mark.parametrize("name, reason", [
    ("qwen3-vl-2b", "use_multimodal"),
    ("gemma4-e2b", "decoder_block='gemma4_small'"),
])
def test_other_layer_structures_get_no_estimate(name, reason):
    with pytest.raises(NoEstimate) as e:
        get_model(name)
    assert reason in str(e.value) and COMPILE_CHECK in str(e.value)


def test_a_key_the_run_sets_is_named_when_it_makes_the_model_unmodelled():
    with pytest.raises(NoEstimate) as e:
        model_shape({"model_name": "llama3-8b", "override_model_config": True, "num_experts": 8})
    assert (e.value.key, e.value.value) == ("num_experts", 8)


def test_unknown_model_is_config_error():
    with pytest.raises(ConfigError) as e:
        get_model("gpt-5", key="training:model")
    assert e.value.key == "training:model" and e.value.value == "gpt-5"
    assert not isinstance(e.value, NoEstimate)
    with pytest.raises(ConfigError) as e:
        get_model("mistral-8b")
    assert e.value.key == "model_name" and "mistral-7b" in str(e.value)


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
    # The sharding check (gke_ray_tpu.core.parallelism) names the keys and shows the numbers.
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


def test_reading_shapes_from_maxtext_imports_neither_maxtext_nor_jax():
    """The estimate runs inside pulumi preview: MaxText's configs are read as files, never imported."""
    code = (
        "import sys; from gke_ray_tpu.preflight.memory import estimate_hbm_from_config; from gke_ray_tpu.core.models import modelled_models;"
        "from gke_ray_tpu.core.tpu_catalogue import slice_shape;"
        "estimate_hbm_from_config({'model_name': 'mistral-7b'}, slice_shape('v6e', '4x4'), 2); modelled_models();"
        "print(sorted(m for m in ('jax', 'maxtext') if m in sys.modules) or 'none')"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "none"


def test_a_run_that_splits_a_kv_head_is_refused_before_the_slices_are_paid_for():
    """MaxText refuses Gemma 2B (1 KV head) on tensor 4 only when it builds the attention layer, on the
    slices (the compile check's child met it: "num_kv_heads (1) ... must be divisible by 4"). The job
    and preview refuse it first, naming the key; all 16 chips on fsdp is accepted."""
    gemma_2b = {"model_name": "gemma-2b", "per_device_batch_size": 8, "max_target_length": 2048}
    with pytest.raises(ConfigError) as error:
        build_job(get_preset("llama3-8b"), base_output_directory="/data/", run_name="g", slices=2,
                  overrides=gemma_2b, generation="v6e", topology="4x4")
    assert (error.value.key, error.value.value) == ("ici_tensor_parallelism", 4)
    assert error.value.expected.startswith("one of [1], with ici_fsdp_parallelism taking the other chips")
    assert "KV heads of 1 does not divide by tensor 4" in error.value.expected
    fsdp_only = {**gemma_2b, "ici_fsdp_parallelism": 16, "ici_tensor_parallelism": 1}
    build_job(get_preset("llama3-8b"), base_output_directory="/data/", run_name="g", slices=2,
              overrides=fsdp_only, generation="v6e", topology="4x4")
    # Llama 3 8B's 8 KV heads take tensor 4 and 8, not 16 (a whole slice of tensor).
    v5p = slice_shape("v5p", "2x2x4")
    check_sharding({"model_name": "llama3-8b", "ici_tensor_parallelism": 8, "ici_fsdp_parallelism": 2}, v5p, [2, 1])
    with pytest.raises(ConfigError, match=r"decoder/layers/self_attention's KV heads of 8 does not divide by tensor 16"):
        check_sharding({"model_name": "llama3-8b", "ici_tensor_parallelism": 16, "ici_fsdp_parallelism": 1}, v5p, [2, 1])
