"""Training FLOPs per device per step, and an ESTIMATED step time from an assumed MFU.

The FLOP count reproduces MaxText's ``calculate_tflops_training_per_device``
(``src/maxtext/utils/maxtext_utils.py``, dense non-MLA path) so the number can
be compared with the "TFLOP/s/device" MaxText logs:

* weights: ``3 x (L x (ffn + qkv + out_proj) + embedding)`` with
  ``ffn = 2BS x mlp x d x (len(mlp_activations) + 1)``,
  ``qkv = 2BS x d x (heads + 2 kv_heads) x head_dim``,
  ``out_proj = 2BS x d x heads x head_dim``, ``embedding = 2BS x d x vocab``
  (fwd + 2 x bwd; B = per_device_batch_size, S = max_target_length);
* attention: ``3 x L x (4 B S^2 heads head_dim) / 2`` - causal attention is
  counted at half (MaxText PR #1988, 2025-07; older logs count it in full); a
  sliding-window layer (Gemma 2 and 3, OLMo 3, Mistral) counts its band,
  ``4 B (S w - w^2 / 2) heads head_dim``, as MaxText counts Gemma 3's.

Each layer is counted with its own shape (:attr:`ModelShape.layers`: Gemma 4's
global layers have other heads than its local ones).

Rematerialisation FLOPs are not counted, as in MaxText.

Step time = FLOPs / (peak bf16 FLOP/s per chip x MFU). The MFU is an
ASSUMPTION, not a measurement of this stack: ``DEFAULT_MFU = 0.45`` is
anchored on AI-Hypercomputer/tpu-recipes single-slice v6e MaxText runs
(``training/trillium/Llama3.1-8B-MaxText/v6e-16``: 419.485 TFLOP/s/device =
45.7% of 918; ``training/trillium/Llama3.1-70B-MaxText/v6e-32``: 443.385 =
48.3%), rounded down because the tutorial's runs are multislice over DCN,
use shorter sequences (4096 vs 8192) and none of the recipes' tuned XLA
flags. The tutorial's own sample log (MaxText's small default model on 32
chips) shows 83.171 TFLOP/s/device, i.e. 9% MFU - small models fall far short
of the anchor.
"""

from __future__ import annotations

from dataclasses import dataclass

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.models import Layer, ModelShape, get_model
from gke_ray_tpu.core.maxtext import check_settings
from gke_ray_tpu.core.tpu_catalogue import SliceShape

DEFAULT_MFU = 0.45
"""Assumed model FLOP utilisation (see module docstring). An estimate input, not a fact."""



@dataclass(frozen=True)
class StepFlops:
    """Training FLOPs per device per step, split like MaxText's log line."""

    learnable_weight_tflops: float
    attention_tflops: float

    @property
    def total_tflops(self) -> float:
        return self.learnable_weight_tflops + self.attention_tflops


def check_batch_and_length(per_device_batch_size: object, max_target_length: object) -> None:
    """The two MaxText batch keys every estimate reads, under MaxText's own rules."""
    check_settings({"per_device_batch_size": per_device_batch_size, "max_target_length": max_target_length})


def _causal_attention_flops(layer: Layer, per_device_batch_size: float, length: int) -> float:
    """One layer's attention FLOPs (forward), causal: half of the full square, or the band of a sliding window
    (MaxText's ``calculate_mixed_attention_model_tflops_training_per_device``)."""
    a = layer.attention
    if a.window is None or a.window >= length:
        return 2 * per_device_batch_size * length**2 * a.heads * a.head_dim
    return 4 * per_device_batch_size * (length * a.window - 0.5 * a.window**2) * a.heads * a.head_dim


def _layer_weight_flops(layer: Layer, d: int, tokens: float) -> float:
    a = layer.attention
    kv = 1 if a.kv == "shared" else 2
    ffn = 2 * tokens * layer.mlp_dim * d * (layer.mlp_activations + 1)
    qkv = 2 * tokens * d * (a.heads + kv * a.kv_heads) * a.head_dim
    out_proj = 2 * tokens * d * a.heads * a.head_dim
    return ffn + qkv + out_proj


def training_tflops_per_device(
    model: str | ModelShape, per_device_batch_size: float, max_target_length: int
) -> StepFlops:
    m = get_model(model)
    check_batch_and_length(per_device_batch_size, max_target_length)
    tokens = per_device_batch_size * max_target_length
    layers = m.layers
    embedding = 2 * tokens * m.d_model * m.vocab_size
    weights = (sum(_layer_weight_flops(layer, m.d_model, tokens) for layer in layers) + embedding) * 3 / 1e12
    attention = sum(_causal_attention_flops(layer, per_device_batch_size, max_target_length) for layer in layers) * 3 / 1e12
    return StepFlops(learnable_weight_tflops=weights, attention_tflops=attention)


@dataclass(frozen=True)
class StepTimeEstimate:
    """ESTIMATED seconds per step = TFLOP per device / (peak TFLOP/s x assumed MFU)."""

    flops: StepFlops
    peak_tflops_per_chip: float
    mfu: float
    mfu_source: str

    @property
    def achieved_tflops_per_chip(self) -> float:
        return self.peak_tflops_per_chip * self.mfu

    @property
    def seconds(self) -> float:
        return self.flops.total_tflops / self.achieved_tflops_per_chip

    def format(self) -> str:
        return (
            f"step time (ESTIMATE): {self.seconds:.3f} s = {self.flops.total_tflops:.1f} TFLOP/device "
            f"/ ({self.peak_tflops_per_chip:g} TFLOP/s peak x MFU {self.mfu:.2f}, {self.mfu_source})"
        )


def estimate_step_time(
    model: str | ModelShape,
    shape: SliceShape,
    per_device_batch_size: float,
    max_target_length: int,
    mfu: float | None = None,
) -> StepTimeEstimate:
    """Estimate seconds per training step; ``mfu=None`` uses the assumed DEFAULT_MFU."""
    if not isinstance(shape, SliceShape):
        raise ConfigError("topology", shape, "a SliceShape from tpu_catalogue.slice_shape()")
    if mfu is None:
        mfu, source = DEFAULT_MFU, "assumed default"
    else:
        source = "caller-supplied"
    if isinstance(mfu, bool) or not isinstance(mfu, (int, float)) or not 0 < mfu <= 1:
        raise ConfigError("mfu", mfu, "a fraction in (0, 1]")
    return StepTimeEstimate(
        flops=training_tflops_per_device(model, per_device_batch_size, max_target_length),
        peak_tflops_per_chip=shape.generation.peak_bf16_tflops_per_chip,
        mfu=float(mfu),
        mfu_source=source,
    )
