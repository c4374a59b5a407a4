"""Per-chip HBM estimate for MaxText training of a dense decoder (:mod:`gke_ray_tpu.core.models`).

One model, applied the same way to every configuration; where XLA's TPU compiler lays out a step differently
for a decoder block or a generation, a named constant says so and why (:data:`PER_LAYER_REMAT`,
:data:`FORWARD_LOGITS_ONLY`, :data:`UNROLLED_BLOCK_LOOP`).
Everything is per chip, in GiB (2**30 bytes; MaxText's "Memstats ... (GB)"
lines are GiB too: Llama 3.1 70B bf16 over 8 v6e chips logs "16.43 / 31.25",
and 70,553,706,496 x 2 B / 8 / 2**30 = 16.43). On tpu7x, whose TensorCores are
JAX's devices, per device times two.

Components
----------
1. **Parameters** - each weight's elements over the shards MaxText's logical
   axis rules split it into on the run's mesh (``embed`` over fsdp, ``mlp``,
   heads and ``vocab`` over tensor, a norm scale over tensor only, Llama 2's
   over fsdp; ``data`` replicates: ``shard_optimizer_over_data: false``), in
   ``weight_dtype`` (MaxText default ``float32``).
2. **Gradients** - same count; MaxText ``train.py`` casts float32 gradients to
   ``grad_dtype`` (default ``float32``) and leaves other dtypes alone, so
   gradients are ``grad_dtype`` when weights are float32, else ``weight_dtype``.
   They are all live at once: gradient clipping
   (``gradient_clipping_threshold: 1.0``) needs the global norm before any
   update.
3. **Optimizer state** - ``adamw``: ``mu`` in ``mu_dtype`` (empty = inherit
   ``weight_dtype``) and ``nu`` in ``weight_dtype`` (base.yml: "nu_dtype is
   always inherited from weights"); ``adam_pax`` (GPT-3's): both like the
   weights; ``sgd``: none.
4. **Saved activations** - with ``scan_layers: true`` each remat unit
   (:func:`remat_units`: one scanned step, which is one layer for Llama, two for
   Gemma 2, four for OLMo 3, six for Gemma 3; each layer for Gemma 4, which
   rematerialises its layers itself; Gemma 3's unscanned remainder) keeps its
   input (``decoder_layer_input``, the scan carry) plus the named tensors its
   remat policy saves of each of its layers (``MODELLED_REMAT_POLICIES``; names
   and sets from ``get_remat_policy`` in MaxText ``layers/nnx_decoders.py``) that
   the backward reads (:func:`kept_by_backward`), all in ``dtype`` (bfloat16).
   A ``[batch, length, X]`` activation has its batch
   split over data x fsdp (``activation_batch``) and ``X`` split over tensor
   (``activation_embed`` / ``activation_heads`` / ``activation_kv`` /
   ``activation_mlp`` -> tensor), so per chip it holds ``per_device_batch_size
   x max_target_length x X`` elements (x tensor when tensor does not divide X;
   a mesh that does not divide a weight is refused earlier, as MaxText or JAX
   refuses it: :func:`gke_ray_tpu.core.sharding.check_sharding`).
5. **Transient working set** - the larger of (on v5e, (a) alone:
   :data:`FORWARD_LOGITS_ONLY`)
   (a) the output head: the logits ``[tokens, vocab/tensor]`` and their
   gradient, both bfloat16 (:data:`LOGIT_BYTES`; one buffer on v5e,
   :data:`FORWARD_LOGITS_ONLY`, and on v6e where the vocabulary is unsplit,
   :data:`GRADIENT_OVER_LOGITS`, beside the larger of the rest of (a) and the
   first layer's recompute, before its gradients: :meth:`_Activations.first_recompute`;
   with a tied head and the vocabulary unsplit, under ``full``, the stacked unit inputs once
   more: :data:`SAVED_INPUTS_AGAIN`), beside the head's input
   and its gradient whole over tensor (:data:`HEAD_INPUT_COPIES`), the head's
   weight gathered over fsdp (:data:`HEAD_WEIGHT_COPIES`), and beside the
   backward of the last remat unit, which starts while the logits are live and,
   for a unit of several layers, keeps the weight matmuls' outputs of every
   other layer of the unit while it goes back through one (:data:`RECOMPUTED`);
   where MaxText unrolls the loop over scanned steps (Gemma 4), less the layers'
   gradients, which do not exist yet (:data:`UNROLLED_BLOCK_LOOP`); and (b) one
   decoder layer during its backward recompute: every tensor of the ``none``
   policy for one layer and its gradient (:data:`LAYER_BACKWARD_COPIES`),
   the other layers of its unit as in (a), plus the unit's weights in
   bfloat16 gathered over fsdp (:data:`LAYER_WEIGHT_COPIES`). Both happen while all saved
   activations and the whole optimizer state are live, and beside a bfloat16
   copy of all the layers' weights (:data:`LAYER_WEIGHTS_HELD`; none for Gemma 1
   and 2 with bfloat16 weights, :data:`WEIGHTS_READ_IN_PLACE`), so the peak is
   their sum with the larger transient and that copy.

Limit and verdict
-----------------
The total is compared with the HBM XLA's TPU compiler lets one chip use
(``TpuGeneration.xla_hbm_limit_gib``, measured from the compiler: 31.24 GiB of
a v6e's 32). The model does not itemise XLA's temporaries, padding and
fragmentation, nor how many buffers XLA's scheduler keeps live to overlap communication (more the more
HBM is free), so against XLA's own peak it is off by a factor in :data:`ESTIMATE_OVER_XLA`
(``bench/bench_estimates.py``, ``bench/bench_preflight_grid.py``, ``bench/bench_xla_need.py``).
The verdict is "fits" only when even the highest peak that range allows is
within the limit, "does NOT fit" only when even the lowest exceeds it, and
otherwise "uncertain": the compile check (``python -m gke_ray_tpu.stack.preview
--section training --compile``) gives XLA's own answer.

Evidence
--------
The buffers the terms' docstrings cite were read, until the compile check read live sets by storage
(:mod:`gke_ray_tpu.preflight.xla_live_set`), from XLA's own list of what is live "at the peak", which is another
step than the peak and counts a value written over another twice. Read at the peak
(``bench/bench_live_sets.py``), XLA holds one of two sets: at the output head, before any layer's gradient
exists, or in the first layer's backward, with the layers' gradients, the forward's logits and that layer's
recompute. The terms below count the gradients, two logits buffers (one on v5e, and on v6e with the vocabulary
unsplit) and the larger of the head's
and one layer's working set in every run, so their items are not XLA's even where their sum is (the
tutorial's 8B: 21.86 against 21.84, with one logits buffer at XLA's peak); the live sets' notes
(``bench/recorded.py --bench bench_live_sets --notes``) say which citations hold at the peak.

Not modelled (rejected with a ConfigError by ``estimate_hbm_from_config``):
host offload of parameters/optimizer state, gradient accumulation,
pipeline/sequence/context/expert parallelism, ZeRO-1 over data, vocab tiling,
quantization, MoE.

This is an estimate; the compile check is XLA's number.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.preflight.mesh import Mesh, resolve_mesh
from gke_ray_tpu.core.models import Layer, ModelShape, layer_weights, get_model, model_shape
from gke_ray_tpu.core.sharding import logical_to_mesh, run_mesh
from gke_ray_tpu.core.maxtext import check_settings, resolved_config
from gke_ray_tpu.core.tpu_catalogue import SliceShape

GIB = 2**30


def check_batch_and_length(per_device_batch_size: object, max_target_length: object) -> None:
    """The two MaxText batch keys every estimate reads, under MaxText's own rules."""
    check_settings({"per_device_batch_size": per_device_batch_size, "max_target_length": max_target_length})


