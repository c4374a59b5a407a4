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

Rematerialisation FLOPs are not counted, as in MaxText (:func:`recomputed_tflops` counts them apart).

Where a generation's chip was measured (:data:`MEASURED`: v5e), the step time is the chip's: weight matmuls and
attention, each with what the remat policy recomputes, at the shares of peak the chip reached, plus the loss over
the logits, with the error it had on the runs it was fitted to. Elsewhere,
step time = FLOPs / (peak bf16 FLOP/s per chip x MFU). That MFU is an
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
from gke_ray_tpu.core.tpu_catalogue import SliceShape
from gke_ray_tpu.preflight.memory import check_batch_and_length, get_remat_policy

DEFAULT_MFU = 0.45
"""Assumed model FLOP utilisation where no chip was measured (see module docstring). An estimate input, not a
fact: on the v5e chip MaxText's logged MFU was 0.36 to 0.61 (``bench/bench_chip.py``)."""



@dataclass(frozen=True)
class StepFlops:
    """Training FLOPs per device per step, split like MaxText's log line."""

    learnable_weight_tflops: float
    attention_tflops: float

    @property
    def total_tflops(self) -> float:
        return self.learnable_weight_tflops + self.attention_tflops


def _causal_attention_flops(layer: Layer, per_device_batch_size: float, length: int) -> float:
    """One layer's attention FLOPs (forward), causal: half of the full square, or the band of a sliding window
    (MaxText's ``calculate_mixed_attention_model_tflops_training_per_device``)."""
    a = layer.attention
    if a.window is None or a.window >= length:
        return 2 * per_device_batch_size * length**2 * a.heads * a.head_dim
    return 4 * per_device_batch_size * (length * a.window - 0.5 * a.window**2) * a.heads * a.head_dim


def _layer_matmuls(layer: Layer, d: int, tokens: float) -> dict[str, float]:
    """One layer's weight matmuls (forward FLOPs), by the names MaxText's remat policies give their outputs."""
    a = layer.attention
    kv = 1 if a.kv == "shared" else 2
    return {
        "qkv": 2 * tokens * d * (a.heads + kv * a.kv_heads) * a.head_dim,
        "out_proj": 2 * tokens * d * a.heads * a.head_dim,
        "mlpwi": 2 * tokens * layer.mlp_dim * d * layer.mlp_activations,
        "mlpwo": 2 * tokens * layer.mlp_dim * d,
    }


def _layer_weight_flops(layer: Layer, d: int, tokens: float) -> float:
    return sum(_layer_matmuls(layer, d, tokens).values())


_SAVED_AS = {
    "qkv": ("query_proj", "key_proj", "value_proj", "kv_proj", "qkv_proj"),
    "out_proj": ("out_proj",),
    "mlpwi": ("mlpwi", "mlpwi_0", "mlpwi_1"),
    "mlpwo": ("mlpwo",),
}


def recomputed_tflops(model: str | ModelShape, per_device_batch_size: float, max_target_length: int,
                      saves: tuple[str, ...]) -> StepFlops:
    """What the backward computes again of a step's forward under a remat policy that saves ``saves`` of each layer
    (:func:`gke_ray_tpu.preflight.memory.get_remat_policy`): each weight matmul whose output it does not save and
    the backward reads (the MLP's output only where a norm reads it, :attr:`Layer.mlp_output_normed`), and the
    attention where the context is not saved. MaxText's FLOP count leaves it out; the chip spends it."""
    m = get_model(model)
    tokens = per_device_batch_size * max_target_length
    weights = attention = 0.0
    for layer in m.layers:
        for group, flops in _layer_matmuls(layer, m.d_model, tokens).items():
            read = group != "mlpwo" or layer.mlp_output_normed
            if read and not set(_SAVED_AS[group]) & set(saves):
                weights += flops
        if "context" not in saves:
            attention += _causal_attention_flops(layer, per_device_batch_size, max_target_length)
    return StepFlops(learnable_weight_tflops=weights / 1e12, attention_tflops=attention / 1e12)


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
class MeasuredStepTime:
    """A generation's step time as measured on a chip: seconds = weight matmul FLOPs (MaxText's count plus what the
    remat policy recomputes) / (peak x ``matmul_share``) + attention FLOPs (likewise) / (peak x
    ``attention_share``) + the output head's logits (tokens x vocabulary per device) x ``seconds_per_logit`` (the
    loss's softmax over them, which runs at memory speed: it is what makes a 152k vocabulary slow)."""

    matmul_share: float
    attention_share: float
    seconds_per_logit: float
    error: float
    """The largest |estimate / measured - 1| over the runs the constants were fitted to."""
    runs: int
    """How many runs they were fitted to."""


MEASURED: dict[str, MeasuredStepTime] = {
    "v5e": MeasuredStepTime(matmul_share=0.77, attention_share=0.44, seconds_per_logit=0.080e-9, error=0.15, runs=23),
}
"""Generations whose step time was measured: v5e by MaxText 0.2.5 on one chip (``bench/bench_chip.py``), Qwen 3 0.6B,
MaxText's default 1.1B and Qwen 2.5 1.5B, 2,048 to 32,768 tokens a sequence, remat full, none, minimal and
save_qkv_proj; the constants fitted by least squares of the relative error to the steady steps of
``bench/data/chip_v5e.json`` (23 runs). Held out a model at a time (fitted to the other two), the error reached
35%: a model unlike these may be off by more. Every other generation: :data:`DEFAULT_MFU` on MaxText's count."""


