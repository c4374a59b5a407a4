"""Per-chip HBM estimate for MaxText training of a dense Llama-style model.

One model, applied the same way to every configuration (no special cases).
Everything is per chip, in GiB (2**30 bytes; MaxText's "Memstats ... (GB)"
lines are GiB too: Llama 3.1 70B bf16 over 8 v6e chips logs "16.43 / 31.25",
and 70,553,706,496 x 2 B / 8 / 2**30 = 16.43).

Components
----------
1. **Parameters** - ``num_params / (fsdp x tensor)`` in ``weight_dtype``
   (MaxText default ``float32``). MaxText's logical axis rules shard ``embed``
   over fsdp(+fsdp_transpose) and ``mlp``/``heads``/``kv_heads``/``vocab`` over
   tensor; ``data`` replicates (``shard_optimizer_over_data: false``). Norm
   scales (sharded over tensor only) are <0.01% of the weights and are
   treated like the rest.
2. **Gradients** - same count; MaxText ``train.py`` casts float32 gradients to
   ``grad_dtype`` (default ``float32``) and leaves other dtypes alone, so
   gradients are ``grad_dtype`` when weights are float32, else ``weight_dtype``.
   They are all live at once: gradient clipping
   (``gradient_clipping_threshold: 1.0``) needs the global norm before any
   update.
3. **Optimizer state** - ``opt_type: adamw``: ``mu`` in ``mu_dtype`` (empty =
   inherit ``weight_dtype``) and ``nu`` in ``weight_dtype`` (base.yml: "nu_dtype
   is always inherited from weights").
4. **Saved activations** - with ``scan_layers: true`` each decoder layer keeps
   its input (``decoder_layer_input``, the scan carry) plus the named tensors
   its remat policy saves (``MODELLED_REMAT_POLICIES``; names and sets from
   ``get_remat_policy`` in MaxText ``layers/decoders.py``), all in ``dtype``
   (bfloat16). A ``[batch, length, X]`` activation has its batch split over
   data x fsdp (``activation_batch``) and ``X`` split over tensor
   (``activation_embed`` / ``activation_heads`` / ``activation_kv`` /
   ``activation_mlp`` -> tensor), so per chip it holds
   ``per_device_batch_size x max_target_length x X`` elements (x tensor when
   tensor does not divide X; a KV head count it does not divide is refused
   earlier, as MaxText refuses it: ``gke_ray_tpu.core.estimates.mesh.check_kv_head_sharding``).
5. **Transient working set** - the larger of
   (a) the output head: the logits ``[tokens, vocab/tensor]`` and their
   gradient, both bfloat16 (:data:`LOGIT_BYTES`), beside the head's input and
   its gradient whole over tensor (:data:`HEAD_INPUT_COPIES`); and
   (b) one decoder layer during its backward recompute: every tensor of the
   ``none`` policy for one layer and its gradient (:data:`LAYER_BACKWARD_COPIES`),
   plus three bfloat16 copies of one layer's weights gathered over fsdp (current
   layer, prefetched next layer, weight gradient before its reduce-scatter).
   Both happen while all saved activations and the whole optimizer state are
   live, so the peak is their sum with the larger transient.

Limit and verdict
-----------------
The total is compared with the HBM XLA's TPU compiler lets one chip use
(``TpuGeneration.xla_hbm_limit_gib``, measured from the compiler: 31.24 GiB of
a v6e's 32). The model does not itemise XLA's temporaries, padding and
fragmentation, so against XLA's own peak it is off by a factor in
:data:`ESTIMATE_OVER_XLA` (``bench/bench_estimates.py``). The verdict is
"fits" only when even the highest peak that range allows is within the limit,
"does NOT fit" only when even the lowest exceeds it, and otherwise "uncertain":
the compile check (``python -m gke_ray_tpu.stack.preview --section training --compile``)
gives XLA's own answer.

Not modelled (rejected with a ConfigError by ``estimate_hbm_from_config``):
host offload of parameters/optimizer/activations, gradient accumulation,
pipeline/sequence/context/expert parallelism, ZeRO-1 over data, vocab tiling,
quantization, MoE.

This is an estimate; the compile check is XLA's number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.estimates.flops import check_batch_and_length
from gke_ray_tpu.core.estimates.mesh import Mesh, resolve_mesh
from gke_ray_tpu.core.estimates.models import ModelShape, get_model, model_shape
from gke_ray_tpu.core.maxtext import resolved_config
from gke_ray_tpu.core.tpu_catalogue import SliceShape

GIB = 2**30

ESTIMATE_OVER_XLA = (0.83, 1.15)
"""The estimate divided by XLA's peak (or, for a run XLA refuses, by what it says it needs), lowest and
highest, rounded outwards: 0.834 (Llama 3 8B on v5p, batch 4, remat full: 28.29 estimated, 33.90
compiled) to 1.144 (8B on v6e, batch 2, remat minimal: 35.14 against 30.73) over the eleven in-sample
configurations of ``bench/bench_estimates.py`` (8B and 70B, four remat policies, batch 1 to 4, v6e and
v5p; libtpu 0.0.50.1, MaxText 0.2.5). Its held-out configurations (other model families, sequence
lengths, generations) set neither it nor the estimate; the bench prints how they fall. The low end is a
run far below its limit (34 of 96 GiB), where XLA's live set at the peak holds the layers' gradient
accumulators beside the logits; the same 8B's on v6e (22 of 31 GiB) holds the logits without them.
A run unlike those may be off by more."""

LOGIT_BYTES = 2 + 2
"""The bfloat16 logits kept for the loss's backward + their bfloat16 gradient. MaxText casts the logits
to float32 (``cast_logits_to_fp32``), but XLA fuses that cast and the softmax into the loss's reductions
and into the gradient's producer, so no float32 copy is a buffer: in XLA's live set at the peak
(``--xla_dump_to``'s ``*-live-range.txt``) of Llama 3 8B and Qwen 3 0.6B on v6e, the two largest buffers
are ``bf16[batch, length, vocab/tensor]``, from the forward ``dot_general`` and the backward
``convert_element_type``."""

HEAD_INPUT_COPIES = 3
"""``[tokens, d_model]`` bfloat16 buffers beside the logits, whole over tensor (the head's matmul
contracts over ``embed``): two gathered copies of the head's input and its gradient (the 8B's live set
at the peak: two ``all-gather`` results and a backward ``dot_general``, 512 MiB each)."""

LAYER_BACKWARD_COPIES = 2
"""Each recomputed intermediate of the layer in its backward, and the gradient flowing back through it."""

LAYER_WEIGHT_COPIES = 3
"""Gathered bf16 layer weights live at once: current, prefetched next, weight gradient."""

OUTPUT_HEAD = "output head (logits)"
"""The transient's kind when the output head's is the larger."""

DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}

SUPPORTED_OPTIMIZERS = ("adamw",)

# Per-layer activation tensors: name -> (features per token, which dimension tensor splits).
# Names are MaxText checkpoint_name()s where MaxText has one.
_SAVEABLE = (
    "decoder_layer_input",
    "query_proj",
    "key_proj",
    "value_proj",
    "context",
    "out_proj",
    "mlpwi_0",
    "mlpwi_1",
    "mlpwo",
)
_ONLY_WITHOUT_REMAT = (
    "pre_attention_norm",
    "query_rope",
    "key_rope",
    "post_attention_residual",
    "pre_mlp_norm",
    "mlp_activation",
    "mlp_hidden",
)


@dataclass(frozen=True)
class RematPolicy:
    name: str
    saves: tuple[str, ...]
    """Tensors kept per layer besides ``decoder_layer_input``."""
    note: str


_QKV = ("query_proj", "key_proj", "value_proj")
_MINIMAL = _QKV + ("out_proj", "mlpwi_0", "mlpwi_1", "mlpwo")

MODELLED_REMAT_POLICIES: dict[str, RematPolicy] = {
    p.name: p
    for p in (
        RematPolicy("full", (), "MaxText default; nothing saved, whole layer recomputed"),
        RematPolicy("save_out_proj", ("out_proj",), "save_only_these_names(out_proj)"),
        RematPolicy("save_qkv_proj", _QKV, "save_only_these_names(q, k, v projections)"),
        RematPolicy(
            "save_dot_except_mlp", _QKV + ("out_proj",), "q, k, v and attention out projection"
        ),
        RematPolicy(
            "save_dot_except_mlpwi",
            _QKV + ("out_proj", "mlpwo"),
            "as save_dot_except_mlp plus the MLP output projection",
        ),
        RematPolicy(
            "save_dot_with_context_except_mlp",
            _QKV + ("context", "out_proj"),
            "as save_dot_except_mlp plus the attention context",
        ),
        RematPolicy(
            "minimal",
            _MINIMAL,
            "checkpoint_dots_with_no_batch_dims: every weight matmul output",
        ),
        RematPolicy(
            "minimal_with_context", _MINIMAL + ("context",), "minimal plus the attention context"
        ),
        RematPolicy(
            "none",
            _SAVEABLE[1:] + _ONLY_WITHOUT_REMAT,
            "no nn.remat: every intermediate of the layer (approximate list)",
        ),
    )
}


def get_remat_policy(name: str, key: str = "remat_policy") -> RematPolicy:
    try:
        return MODELLED_REMAT_POLICIES[name]
    except (KeyError, TypeError):
        raise ConfigError(
            key,
            name,
            f"one of {', '.join(MODELLED_REMAT_POLICIES)} (offloading policies are not modelled)",
        ) from None


def _dtype_bytes(key: str, value: str) -> int:
    try:
        return DTYPE_BYTES[value]
    except (KeyError, TypeError):
        raise ConfigError(key, value, f"one of {', '.join(DTYPE_BYTES)}") from None


def _layer_tensors(model: ModelShape) -> dict[str, tuple[int, int]]:
    """name -> (features per token, size of the dimension tensor parallelism splits)."""
    d, m = model.d_model, model.mlp_dim
    q, kv = model.num_heads * model.head_dim, model.num_kv_heads * model.head_dim
    heads, kv_heads = model.num_heads, model.num_kv_heads
    tensors = {
        "decoder_layer_input": (d, d),
        "query_proj": (q, heads),
        "key_proj": (kv, kv_heads),
        "value_proj": (kv, kv_heads),
        "context": (q, heads),
        "out_proj": (d, d),
        "mlpwi_0": (m, m),
        "mlpwi_1": (m, m),
        "mlpwo": (d, d),
        "pre_attention_norm": (d, d),
        "query_rope": (q, heads),
        "key_rope": (kv, kv_heads),
        "post_attention_residual": (d, d),
        "pre_mlp_norm": (d, d),
        "mlp_activation": (m, m),
        "mlp_hidden": (m, m),
    }
    if model.num_mlp_activations == 1:
        tensors.pop("mlpwi_1")
    return tensors


def _per_chip_elements(features: int, split_dim: int, tokens_per_batch_shard: float, tp: int) -> float:
    """Elements one chip holds of a [batch, length, features] activation."""
    shards = tp if split_dim % tp == 0 else 1
    return tokens_per_batch_shard * features / shards


@dataclass(frozen=True)
class HbmBreakdown:
    """Estimated per-chip HBM for one training configuration (GiB; an estimate)."""

    model: str
    pod_type: str
    num_slices: int
    mesh: str
    remat_policy: str
    per_device_batch_size: float
    max_target_length: int
    weight_dtype: str
    params_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float
    transient_gib: float
    transient_kind: str
    hbm_gib: float
    usable_gib: float
    """XLA's HBM limit per chip for the generation."""
    params_per_chip: float = field(repr=False)

    @property
    def total_gib(self) -> float:
        return (
            self.params_gib
            + self.gradients_gib
            + self.optimizer_gib
            + self.activations_gib
            + self.transient_gib
        )

    @property
    def margin_gib(self) -> float:
        """Usable HBM left over (negative when it does not fit)."""
        return self.usable_gib - self.total_gib

    @property
    def xla_range_gib(self) -> tuple[float, float]:
        """Where XLA's peak may lie, given the estimate's measured error."""
        low, high = ESTIMATE_OVER_XLA
        return self.total_gib / high, self.total_gib / low

    @property
    def fits(self) -> bool:
        """Fits even if XLA needs as much more as the estimate has been seen to miss."""
        return self.xla_range_gib[1] <= self.usable_gib

    @property
    def does_not_fit(self) -> bool:
        """Does not fit even if XLA needs as much less as the estimate has been seen to overshoot."""
        return self.xla_range_gib[0] > self.usable_gib

    @property
    def verdict(self) -> str:
        if self.fits:
            return "fits"
        return "does NOT fit" if self.does_not_fit else "uncertain: run the compile check"

    def rows(self) -> list[tuple[str, float]]:
        return [
            (f"parameters ({self.weight_dtype})", self.params_gib),
            ("gradients", self.gradients_gib),
            ("optimizer state (adamw mu, nu)", self.optimizer_gib),
            (f"saved activations (remat {self.remat_policy})", self.activations_gib),
            (f"transient: {self.transient_kind}", self.transient_gib),
        ]

    def format(self) -> str:
        title = (
            f"HBM per chip (ESTIMATE): {self.model} on {self.num_slices} x {self.pod_type} "
            f"[{self.mesh}], per_device_batch_size={self.per_device_batch_size:g}, "
            f"max_target_length={self.max_target_length}"
        )
        width = max(len(label) for label, _ in self.rows()) + 2
        lines = [title]
        for label, gib in self.rows():
            lines.append(f"  {label:<{width}}{size_text(gib)}")
        lines.append(f"  {'total':<{width}}{size_text(self.total_gib)}")
        lines.append(
            f"  {'usable HBM':<{width}}{self.usable_gib:>8.2f} GiB"
            f"  (XLA's limit of a {self.hbm_gib:g} GiB chip)"
        )
        low, high = self.xla_range_gib
        likely = f"{low:.2f}-{high:.2f} GiB" if high >= 0.01 else f"{low * 1024:.2f}-{high * 1024:.2f} MiB"
        lines.append(f"  verdict: {self.verdict} (margin {self.margin_gib:+.2f} GiB; XLA's peak likely {likely})")
        return "\n".join(lines)