ESTIMATE_OVER_XLA = (0.68, 1.67)
"""The estimate divided by XLA's peak (or, for a run XLA refuses, by what it says it needs), lowest and
highest, rounded outwards, over every run compiled to derive or to test the estimate, with XLA's own
scheduler (no flags; the pods' flags leave the peak alone): 0.687 (Gemma 3 4B on 2 x v5e-16, pdbs 2, 2,048
tokens: 10.84 GiB, where XLA keeps the unscanned layers' backward buffers beside the scanned layers' and the
logits) to 1.666 (Gemma 2 2B on 2 x v6e-16, pdbs 10: 48.88 estimated, XLA fits it at 29.35). The
estimate's terms come from live sets far below the limit, so it overstates most near it, where the verdict
is decided: the tutorial's 8B is 1.001 at pdbs 4 and 1.448 at pdbs 10 (``bench/bench_xla_need.py``). The runs
are those of ``bench/bench_estimates.py``, ``bench/bench_preflight_grid.py`` and ``bench/bench_xla_need.py`` whose
XLA answers ``bench/data/xla.yaml`` records (libtpu 0.0.50.1, MaxText 0.2.5); ``tests/test_bench_data.py`` holds
the band to their span. A run unlike those may be off by more."""

LOGIT_BYTES = 2 + 2
"""The bfloat16 logits kept for the loss's backward + their bfloat16 gradient. MaxText casts the logits to float32
(``cast_logits_to_fp32``), but XLA fuses that cast and the softmax into the loss's reductions and into the
gradient's producer, so no float32 copy is a buffer: in XLA's list of what is live at its peak (``--xla_dump_to``'s
``*-live-range.txt``) of Llama 3 8B, Qwen 3 0.6B, Gemma 2 9B, Gemma 3 4B (tensor 4) and OLMo 3 7B (tensor 2) the
two largest buffers are ``bf16[batch, length, vocab/tensor]``, from the forward ``dot_general`` and the backward
``convert_element_type`` (or ``div``, soft-capped). At the peak itself Qwen 3 0.6B and Gemma 2 9B hold both, at
the output head; the 8B and OLMo 3 7B the forward's alone, in the first layer's backward; Gemma 3 4B none, in its
unscanned layers' backward."""

FORWARD_LOGIT_BYTES = 2
"""The bfloat16 logits of the forward, alone: where XLA keeps no gradient beside them (:data:`FORWARD_LOGITS_ONLY`)."""