@dataclass(frozen=True)
class StepTimeEstimate:
    """ESTIMATED seconds per step: from a chip's measurements where the generation has them (:data:`MEASURED`),
    else TFLOP per device / (peak TFLOP/s x assumed MFU)."""

    flops: StepFlops
    peak_tflops_per_chip: float
    mfu: float
    """The MFU (MaxText's FLOP count) the estimate assumes, or, where measured, the one it comes to."""
    mfu_source: str
    generation: str = ""
    measured: MeasuredStepTime | None = None
    recomputed: StepFlops = StepFlops(0.0, 0.0)
    logits: float = 0.0
    """The output head's logits per device per step (tokens x vocabulary)."""

    @property
    def achieved_tflops_per_chip(self) -> float:
        return self.peak_tflops_per_chip * self.mfu

    @property
    def seconds(self) -> float:
        return self.flops.total_tflops / self.achieved_tflops_per_chip

    @property
    def basis(self) -> str:
        """What the figure rests on, in words."""
        if self.measured is None and self.mfu_source == "assumed default":
            return f"an assumed MFU of {self.mfu:.2f}, no {self.generation} chip measured"
        if self.measured is None:
            return f"MFU {self.mfu:.2f}, {self.mfu_source}"
        return (f"measured on a {self.generation} chip, within {self.measured.error:.0%} of {self.measured.runs} "
                "runs there")

    def format(self) -> str:
        if self.measured is None:
            return (
                f"step time (ESTIMATE): {self.seconds:.3f} s = {self.flops.total_tflops:.1f} TFLOP/device "
                f"/ ({self.peak_tflops_per_chip:g} TFLOP/s peak x MFU {self.mfu:.2f}, {self.mfu_source})"
            )
        c, peak = self.measured, self.peak_tflops_per_chip
        weights = self.flops.learnable_weight_tflops + self.recomputed.learnable_weight_tflops
        attention = self.flops.attention_tflops + self.recomputed.attention_tflops
        return (
            f"step time (ESTIMATE, {self.basis}): {self.seconds:.3f} s = {weights:.1f} TFLOP of weight matmuls "
            f"at {c.matmul_share:.0%} of {peak:g} TFLOP/s + {attention:.1f} TFLOP of attention at "
            f"{c.attention_share:.0%} + {self.logits:.3g} logits' loss at {c.seconds_per_logit * 1e9:.3f} ns each "
            f"(of it recomputed under the remat policy: {self.recomputed.total_tflops:.1f} TFLOP)"
        )


def _measured_seconds(c: MeasuredStepTime, peak: float, flops: StepFlops, recomputed: StepFlops, logits: float) -> float:
    weights = flops.learnable_weight_tflops + recomputed.learnable_weight_tflops
    attention = flops.attention_tflops + recomputed.attention_tflops
    return (weights / (peak * c.matmul_share) + attention / (peak * c.attention_share)
            + logits * c.seconds_per_logit)


def estimate_step_time(
    model: str | ModelShape,
    shape: SliceShape,
    per_device_batch_size: float,
    max_target_length: int,
    mfu: float | None = None,
    remat_policy: str = "full",
    tensors_on_device: tuple[str, ...] = (),
) -> StepTimeEstimate:
    """Estimate seconds per training step: from the generation's chip measurements (:data:`MEASURED`, which count
    what ``remat_policy`` recomputes) unless ``mfu`` is given; else at ``mfu``, by default :data:`DEFAULT_MFU`."""
    if not isinstance(shape, SliceShape):
        raise ConfigError("topology", shape, "a SliceShape from tpu_catalogue.slice_shape()")
    m = get_model(model)
    flops = training_tflops_per_device(m, per_device_batch_size, max_target_length)
    peak = shape.generation.peak_bf16_tflops_per_chip
    measured = MEASURED.get(shape.generation.name) if mfu is None else None
    if measured is not None:
        policy = get_remat_policy(remat_policy, on_device=tensors_on_device, decoder_block=m.decoder_block)
        recomputed = recomputed_tflops(m, per_device_batch_size, max_target_length, policy.saves)
        logits = per_device_batch_size * max_target_length * m.vocab_size
        seconds = _measured_seconds(measured, peak, flops, recomputed, logits)
        return StepTimeEstimate(flops=flops, peak_tflops_per_chip=peak, mfu=flops.total_tflops / (seconds * peak),
                                mfu_source=f"measured on {shape.generation.name}", generation=shape.generation.name,
                                measured=measured, recomputed=recomputed, logits=logits)
    if mfu is None:
        mfu, source = DEFAULT_MFU, "assumed default"
    else:
        source = "caller-supplied"
    if isinstance(mfu, bool) or not isinstance(mfu, (int, float)) or not 0 < mfu <= 1:
        raise ConfigError("mfu", mfu, "a fraction in (0, 1]")
    return StepTimeEstimate(flops=flops, peak_tflops_per_chip=peak, mfu=float(mfu), mfu_source=source,
                            generation=shape.generation.name)
