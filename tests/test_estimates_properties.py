"""Properties the HBM model must keep for any input (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gke_ray_tpu.core.models import modelled_models
from gke_ray_tpu.preflight.memory import estimate_hbm, MODELLED_REMAT_POLICIES
from gke_ray_tpu.core.tpu_catalogue import slice_shape

V6E_4X4 = slice_shape("v6e", "4x4")
MESHES = st.sampled_from(
    [
        {"ici_fsdp_parallelism": 16},
        {"ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 4},
        {"ici_fsdp_parallelism": 8, "ici_tensor_parallelism": 2},
        {"ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 4, "dcn_fsdp_parallelism": 2,
         "dcn_data_parallelism": 1},
    ]
)
MODEL = st.sampled_from(modelled_models())
POLICY = st.sampled_from(sorted(MODELLED_REMAT_POLICIES))
PDBS = st.integers(min_value=1, max_value=8)
SEQ = st.sampled_from([512, 1024, 2048, 4096, 8192])


@settings(max_examples=60)
@given(MODEL, MESHES, POLICY, PDBS, SEQ)
def test_more_batch_or_sequence_never_needs_less(model, mesh, policy, pdbs, seq):
    base = estimate_hbm(model, V6E_4X4, 2, mesh, pdbs, seq, policy)
    assert estimate_hbm(model, V6E_4X4, 2, mesh, pdbs + 1, seq, policy).total_gib > base.total_gib
    assert estimate_hbm(model, V6E_4X4, 2, mesh, pdbs, seq * 2, policy).total_gib > base.total_gib
    # state does not depend on batch or sequence
    assert estimate_hbm(model, V6E_4X4, 2, mesh, pdbs + 1, seq, policy).params_gib == base.params_gib


@settings(max_examples=60)
@given(MODEL, MESHES, POLICY, PDBS, SEQ)
def test_full_remat_is_the_smallest_policy(model, mesh, policy, pdbs, seq):
    full = estimate_hbm(model, V6E_4X4, 2, mesh, pdbs, seq, "full")
    other = estimate_hbm(model, V6E_4X4, 2, mesh, pdbs, seq, policy)
    assert other.activations_gib >= full.activations_gib
    assert other.total_gib == other.params_gib + other.gradients_gib + other.optimizer_gib + \
        other.activations_gib + other.transient_gib


@settings(max_examples=30)
@given(MODEL, POLICY, PDBS, SEQ)
def test_fsdp_over_dcn_halves_state_versus_data_over_dcn(model, policy, pdbs, seq):
    ici = {"ici_fsdp_parallelism": 4, "ici_tensor_parallelism": 4}
    data = estimate_hbm(model, V6E_4X4, 2, ici, pdbs, seq, policy)
    fsdp = estimate_hbm(model, V6E_4X4, 2, {**ici, "dcn_fsdp_parallelism": 2,
                                             "dcn_data_parallelism": 1}, pdbs, seq, policy)
    # All but the norm scales, which tensor alone splits (2% of the weights of MaxText's small default model).
    assert fsdp.params_gib * 2 == pytest.approx(data.params_gib, rel=0.02) and fsdp.params_gib < data.params_gib
    assert abs(fsdp.activations_gib - data.activations_gib) < 1e-9