FORWARD_LOGITS_ONLY = ("v5e",)
"""Generations whose compiler keeps one logits buffer, the forward ``dot_general``'s, with no gradient beside it,
and keeps it into the layers' backward: there the head's transient is those logits beside the larger of the head's
other buffers and the first layer's recompute, before its gradients (:meth:`_Activations.first_recompute`). The
same program (Qwen 3 0.6B, 2 slices, fsdp 4 x tensor 4, pdbs 8, 2,048 tokens) peaks at 11.56 GiB on 2 x v6e-16
with two ``bf16[32,2048,37984]`` buffers (the forward's and the backward ``convert_element_type``'s) and at 7.45
GiB on 2 x v5e-16 with one, far below v5e's 15.75 GiB limit, so the compiler's choice, not memory pressure (at the
peak itself too); at 4,096 tokens 22.37 against 14.50.
Every v5e compile read holds the forward's buffer alone: Qwen 3 0.6B and 1.7B and Gemma 2 2B beside the first
recomputed layer's ``[tokens, d_model]`` and ``[tokens, mlp/tensor]`` buffers, Qwen 2.5 1.5B (fsdp 16) beside
two of the head's weight gradient, ``bf16[151936,1536]``.
That is the whole transient on these generations: the logits stay live through the layers' backward, where a
layer holds its recomputed tensors about once, not each beside its gradient, so the layer term
(:data:`LAYER_BACKWARD_COPIES`) is not used. At XLA's peak of five runs with the slice all on fsdp on 2 x v5e-16
(read 2026-12-05), in a layer's backward with the stacked gradients and the forward's logits live: Mistral 7B with
bfloat16 weights, pdbs 2, 8,192 tokens, three ``bf16[2,8192,14336]`` (its two MLP inputs recomputed and one
gradient, where the term counts eight such tensors) and nine ``[2,8192,4096]`` beside ``bf16[2,8192,32000]``;
Llama 2 13B (three ``[1,2048,13824]``), Llama 2 7B, GPT-3 6B (its one MLP input and its gradient) and OLMo 3 7B
(its four-layer unit's recompute) alike. The layer term put them at 1.02 to 1.19 of XLA's peak (0.91 to 1.01
without it)."""

GRADIENT_OVER_LOGITS = ("v6e",)
"""Generations whose compiler writes the logits' gradient over the logits where tensor parallelism does not split
the vocabulary (the slice all on fsdp, or a vocabulary tensor does not divide), so one bfloat16 buffer
(:data:`FORWARD_LOGIT_BYTES`) holds both; a soft-capped head (Gemma 2) keeps two. At XLA's peak on 2 x v6e-16 with
fsdp 16, read 2026-12-05, one ``[batch, length, vocab]`` buffer each: Gemma 2B (pdbs 8, ``bf16[8,2048,256128]``),
Qwen 3 0.6B (pdbs 8) and 1.7B (pdbs 4), Qwen 2.5 7B (pdbs 4, ``bf16[4,2048,152064]``), OLMo 3 32B and Gemma 3 27B
(both peaking in a layer's backward); beside it, as on v5e, the first layer's recompute (Qwen 3 0.6B: four
``bf16[8,4096,3072]``, its MLP's). On v5p the same split keeps two: Qwen 3 8B and Gemma 2 2B with fsdp 8 (the
forward ``dot_general`` and the backward ``convert_element_type`` or ``div``); the generations not read count two,
the count that does not understate."""

SAVED_INPUTS_AGAIN = 1
"""Copies of the stacked remat-unit inputs (the scan's carry, ``[units, batch, length, d_model]``) the output head
holds beside the saved ones where the head is the token embedding (tied) and the vocabulary unsplit, outside v5e.
XLA's peaks hold two ``jvp()/while`` buffers of that shape there: Gemma 2B, Qwen 3 0.6B and 1.7B with fsdp 16 on
v6e (``bf16[28,8,4096,1024]`` twice for Qwen 3 0.6B), Gemma 2 2B with fsdp 8 on v5p (``bf16[13,8,2048,2304]``
twice); one where the head is untied (Qwen 2.5 7B with fsdp 16 on v6e, Qwen 3 8B with fsdp 8 on v5p), one where the
vocabulary is split over tensor (Qwen 3 0.6B and Gemma 2 2B with tensor 4 on v6e) and one on v5e (Gemma 2B with
fsdp 16), whose head holds only the forward's logits (:data:`FORWARD_LOGITS_ONLY`). The second is a ``copy`` of the
scan's one output where the remat policy saves nothing else (``full``); where it saves more (the scan outputs a
tuple) no compile read holds one: Gemma 7B with bfloat16 weights under ``save_dot_except_mlp`` and Qwen 2.5 1.5B
under ``save_out_proj`` with fsdp 16 on v6e (``bf16[28,2,8192,3072]`` and ``[28,4,8192,1536]`` once each, beside
the policy's stacked outputs), Qwen 3 4B and GPT-3 6B under ``save_out_proj`` on tpu7x, Gemma 2 27B under
``save_qkv_proj`` on v5p, Gemma 2 2B under ``minimal`` on tpu7x; counting it put the first two at 1.132 and 1.124 of
XLA's peak."""

HEAD_WEIGHT_COPIES = 1
"""The output head's weight (the token embedding, tied, or ``logits_dense``) gathered over fsdp in bfloat16,
split over tensor, beside the logits: ``bf16[4096,32064]`` for Llama 3 8B, ``bf16[65536,2560]`` for Gemma 3 4B,
``bf16[256128,2048]`` for Gemma 2B on fsdp 16, ``bf16[4096,50139]`` for OLMo 3 7B on tensor 2 (Gemma 2 9B holds its
gradient too), in XLA's list. At the peak the 8B holds the weight's gradient alone, Gemma 3 4B and Gemma 2 9B the
gathered weight and its gradient, OLMo 3 7B neither."""