def size_text(gib: float) -> str:
    """GiB to two places, or MiB below 0.01 GiB: a small model's figures would all read 0.00 GiB."""
    return f"{gib:>8.2f} GiB" if gib >= 0.01 else f"{gib * 1024:>8.2f} MiB"


def estimate_hbm(
    model: str | ModelShape,
    shape: SliceShape,
    num_slices: int,
    parallelism: Mapping[str, object],
    per_device_batch_size: float,
    max_target_length: int,
    remat_policy: str = "full",
    *,
    weight_dtype: str = "float32",
    dtype: str = "bfloat16",
    grad_dtype: str = "float32",
    mu_dtype: str = "",
    opt_type: str = "adamw",
) -> HbmBreakdown:
    """Estimate per-chip HBM; keyword defaults are MaxText's base.yml defaults."""
    m = get_model(model)
    if not isinstance(shape, SliceShape):
        raise ConfigError("topology", shape, "a SliceShape from tpu_catalogue.slice_shape()")
    mesh: Mesh = resolve_mesh(parallelism, shape.chips, num_slices)
    policy = get_remat_policy(remat_policy)
    check_batch_and_length(per_device_batch_size, max_target_length)
    if opt_type not in SUPPORTED_OPTIMIZERS:
        raise ConfigError("opt_type", opt_type, f"one of {', '.join(SUPPORTED_OPTIMIZERS)}")
    w_bytes = _dtype_bytes("weight_dtype", weight_dtype)
    act_bytes = _dtype_bytes("dtype", dtype)
    g_bytes = _dtype_bytes("grad_dtype", grad_dtype) if weight_dtype == "float32" else w_bytes
    mu_bytes = _dtype_bytes("mu_dtype", mu_dtype) if mu_dtype else w_bytes

    params_per_chip = m.num_params / mesh.param_shards
    tp = mesh.tensor
    # tokens held by one batch shard: global batch (pdbs x devices) / (data x fsdp) x length
    tokens = per_device_batch_size * mesh.devices / mesh.batch_shards * max_target_length
    tensors = _layer_tensors(m)

    def layer_bytes(names) -> float:
        return sum(
            _per_chip_elements(*tensors[n], tokens, tp) for n in names if n in tensors
        ) * act_bytes

    saved_per_layer = layer_bytes(("decoder_layer_input",) + policy.saves)
    activations = m.num_layers * saved_per_layer

    head = (
        _per_chip_elements(m.vocab_size, m.vocab_size, tokens, tp) * LOGIT_BYTES
        + tokens * m.d_model * act_bytes * HEAD_INPUT_COPIES
    )
    layer_weights = m.params_per_layer / tp * act_bytes
    layer = LAYER_BACKWARD_COPIES * layer_bytes(tensors) + LAYER_WEIGHT_COPIES * layer_weights
    transient, kind = (head, OUTPUT_HEAD) if head >= layer else (layer, "one decoder layer")

    return HbmBreakdown(
        model=m.name,
        pod_type=shape.pod_type,
        num_slices=num_slices,
        mesh=mesh.describe(),
        remat_policy=policy.name,
        per_device_batch_size=per_device_batch_size,
        max_target_length=max_target_length,
        weight_dtype=weight_dtype,
        params_gib=params_per_chip * w_bytes / GIB,
        gradients_gib=params_per_chip * g_bytes / GIB,
        optimizer_gib=params_per_chip * (mu_bytes + w_bytes) / GIB,
        activations_gib=activations / GIB,
        transient_gib=transient / GIB,
        transient_kind=kind,
        hbm_gib=shape.generation.hbm_gib_per_chip,
        usable_gib=shape.generation.xla_hbm_limit_gib_per_chip,
        params_per_chip=params_per_chip,
    )