HEAD_INPUT_COPIES = 3
"""``[tokens, d_model]`` bfloat16 buffers beside the logits, whole over tensor (the head's matmul
contracts over ``embed``): two gathered copies of the head's input and its gradient (the 8B's, 512 MiB each, in
XLA's list at a step before the layers' backward; at its peak three such gathers are the first layer's recompute's)."""

LAYER_BACKWARD_COPIES = 2
"""Each recomputed intermediate of the layer in its backward, and the gradient flowing back through it (not on
v5e: :data:`FORWARD_LOGITS_ONLY`)."""

LAYER_WEIGHT_COPIES = 1
"""Copies of the remat unit's weights in bfloat16, gathered over fsdp and split over tensor, beside the backward of
one of its layers: the unit's backward recomputes its forward, which reads every layer of the unit. At XLA's peak
(read by storage, 2026-12-05) the bfloat16 buffers shaped as a layer's weights outside the train state add up to
0 to 1.86 times the unit's weights in the 32 compiles read, about once in most: GPT-3 6B with its slice all on
fsdp on v5e (``bf16[1,3072,12288]`` and the rest of one layer) 1.12, Qwen 3 8B on v5p 1.00, the bfloat16 70B on
v6e 0.84, Gemma 2 9B (two layers a unit) 1.00 on v6e and 1.76 on v5p, OLMo 3 32B with fsdp 16 (four a unit: 24
``bf16[1,5120,27648]`` MLP weights) 1.86, OLMo 3 7B on v5p 0.66, Llama 3 8B on v6e 0.48, Gemma 3 4B on v5e 0.12
(the v5e runs' transient is the head's, which leaves the weights out: :data:`FORWARD_LOGITS_ONLY`). The term
counted three of one layer (the current one, the next prefetched and the weight gradient), which no live set at
the peak holds; where a unit is one layer it is now that layer's weights once."""

OUTPUT_HEAD = "output head (logits)"
"""The transient's kind when the output head's is the larger."""

DTYPE_BYTES: dict[str, int] = {"float32": 4, "bfloat16": 2, "float16": 2}

OPTIMIZER_STATES = {"adamw": 2, "adam_pax": 2, "sgd": 0}
"""Per-weight state tensors of each optimizer MaxText's ``get_optimizer`` builds: AdamW's and pax Adam's ``mu`` and
``nu`` (``optimizers.adam_pax``: both ``zeros_like`` the weights), plain SGD none (``optax.sgd``, no momentum)."""
SUPPORTED_OPTIMIZERS = tuple(OPTIMIZER_STATES)

# A layer's activation tensors, by MaxText's checkpoint_name() where it has one, and what else its backward
# holds without remat. Each is [batch, length, features]; which features: :func:`_layer_tensors`.
_QKV = ("query_proj", "key_proj", "value_proj", "kv_proj", "qkv_proj")
_MINIMAL = _QKV + ("out_proj", "mlpwi_0", "mlpwi_1", "mlpwi", "mlpwo")
RECOMPUTED = _MINIMAL + ("context", "query_rope", "key_rope")
"""What the backward of a remat unit of several layers keeps of each layer it is not going back through: the
outputs of the layer's weight matmuls (the names ``minimal`` saves) and the attention's query and key after RoPE
and its context, in the heads' layout the attention kernel takes. XLA's lists of what is live at its peak (2 x
v6e-16 or v5p-16, ``bench/bench_preflight_grid.py --group in-sample``): Gemma 2 9B (two layers a unit) holds 1.03
GiB of the scanned backward's buffers beside the logits where Llama 3 8B (one) holds 0.35; OLMo 3 7B (four a unit)
6.43 GiB: nine ``bf16[8,4096,5504]`` MLP inputs, twelve ``bf16[8,16,4096,128]`` queries, keys and contexts, nine
``[8,4096,2048]``; Gemma 3 4B's unscanned remainder (four layers), 3.55 GiB of its checkpointed recompute. At the
peak itself Gemma 2 9B holds the same 1.03 GiB, the 8B 3.50 (its peak is in the first layer's backward) and OLMo
3 7B 8.39 (fourteen, twelve and fifteen)."""
NO_REMAT = _MINIMAL + ("context",) + (
    "pre_attention_norm",
    "query_rope",
    "key_rope",
    "post_attention_residual",
    "pre_mlp_norm",
    "mlp_activation",
    "mlp_hidden",
)
"""What a layer keeps where MaxText does not rematerialise it at all: every intermediate (an approximate list).
Only Gemma 4 under ``none`` (:func:`get_remat_policy`)."""


@dataclass(frozen=True)
class RematPolicy:
    name: str
    saves: tuple[str, ...]
    """Tensors kept on the device per layer besides the remat unit's input (offloaded ones live on the host)."""
    note: str


MODELLED_REMAT_POLICIES: dict[str, RematPolicy] = {
    p.name: p
    for p in (
        RematPolicy("full", (), "MaxText default; nothing saved, whole layer recomputed"),
        RematPolicy("save_out_proj", ("out_proj",), "save_only_these_names(out_proj)"),
        RematPolicy("save_qkv_proj", _QKV, "save_only_these_names(q, k, v projections)"),
        RematPolicy("save_dot_except_mlp", _QKV + ("out_proj",), "q, k, v and attention out projection"),
        RematPolicy("save_dot_except_mlpwi", _QKV + ("out_proj", "mlpwo"),
                    "as save_dot_except_mlp plus the MLP output projection"),
        RematPolicy("save_dot_with_context_except_mlp", _QKV + ("context", "out_proj"),
                    "as save_dot_except_mlp plus the attention context"),
        RematPolicy("minimal", _MINIMAL, "every weight matmul output"),
        RematPolicy("minimal_with_quantization", _MINIMAL, "minimal (no quantization tensors: quantization is off)"),
        RematPolicy("minimal_with_context", _MINIMAL + ("context",), "minimal plus the attention context"),
        RematPolicy("minimal_flash", _MINIMAL + ("context",), "MaxText's old name of minimal_with_context"),
        RematPolicy("minimal_with_context_and_quantization", _MINIMAL + ("context",), "minimal_with_context"),
        RematPolicy("qkv_proj_offloaded", (), "q, k and v offloaded to host memory: nothing more on the device"),
        RematPolicy("minimal_offloaded", (), "minimal's tensors offloaded to host memory: nothing more on the device"),
        RematPolicy("custom", (), "the run's tensors_on_device saved, tensors_to_offload on the host"),
        RematPolicy("none", (), "full remat: MaxText wraps the scanned layers in jax.checkpoint with policy None"),
    )
}
"""Every policy MaxText's ``get_remat_policy`` (``layers/nnx_decoders.py``) accepts, by the names it saves.

``none`` is not "no remat" where the estimate applies (``scan_layers: true``): ``get_remat_policy`` returns
``None`` for it as for ``full``, and ``_apply_layers_sequentially`` wraps the scanned layers in
``jax.checkpoint(layer_fn, policy=None)``, JAX's full rematerialisation (Gemma 3's unscanned remainder likewise);
only the unscanned loops (``scan_layers: false``) and Gemma 4's blocks test for ``"none"`` and skip the
checkpoint. On the chip Qwen 3 0.6B used the same HBM, loss and step time under both (``bench/bench_chip.py``)."""


def get_remat_policy(
    name: str, key: str = "remat_policy", on_device: Sequence[str] = (), decoder_block: str = ""
) -> RematPolicy:
    """The policy ``name``; ``custom`` saves ``on_device`` (the run's ``tensors_on_device``); ``none`` saves every
    intermediate where the decoder block rematerialises its own layers and skips that under ``none``
    (:data:`PER_LAYER_REMAT`: ``Gemma4ScannableBlock._remat_enabled``), and nothing elsewhere."""
    try:
        policy = MODELLED_REMAT_POLICIES[name]
    except (KeyError, TypeError):
        raise ConfigError(key, name, f"one of {', '.join(MODELLED_REMAT_POLICIES)}") from None
    if name == "custom":
        return replace(policy, saves=tuple(on_device))
    if name == "none" and decoder_block in PER_LAYER_REMAT:
        return replace(policy, saves=NO_REMAT, note="no remat: the block's own per-layer remat is off under none")
    return policy


def kept_by_backward(layer: Layer, saves: Sequence[str]) -> tuple[str, ...]:
    """What of the tensors a policy saves the backward reads, and so what JAX keeps. Two named outputs only feed
    operations whose backward needs no value of them:

    - ``mlpwo``, the MLP's output, where only the residual add takes it (a norm reads it only in Gemma 2, 3 and
      4 and OLMo 3: :attr:`Layer.mlp_output_normed`). XLA's lists of what is live at its peak of Llama 3 8B
      under ``minimal`` (2 x v6e-16, pdbs 2) and Llama 3.1 8B under ``save_dot_except_mlpwi`` (pdbs 1, 8,192
      tokens) hold two stacked ``bf16[32, batch, length, 1024]`` buffers, the layers' inputs and ``out_proj``,
      where the policy names three (the 8B's peak itself too).
    - GPT-3's fused ``qkv_proj``, where the query, key and value split from it are kept: only the split reads
      it. GPT-3 6B under ``save_dot_except_mlp`` (2 x v5p-16, pdbs 4) holds stacked queries, keys and values
      (``bf16[48,16,1024,3,256]`` each) and no stacked ``[..., 2304]`` projection.
    """
    split = {"query_proj", "key_proj", "value_proj"} <= set(saves)
    return tuple(name for name in saves
                 if not (name == "mlpwo" and not layer.mlp_output_normed) and not (name == "qkv_proj" and split))


def _dtype_bytes(key: str, value: str) -> int:
    try:
        return DTYPE_BYTES[value]
    except (KeyError, TypeError):
        raise ConfigError(key, value, f"one of {', '.join(DTYPE_BYTES)}") from None


def _layer_tensors(layer: Layer, d: int) -> dict[str, tuple[int, int]]:
    """One layer's activations: name -> (features per token, the size of the dimension tensor parallelism splits)."""
    a, m = layer.attention, layer.mlp_dim
    q, kv, heads, kv_heads = a.q_features, a.kv_features, a.heads, a.kv_heads
    tensors = {
        "decoder_layer_input": (d, d),
        "query_proj": (q, heads),
        "key_proj": (kv, kv_heads),
        "context": (q, heads),
        "out_proj": (d, d),
        "mlpwo": (d, d),
        "pre_attention_norm": (d, d),
        "query_rope": (q, heads),
        "key_rope": (kv, kv_heads),
        "post_attention_residual": (d, d),
        "pre_mlp_norm": (d, d),
        "mlp_activation": (m, m),
        "mlp_hidden": (m, m),
    }
    if a.kv != "shared":
        tensors["value_proj"] = (kv, kv_heads)
    if a.kv == "fused":
        tensors["qkv_proj"] = (q + 2 * kv, heads)
    inputs = ["mlpwi"] if layer.mlp_activations == 1 else [f"mlpwi_{i}" for i in range(layer.mlp_activations)]
    tensors.update({name: (m, m) for name in inputs})
    return tensors