_MUST_STAY_DEFAULT: dict[str, object] = {
    "optimizer_memory_host_offload": False,
    "parameter_memory_host_offload": False,
    "gradient_accumulation_steps": 1,
    "shard_optimizer_over_data": False,
    "num_vocab_tiling": 1,
    "quantization": "",
    "scan_layers": True,
}
"""Keys that change memory in ways the estimate does not model."""


def estimate_hbm_from_config(
    config: Mapping[str, object], shape: SliceShape, num_slices: int
) -> HbmBreakdown:
    """Estimate from a MaxText-style key/value mapping (a training preset's argv keys).

    Unset keys take the value MaxText would: the model's overlay, then ``base.yml``.
    """
    model = model_shape(config)  # NoEstimate without MaxText: the shape and the defaults come from its configs
    values = resolved_config(config)
    for key, default in _MUST_STAY_DEFAULT.items():
        if values[key] != default:
            raise ConfigError(key, values[key], f"{default!r}: the HBM estimate does not model it")
    return estimate_hbm(
        model,
        shape,
        num_slices,
        config,
        values["per_device_batch_size"],  # type: ignore[arg-type]
        values["max_target_length"],  # type: ignore[arg-type]
        values["remat_policy"],  # type: ignore[arg-type]
        weight_dtype=values["weight_dtype"],  # type: ignore[arg-type]
        dtype=values["dtype"],  # type: ignore[arg-type]
        grad_dtype=values["grad_dtype"],  # type: ignore[arg-type]
        mu_dtype=values["mu_dtype"],  # type: ignore[arg-type]
        opt_type=values["opt_type"],  # type: ignore[arg-type]
    )