def _per_chip_elements(features: int, split_dim: int, tokens_per_batch_shard: float, tp: int) -> float:
    """Elements one chip holds of a [batch, length, features] activation."""
    shards = tp if split_dim % tp == 0 else 1
    return tokens_per_batch_shard * features / shards


@dataclass(frozen=True)
class RematUnit:
    """Layers MaxText rematerialises as one: their input is saved, the rest recomputed in the backward."""

    layers: tuple[Layer, ...]
    count: int
    """How many such units the model runs."""


def remat_units(model: ModelShape) -> list[RematUnit]:
    """The model's remat units in forward order: one per scanned step of a block (its input is the scan's carry),
    one per layer where the block rematerialises each of its layers itself (Gemma 4), and an unscanned block
    (Gemma 3's remainder) as one."""
    units = []
    for block in model.blocks:
        layers = tuple(layer for layer in block.layers for _ in range(layer.stacked))
        if model.decoder_block in PER_LAYER_REMAT:
            units += [RematUnit((layer,), block.repeats) for layer in layers]
        else:
            units.append(RematUnit(layers, block.repeats))
    return units


PER_LAYER_REMAT = ("gemma4",)
"""Decoder blocks whose scanned step rematerialises each of its layers (``Gemma4ScannableBlock``'s
``apply_internal_remat``), not the step as one."""

UNROLLED_BLOCK_LOOP = ("gemma4",)
"""Decoder blocks whose loop over scanned steps MaxText unrolls (``_apply_gemma4_scanned_blocks`` in
``layers/nnx_decoders.py``: ``unroll=max(1, scan_length)``), so XLA's program has one inner loop per step and no loop
over the steps. Read at XLA's peaks of Gemma 4 31B on 2 slices (2026-12-05), all four at the output head, with ten
``jvp()/eval_jaxpr/while`` loops:

- no layer gradient: no buffer stacks the steps' weight gradients before the first step's backward, each step's
  are made by its own, so the head's transient is less the layers' gradients (v6e, bfloat16 weights, pdbs 1 under
  ``full`` and ``save_qkv_proj``; v5p, pdbs 2, 2,048 tokens; tpu7x with fsdp 16, pdbs 2, 8,192 tokens,
  ``save_dot_except_mlp``);
- no second copy of the stacked unit inputs (:data:`SAVED_INPUTS_AGAIN`): on tpu7x, beside the
  ``[2,8192,262144]`` logits' gradient, each loop's ``[5,2,8192,5376]`` inputs once;
- under a policy that saves nothing (``full``), each step's first local layer's weights gathered over fsdp and
  split over tensor: thirty ``bf16[1,5376,1,5376]`` MLP weights and the attention's (2.6 GiB on v5p, 2.4 on v6e),
  none under ``save_qkv_proj`` on v6e or ``save_dot_except_mlp`` on tpu7x."""

LAYER_WEIGHTS_HELD = 1
"""bfloat16 copies of all the layers' weights (per chip, as sharded) live through the train step: XLA casts the
stacked float32 weights to bfloat16, or lays bfloat16 ones out as the layer loop reads them, once, outside the
loop. XLA's lists of what is live at its peak hold ``copy`` buffers whose op is the weight's path in the train
state (``state['model']['decoder']['layers']['mlp']['wo']['kernel']``), one per stacked weight: Llama 3 8B (v6e,
pdbs 2 and 4, any remat policy; v5p; tpu7x) 0.80 GiB against 0.81 GiB of layer weights in bfloat16 per chip
(0.75-0.80 at the peak itself), Llama 3 70B (bfloat16 weights, pdbs 1) 4.1 against 3.98 in XLA's list (1.80 at its
peak, in the layers' backward), OLMo 3 32B on v5p 6.88 against 7.51, GPT-3 22B 2.53 against 2.57. Gemma 1 and 2
and most Qwen compiles cast by a fusion that carries no op name: stacked ``bf16[layers, ...]`` buffers beside
float32 weights (Gemma 2 27B on v5p, fsdp 8: 5.76 GiB of them and 0.30 named, against 6.07; Gemma 7B on v5p 1.56
of 1.80; Qwen 2.5 7B on v6e 0.75 of 0.76). Gemma 4 31B's backward holds as much again under its inner scan
(2.79 GiB of ``bf16[5,1344,5376]`` transposed weight copies against 3.41). Where the weights are bfloat16, Gemma
1 and 2 hold none (:data:`WEIGHTS_READ_IN_PLACE`)."""

WEIGHTS_READ_IN_PLACE = ("gemma", "gemma2")
"""Decoder blocks whose bfloat16 layer weights XLA reads where they are, with no copy (:data:`LAYER_WEIGHTS_HELD`
is 0 there). Read at the peak on 2 x v6e-16 with ``weight_dtype: bfloat16`` (2026-12-05): Gemma 2 27B (pdbs 2,
2,048 tokens; in the layers' backward) holds its stacked gradients, ``bf16[23,1152,9216]`` and the rest (3.03
GiB), and 0.25 GiB of attention weight copies beside them, where a copy would be 3.03 more; Gemma 2 9B (pdbs 2),
Gemma 2 2B (pdbs 4) and Gemma 7B (pdbs 2), at the output head, hold 0.16, 0.01 and 0.12 GiB of 0.97, 0.24 and
0.90. With float32 weights the same models hold the cast copy; with bfloat16 weights Mistral 7B (0.81 of 0.81 on
v5e, fsdp 16), Llama 3.1 8B (0.80 of 0.81) and Gemma 3 12B (0.87 of 1.25 on v6e) hold theirs."""


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
    devices_per_chip: int = 1
    """JAX devices one chip is (2 TensorCores on tpu7x): XLA's figures are per device."""

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
    def total_per_device_gib(self) -> float:
        """The total per JAX device, what XLA's figures are per (a TensorCore on tpu7x)."""
        return self.total_gib / self.devices_per_chip

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
    tensors_on_device: Sequence[str] = (),
) -> HbmBreakdown:
    """Estimate per-chip HBM; keyword defaults are MaxText's base.yml defaults."""
    m = get_model(model)
    if not isinstance(shape, SliceShape):
        raise ConfigError("topology", shape, "a SliceShape from tpu_catalogue.slice_shape()")
    per_chip = shape.generation.jax_devices_per_chip
    mesh: Mesh = resolve_mesh(parallelism, shape.chips * per_chip, num_slices)
    policy = get_remat_policy(remat_policy, on_device=tensors_on_device, decoder_block=m.decoder_block)
    check_batch_and_length(per_device_batch_size, max_target_length)
    if opt_type not in SUPPORTED_OPTIMIZERS:
        raise ConfigError("opt_type", opt_type, f"one of {', '.join(SUPPORTED_OPTIMIZERS)}")
    w_bytes = _dtype_bytes("weight_dtype", weight_dtype)
    act_bytes = _dtype_bytes("dtype", dtype)
    g_bytes = _dtype_bytes("grad_dtype", grad_dtype) if weight_dtype == "float32" else w_bytes
    mu_bytes = (_dtype_bytes("mu_dtype", mu_dtype) if mu_dtype and opt_type == "adamw" else w_bytes)
    state_bytes = (mu_bytes + w_bytes) if OPTIMIZER_STATES[opt_type] else 0

    # Per device (a chip, or a TensorCore of tpu7x), then per chip.
    params, layer_params = _params_per_device(m, parallelism, shape, num_slices)
    tp = mesh.tensor
    # tokens held by one batch shard: global batch (pdbs x devices) / (data x fsdp) x length
    tokens = per_device_batch_size * mesh.devices / mesh.batch_shards * max_target_length

    acts = _Activations(m, tokens, tp, act_bytes)
    units = remat_units(m)
    activations = sum(unit.count * acts.saved(unit, policy.saves) for unit in units)
    transient, kind = acts.transient(units, shape.generation.name, layer_params * g_bytes, policy.saves)
    held = 0 if weight_dtype == "bfloat16" and m.decoder_block in WEIGHTS_READ_IN_PLACE else LAYER_WEIGHTS_HELD
    transient += held * layer_params * act_bytes
    activations, transient = activations * per_chip, transient * per_chip
    params_per_chip = params * per_chip

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
        optimizer_gib=params_per_chip * state_bytes / GIB,
        activations_gib=activations / GIB,
        transient_gib=transient / GIB,
        transient_kind=kind,
        hbm_gib=shape.generation.hbm_gib_per_chip,
        usable_gib=shape.generation.xla_hbm_limit_gib_per_chip,
        devices_per_chip=per_chip,
        params_per_chip=params_per_chip,
    )


@dataclass(frozen=True)
class _Activations:
    """What one device holds of the model's activations, by the terms the module's docstring lists."""

    model: ModelShape
    tokens: float
    """Tokens one batch shard holds: global batch (pdbs x devices) / (data x fsdp) x length."""
    tp: int
    act_bytes: int

    def of_layer(self, layer: Layer, names: Sequence[str]) -> float:
        tensors = _layer_tensors(layer, self.model.d_model)
        elements = sum(_per_chip_elements(*tensors[n], self.tokens, self.tp) for n in set(names) if n in tensors)
        return elements * self.act_bytes

    def carry(self) -> float:
        """One remat unit's input, the scan's carry: ``[tokens, d_model]``, split over tensor where it divides."""
        d = self.model.d_model
        return self.tokens * d / (self.tp if d % self.tp == 0 else 1) * self.act_bytes

    def saved(self, unit: RematUnit, saves: Sequence[str]) -> float:
        """One remat unit's input (the scan carry) and what the backward reads of what the policy saves."""
        return self.carry() + sum(self.of_layer(layer, kept_by_backward(layer, saves)) for layer in unit.layers)

    def recompute(self, unit: RematUnit) -> float:
        """The backward of a unit of several layers keeps every other layer's matmul outputs while it goes back
        through one."""
        return sum(sorted(self.of_layer(layer, RECOMPUTED) for layer in unit.layers)[:-1])

    def first_recompute(self, layer: Layer) -> float:
        """One layer's tensors as its backward recomputes them, before any gradient: those ``d_model`` wide whole over
        tensor (the residual stream is gathered for the layer's matmuls), the rest split as they shard. At XLA's
        peak where one logits buffer is live (read 2026-12-05): Qwen 3 0.6B on v5e with tensor 4, four
        ``bf16[32,2048,1024]`` (whole), three ``[32,2048,768]`` (its MLP over 4) and its heads over 4; Llama 3.1 8B
        with fsdp 16 on v5e, three ``bf16[8,2048,14336]`` and four ``[8,2048,4096]``. Counting every tensor with
        its gradient put the second at 1.206 of XLA's peak (1.012 now); counting ``d_model`` wide tensors split
        over tensor put Gemma 2 2B on v5e with tensor 4 at 0.867 (0.904)."""
        d = self.model.d_model
        elements = sum(
            _per_chip_elements(features, split, self.tokens, 1 if features == split == d else self.tp)
            for features, split in _layer_tensors(layer, d).values()
        )
        return elements * self.act_bytes

    def gathered(self, layers: Sequence[Layer]) -> float:
        """The layers' weights in bfloat16 (the activations' type) gathered over fsdp, split over tensor."""
        return sum(_layer_params(one, self.model.d_model) for one in layers) / self.tp * self.act_bytes

    def backward(self, layer: Layer) -> float:
        """One layer's recomputed tensors and their gradients."""
        return LAYER_BACKWARD_COPIES * self.of_layer(layer, _layer_tensors(layer, self.model.d_model))

    def transient(
        self, units: Sequence[RematUnit], generation: str, layer_gradients: float, saves: Sequence[str]
    ) -> tuple[float, str]:
        """The larger working set, the output head's or one decoder layer's (the head's alone where the forward's
        logits stay live through the layers' backward: :data:`FORWARD_LOGITS_ONLY`), and which it is. The policy's
        ``saves`` decide the head's second copy of the unit inputs (:data:`SAVED_INPUTS_AGAIN`). Where MaxText
        unrolls the loop over scanned steps (:data:`UNROLLED_BLOCK_LOOP`) the head's is less ``layer_gradients``
        (the layers' weight gradients, bytes), and where the policy saves nothing, plus each step's first layer's
        weights gathered."""
        m, tokens, tp, act_bytes = self.model, self.tokens, self.tp, self.act_bytes
        vocab_split = tp > 1 and m.vocab_size % tp == 0
        logits = _per_chip_elements(m.vocab_size, m.vocab_size, tokens, tp)
        beside_logits = (
            tokens * m.d_model * act_bytes * HEAD_INPUT_COPIES
            + HEAD_WEIGHT_COPIES * m.vocab_size / (tp if vocab_split else 1) * m.d_model * act_bytes
            + self.recompute(units[-1])
        )
        gradient_over_logits = not vocab_split and generation in GRADIENT_OVER_LOGITS and not m.logits_soft_cap
        if generation in FORWARD_LOGITS_ONLY or gradient_over_logits:
            first = max(self.first_recompute(one) for unit in units for one in unit.layers)
            head = logits * FORWARD_LOGIT_BYTES + max(beside_logits, first)
        else:
            head = logits * LOGIT_BYTES + beside_logits
        unrolled = m.decoder_block in UNROLLED_BLOCK_LOOP
        inputs_copied = not saves and not unrolled and generation not in FORWARD_LOGITS_ONLY
        if inputs_copied and m.tied_embeddings and not vocab_split:
            head += SAVED_INPUTS_AGAIN * sum(unit.count for unit in units) * self.carry()
        if unrolled:
            head -= layer_gradients
            if not saves:
                first = m.blocks[0]
                head += first.repeats * self.gathered(first.layers[:1])
        if generation in FORWARD_LOGITS_ONLY:
            return head, OUTPUT_HEAD
        # A unit's largest layer backward, beside the unit's other layers' recompute and its weights gathered.
        layer = max(
            max(self.backward(one) for one in unit.layers) + self.recompute(unit)
            + LAYER_WEIGHT_COPIES * self.gathered(unit.layers)
            for unit in units
        )
        return (head, OUTPUT_HEAD) if head >= layer else (layer, "one decoder layer")


def _layer_params(layer: Layer, d: int) -> int:
    return sum(weight.size for weight in layer_weights(layer, d, False))


def _params_per_device(
    model: ModelShape, parallelism: Mapping[str, object], shape: SliceShape, num_slices: int
) -> tuple[float, float]:
    """Each weight's elements over the shards MaxText's rules split it into on this mesh (norm scales split over
    tensor only, or fsdp for Llama 2; everything else over fsdp and tensor): all the weights, and the layers'
    only (not the embeddings, the output head, the final norm)."""
    resolved = resolved_config({**parallelism, "model_name": model.name}) or {}
    rules = resolved.get("logical_axis_rules") or ()
    devices = shape.chips * shape.generation.jax_devices_per_chip
    mesh = run_mesh(parallelism, resolved.get("mesh_axes") or ("data", "fsdp", "tensor"), devices, num_slices)
    layer_paths = tuple(f"{block.path}/" for block in model.blocks)
    total = layers = 0.0
    for weight in model.weights():
        elements = weight.size / mesh.shards([axis for dim in logical_to_mesh(weight.axes, rules) for axis in dim])
        total += elements
        if weight.name.startswith(layer_paths):
            layers += elements
    return total, layers


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
        tensors_on_device=values.get("tensors_on_device") or (),  # type: ignore[arg-type]
    )
