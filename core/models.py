"""Model shapes, read from the installed MaxText's own model configs: every weight of the model, its shape and
the logical axes MaxText shards it by, and the layers the memory estimate walks.

A run's shape is what MaxText itself resolves (:func:`gke_ray_tpu.core.maxtext.resolved_config`):
``configs/base.yml``, then ``configs/models/<model_name>.yml``, then the run's
own keys (``override_model_config=true`` lets those change the shape, as the
CPU preset does). So every model MaxText ships has a shape here, and a new
MaxText brings its new models without a table to update.

What is written here is how each of MaxText's dense decoder blocks (``decoder_block``,
:data:`MODELLED_DECODER_BLOCKS`) lays its layers out: which layers one scanned
block holds (Gemma 2 scans a local and a global layer together, Gemma 3 and 4
six layers with an unscanned remainder, OLMo 3 a cycle of four), the weights of
each layer (its attention's projections, biases and norms, its MLP) and their
logical axis names (``("embed_attn", "q_heads", "kv")``), as MaxText 0.2.5's
``models/<block>.py``, ``layers/attentions.py``, ``layers/linears.py`` and
``layers/nnx_decoders.py`` build them. ``tests/test_estimates_sharding.py`` builds
MaxText's own abstract train state for each dense model it ships and compares
every weight's path, shape and partitioning with :meth:`ModelShape.weights`.
A mixture of experts, multi-latent attention, a vision encoder or layers that
are not scanned is a valid run whose memory the estimate does not know:
:class:`NoEstimate`, and XLA's compile check gives the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.maxtext import check_known, installed, model_overlay, resolved_config

COMPILE_CHECK = "python -m gke_ray_tpu.stack.preview --section training --compile"
"""XLA's own answer for a run the estimate cannot model."""

MODELLED_ATTENTION = ("global", "local_sliding")
"""``attention_type`` values with MaxText's plain q/k/v/o projections (a sliding window changes FLOPs, not weights)."""

_MUST_BE: dict[str, tuple[object, str]] = {
    "num_experts": (1, "a mixture of experts"),
    "global_parameter_scale": (1, "dimensions scaled by global_parameter_scale"),
    "mtp_num_layers": (0, "multi-token prediction layers"),
    "use_multimodal": (False, "a vision encoder"),
    "engram_layers": ([], "engram layers"),
    "scan_layers": (True, "layers that are not scanned (scan_layers=false)"),
    "fused_mlp": (False, "a fused MLP input projection"),
    "mhc_expansion_rate": (1, "hyper-connections"),
}
"""Keys that add or change weights in ways the estimate does not count: value it models, what else means."""


class NoEstimate(ConfigError):
    """A run MaxText accepts whose memory the estimate does not model: no figure rather than a wrong one."""

    def __init__(self, key: str, value: object, reason: str):
        super().__init__(key, value, f"a dense decoder the estimate models, not {reason}")
        self.args = (f"no estimate for {key}={value!r} ({reason}): run the compile check ({COMPILE_CHECK})",)


@dataclass(frozen=True)
class Weight:
    """One weight of the model as MaxText creates it: its path in the train state, shape and logical axes."""

    name: str
    """``decoder/layers/self_attention/query/kernel`` (the path under ``state['model']``)."""
    shape: tuple[int, ...]
    axes: tuple[Optional[str], ...]
    """MaxText's logical axis name of each dimension (None: never sharded)."""

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Attention:
    """One layer's attention: its projections' shapes."""

    heads: int
    kv_heads: int
    head_dim: int
    window: Optional[int] = None
    """Sliding-window length of a local layer; None attends to the whole sequence."""
    kv: str = "separate"
    """``separate`` key and value projections; ``shared``: one projection for both (Gemma 4's global layers,
    ``share_kv_projections``); ``fused``: GPT-3's ``qkv_proj`` of shape ``[embed, 3, heads, head_dim]``."""
    bias: bool = False
    """A bias on each of the q, k and v projections (Qwen 2's ``attention_bias``, GPT-3)."""
    out_bias: bool = False
    qk_norm: int = 0
    """Features of the query's and the key's RMSNorm scale: ``head_dim`` per head (Qwen 3, Gemma 3 and 4), or
    heads x head_dim (OLMo 3's global norm); 0 without."""
    kv_norm_features: int = 0
    """The key norm's features where they differ from the query's (OLMo 3: kv_heads x head_dim)."""

    @property
    def q_features(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_features(self) -> int:
        return self.kv_heads * self.head_dim


@dataclass(frozen=True)
class Layer:
    """One transformer layer as MaxText names its parts."""

    attention: Attention
    mlp_dim: int
    mlp_activations: int
    attention_module: str = "self_attention"
    mlp_module: str = "mlp"
    norms: tuple[str, ...] = ("pre_self_attention_layer_norm", "post_self_attention_layer_norm")
    """The layer's ``[embed]`` norm scales, by name."""
    norm_bias: bool = False
    """LayerNorm with a bias (GPT-3) rather than RMSNorm."""
    mlp_bias: bool = False
    mlp_norm: bool = False
    """GPT-3's ``mlp/mlp_layer_norm`` inside the MLP block."""
    scalar: bool = False
    """Gemma 4's per-layer ``layer_scalar``."""
    path: str = ""
    """Where the layer sits inside its block (``layers_3``); empty when the block is one layer."""
    stacked: int = 1
    """Layers of this kind stacked on an inner axis (Gemma 4's five ``local_layers`` per block)."""
    stacked_axis: Optional[str] = None
    """The inner axis's logical name, ``local_layers`` (also for a stack of one)."""

    @property
    def mlp_output_normed(self) -> bool:
        """A norm reads the MLP's output (Gemma 2, 3 and 4's ``post_ffw_norm``, OLMo 3's ``post_mlp_layer_norm``);
        elsewhere only the residual add does, whose backward needs no value."""
        return any(name.startswith(MLP_OUTPUT_NORMS) for name in self.norms)


MLP_OUTPUT_NORMS = ("post_ffw_norm", "post_mlp_layer_norm")
"""The names MaxText's decoder layers give a norm applied to the MLP block's output."""


@dataclass(frozen=True)
class Block:
    """Layers MaxText runs as one unit: scanned ``repeats`` times (``decoder/layers``), or once, unscanned
    (Gemma 3's and 4's ``layers_remainder``)."""

    path: str
    layers: tuple[Layer, ...]
    repeats: int
    scanned: bool = True

    @property
    def num_layers(self) -> int:
        return self.repeats * sum(layer.stacked for layer in self.layers)


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only model as MaxText builds it: its blocks of layers, embeddings and output head."""

    name: str
    """``model_name``"""
    decoder_block: str
    d_model: int
    vocab_size: int
    blocks: tuple[Block, ...]
    tied_embeddings: bool = False
    """``logits_via_embedding``: the output head is the token embedding's transpose."""
    positions: int = 0
    """``trainable_position_size``: GPT-3's learned position table (0: none)."""
    final_norm_bias: bool = False
    logits_soft_cap: Optional[float] = None
    """``final_logits_soft_cap`` (applied with tied embeddings: Gemma 2)."""
    context_autoregressive: bool = field(default=False, repr=False)
    """``ici_context_autoregressive_parallelism`` > 1: MaxText leaves the attention projections unsharded."""

    @property
    def layers(self) -> tuple[Layer, ...]:
        """Every layer once per repeat, in order (a stacked layer counts ``stacked`` times)."""
        return tuple(
            layer for block in self.blocks for _ in range(block.repeats) for layer in block.layers
            for _ in range(layer.stacked)
        )

    @property
    def num_layers(self) -> int:
        return sum(block.num_layers for block in self.blocks)

    # The first layer's figures: the whole model's where every layer is alike (Llama, Qwen, Mistral, Gemma).
    @property
    def num_heads(self) -> int:
        return self.layers[0].attention.heads

    @property
    def num_kv_heads(self) -> int:
        return min(layer.attention.kv_heads for layer in self.layers)

    @property
    def head_dim(self) -> int:
        return self.layers[0].attention.head_dim

    @property
    def mlp_dim(self) -> int:
        return self.layers[0].mlp_dim

    @property
    def num_mlp_activations(self) -> int:
        return self.layers[0].mlp_activations

    def weights(self) -> tuple[Weight, ...]:
        """Every weight of the model, as MaxText's train state holds it."""
        found = [Weight("token_embedder/embedding", (self.vocab_size, self.d_model), ("vocab", "embed_vocab"))]
        if self.positions:
            found.append(Weight("decoder/position_embedder/embedding", (self.positions, self.d_model), ("vocab", "embed_vocab")))
        found += _norm("decoder/decoder_norm", self.d_model, self.final_norm_bias)
        if not self.tied_embeddings:
            found.append(Weight("decoder/logits_dense/kernel", (self.d_model, self.vocab_size), ("embed_vocab", "vocab")))
        for block in self.blocks:
            for layer in block.layers:
                prefix = "/".join(part for part in (block.path, layer.path) if part)
                for weight in layer_weights(layer, self.d_model, self.context_autoregressive):
                    found.append(_stacked(replace(weight, name=f"{prefix}/{weight.name}"), block, layer))
        return tuple(found)

    @property
    def num_params(self) -> int:
        return sum(weight.size for weight in self.weights())

    @property
    def embedding_params(self) -> int:
        """The token embedding, an untied output head and a learned position table."""
        tables = 1 if self.tied_embeddings else 2
        return tables * self.vocab_size * self.d_model + self.positions * self.d_model

    @property
    def params_per_layer(self) -> int:
        """Parameters of one layer where every layer is alike (the model's layers' parameters / its layer count)."""
        return (self.num_params - self.embedding_params - self.d_model * (2 if self.final_norm_bias else 1)) // self.num_layers


def _norm(name: str, features: int, bias: bool = False) -> list[Weight]:
    found = [Weight(f"{name}/scale", (features,), ("norm",))]
    if bias:
        found.append(Weight(f"{name}/bias", (features,), ("norm",)))
    return found


def layer_weights(layer: Layer, d: int, context_autoregressive: bool) -> list[Weight]:
    """One layer's weights, unscanned (``layers/attentions.py``, ``layers/linears.py``, the block's own module)."""
    a, att = layer.attention, layer.attention_module
    # Under context-autoregressive parallelism MaxText's Attention builds the projections with no logical axes;
    # GPT-3's own attention module (its fused q/k/v) keeps them (``models/gpt3.py``).
    def axes(*names):
        return (None,) * len(names) if context_autoregressive and a.kv != "fused" else names

    found: list[Weight] = []
    if a.kv == "fused":
        found.append(Weight(f"{att}/qkv_proj/kernel", (d, 3, a.heads, a.head_dim), ("embed_attn", "qkv", "heads", "kv")))
        if a.bias:
            found.append(Weight(f"{att}/qkv_proj/bias", (3, a.heads, a.head_dim), ("qkv", "heads", "kv")))
    else:
        found.append(Weight(f"{att}/query/kernel", (d, a.heads, a.head_dim), axes("embed_attn", "q_heads", "kv")))
        if a.bias:
            found.append(Weight(f"{att}/query/bias", (a.heads, a.head_dim), axes("q_heads", "kv")))
        for projection in ("key",) if a.kv == "shared" else ("key", "value"):
            found.append(Weight(f"{att}/{projection}/kernel", (d, a.kv_heads, a.head_dim),
                                axes("embed_attn", "kv_heads", "kv_head_dim")))
            if a.bias:
                found.append(Weight(f"{att}/{projection}/bias", (a.kv_heads, a.head_dim), axes("kv_heads", "kv_head_dim")))
    if a.qk_norm:
        found += _norm(f"{att}/query_norm", a.qk_norm)
        found += _norm(f"{att}/key_norm", a.kv_norm_features or a.qk_norm)
    found.append(Weight(f"{att}/out/kernel", (a.heads, a.head_dim, d), axes("heads", "kv", "embed_attn")))
    if a.out_bias:
        found.append(Weight(f"{att}/out/bias", (d,), ("embed_attn",)))
    mlp = layer.mlp_module
    if layer.mlp_norm:
        found += _norm(f"{mlp}/mlp_layer_norm", d, layer.norm_bias)
    inputs = ["wi"] if layer.mlp_activations == 1 else [f"wi_{i}" for i in range(layer.mlp_activations)]
    for name in inputs:
        found.append(Weight(f"{mlp}/{name}/kernel", (d, layer.mlp_dim), ("embed", "mlp")))
        if layer.mlp_bias:
            found.append(Weight(f"{mlp}/{name}/bias", (layer.mlp_dim,), ("mlp",)))
    found.append(Weight(f"{mlp}/wo/kernel", (layer.mlp_dim, d), ("mlp", "embed")))
    if layer.mlp_bias:
        found.append(Weight(f"{mlp}/wo/bias", (d,), ("embed",)))
    for name in layer.norms:
        found += _norm(name, d, layer.norm_bias)
    if layer.scalar:
        found.append(Weight("layer_scalar", (1,), (None,)))
    return found


def _stacked(weight: Weight, block: Block, layer: Layer) -> Weight:
    """A scanned weight gets the scan's axis at ``param_scan_axis`` (1; after the last for a vector), a
    stacked layer's its inner axis after that."""
    shape, axes = list(weight.shape), list(weight.axes)
    inserts = ([(block.repeats, "layers")] if block.scanned else []) + (
        [(layer.stacked, layer.stacked_axis)] if layer.stacked_axis else [])
    at = 1
    for size, name in inserts:
        shape.insert(at, size)
        axes.insert(at, name)
        at += 1
    return replace(weight, shape=tuple(shape), axes=tuple(axes))


# -- each dense decoder block MaxText ships -------------------------------------------------------------------------


def _attention(c: Mapping, window: Optional[int] = None, **changes) -> Attention:
    heads, kv_heads, head_dim = c["base_num_query_heads"], c["base_num_kv_heads"], c["head_dim"]
    return replace(Attention(heads, kv_heads, head_dim, window), **changes)


def _layer(c: Mapping, attention: Attention, **changes) -> Layer:
    return replace(Layer(attention, c["base_mlp_dim"], len(c["mlp_activations"])), **changes)


def _sliding(c: Mapping) -> int:
    return int(c["sliding_window_size"])


def _llama_like(c: Mapping) -> tuple[Block, ...]:
    """llama2, mistral, qwen2, qwen3: one layer per scanned step (``models/llama2.py``, ``qwen2.py``, ``qwen3.py``)."""
    window = _sliding(c) if c.get("attention_type") == "local_sliding" else None
    qk_norm = c["head_dim"] if c.get("use_qk_norm") else 0
    attention = _attention(c, window, bias=bool(c.get("attention_bias")), qk_norm=qk_norm)
    return (Block("decoder/layers", (_layer(c, attention),), c["base_num_decoder_layers"]),)


def _default(c: Mapping) -> tuple[Block, ...]:
    """``decoder_block: default`` (``nnx_decoders.NNXDecoderLayer``): one norm before attention, none before the MLP."""
    attention = _attention(c, bias=bool(c.get("attention_bias")), qk_norm=c["head_dim"] if c.get("use_qk_norm") else 0)
    return (Block("decoder/layers", (_layer(c, attention, norms=("pre_self_attention_norm",)),), c["base_num_decoder_layers"]),)


def _gemma(c: Mapping) -> tuple[Block, ...]:
    """``models/gemma.py``: RMSNorms before attention and before the MLP."""
    layer = _layer(c, _attention(c), norms=("pre_self_attention_norm", "pre_ffw_norm"))
    return (Block("decoder/layers", (layer,), c["base_num_decoder_layers"]),)


def _gemma_norms(c: Mapping, suffix: str = "") -> tuple[str, ...]:
    names = ["pre_self_attention_norm"] + (["post_self_attention_norm"] if c.get("use_post_attn_norm") else [])
    names += ["pre_ffw_norm"] + (["post_ffw_norm"] if c.get("use_post_ffw_norm") else [])
    return tuple(name + suffix for name in names)


def _gemma2(c: Mapping) -> tuple[Block, ...]:
    """``models/gemma2.py``: each scanned step is a local (sliding-window) layer and a global layer, each with its
    own modules (``self_attention_local``, ``mlp_global``, ...); ``base_num_decoder_layers`` counts the pairs."""
    layers = tuple(
        _layer(c, _attention(c, _sliding(c) if kind == "local" else None), attention_module=f"self_attention_{kind}",
               mlp_module=f"mlp_{kind}", norms=_gemma_norms(c, f"_{kind}"))
        for kind in ("local", "global")
    )
    return (Block("decoder/layers", layers, c["base_num_decoder_layers"]),)


_GEMMA_PATTERN = ("local",) * 5 + ("global",)
"""``GEMMA3_ATTENTION_PATTERN`` and ``GEMMA4_ATTENTION_PATTERN``: five sliding-window layers, then a global one."""


def _gemma3(c: Mapping) -> tuple[Block, ...]:
    """``models/gemma3.py``, ``nnx_decoders._init_scanned_gemma3``: the pattern's six layers as one scanned step
    (``layers_0`` .. ``layers_5``), the layers left over as one unscanned ``layers_remainder``; query and key
    norms always."""
    def layer(index: int) -> Layer:
        window = _sliding(c) if _GEMMA_PATTERN[index % len(_GEMMA_PATTERN)] == "local" else None
        return _layer(c, _attention(c, window, qk_norm=c["head_dim"]), norms=_gemma_norms(c), path=f"layers_{index}")

    total, period = c["base_num_decoder_layers"], len(_GEMMA_PATTERN)
    blocks = [Block("decoder/layers", tuple(layer(i) for i in range(period)), total // period)] if total >= period else []
    if total % period:
        blocks.append(Block("decoder/layers_remainder", tuple(layer(i) for i in range(total % period)), 1, scanned=False))
    return tuple(blocks)


def _gemma4(c: Mapping) -> tuple[Block, ...]:
    """``models/gemma4.py``, ``nnx_decoders._init_scanned_gemma4``: each scanned step holds five local layers stacked
    on an inner axis (``local_layers``) and one ``global_layer``, whose attention has ``global_num_kv_heads`` heads
    of ``global_head_dim`` and, with ``share_kv_projections``, one projection for keys and values."""
    norms = _gemma_norms(c)
    local_attention = _attention(c, _sliding(c), qk_norm=c["head_dim"])
    global_dim = c.get("global_head_dim") or c["head_dim"]
    global_kv = c.get("global_num_kv_heads") or c["base_num_kv_heads"]
    global_attention = _attention(c, None, kv_heads=global_kv, head_dim=global_dim, qk_norm=global_dim,
                                  kv="shared" if c.get("share_kv_projections") else "separate")
    total, period = c["base_num_decoder_layers"], len(_GEMMA_PATTERN)
    local = _layer(c, local_attention, norms=norms, scalar=True, path="local_layers", stacked=period - 1,
                   stacked_axis="local_layers")
    blocks = [Block("decoder/scanned_blocks", (local, _layer(c, global_attention, norms=norms, scalar=True,
                                                             path="global_layer")), total // period)]
    if total % period:
        # The remainder's layers are all local ones (the global layer ends a period), stacked the same way.
        blocks.append(Block("decoder/layers_remainder", (replace(local, stacked=total % period),), 1, scanned=False))
    return tuple(blocks)


_OLMO3_PATTERN = ("local",) * 3 + ("global",)
"""``OLMO3_ATTENTION_PATTERN``."""


def _olmo3(c: Mapping) -> tuple[Block, ...]:
    """``models/olmo3.py``: a cycle of ``inhomogeneous_layer_cycle_interval`` layers per scanned step (three
    sliding-window layers, then a global one), norms after attention and after the MLP, and OLMo's global query
    and key norms over all heads."""
    period = c["inhomogeneous_layer_cycle_interval"]
    heads, kv_heads, head_dim = c["base_num_query_heads"], c["base_num_kv_heads"], c["head_dim"]

    def layer(index: int) -> Layer:
        window = _sliding(c) if _OLMO3_PATTERN[index % len(_OLMO3_PATTERN)] == "local" else None
        attention = _attention(c, window, bias=bool(c.get("attention_bias")), qk_norm=heads * head_dim,
                               kv_norm_features=kv_heads * head_dim)
        return _layer(c, attention, attention_module="attention", path=f"layers_{index}",
                      norms=("post_self_attention_layer_norm", "post_mlp_layer_norm"))

    return (Block("decoder/layers", tuple(layer(i) for i in range(period)), c["base_num_decoder_layers"] // period),)


def _gpt3(c: Mapping) -> tuple[Block, ...]:
    """``models/gpt3.py``: LayerNorms with biases, a fused q/k/v projection with a bias, biases in the output
    projection and the MLP, the MLP's own pre-norm."""
    fused = "fused" if c.get("fused_qkv") else "separate"
    attention = _attention(c, kv=fused, bias=True, out_bias=True)
    layer = _layer(c, attention, norms=("pre_self_attention_norm",), norm_bias=True, mlp_bias=True, mlp_norm=True)
    return (Block("decoder/layers", (layer,), c["base_num_decoder_layers"]),)


LAYOUTS = {
    "default": _default,
    "llama2": _llama_like,
    "mistral": _llama_like,
    "qwen2": _llama_like,
    "qwen3": _llama_like,
    "gemma": _gemma,
    "gemma2": _gemma2,
    "gemma3": _gemma3,
    "gemma4": _gemma4,
    "olmo3": _olmo3,
    "gpt3": _gpt3,
}
"""MaxText ``decoder_block`` values the estimates model, and how each lays out its layers."""
MODELLED_DECODER_BLOCKS = tuple(LAYOUTS)


def _refuse_unmodelled(config: Mapping[str, object], resolved: Mapping[str, object], key: str) -> None:
    name = resolved["model_name"]

    def refuse(setting: str, reason: str) -> None:
        # Named under the key the run set, or under model_name when the model's overlay set it.
        raise NoEstimate(setting, config[setting], reason) if setting in config else NoEstimate(key, name, reason)

    for setting, (modelled, reason) in _MUST_BE.items():
        value = resolved.get(setting, modelled)
        if value != modelled:
            refuse(setting, f"{reason}: {setting}={value!r}")
    block = resolved.get("decoder_block")
    if block not in LAYOUTS:
        refuse("decoder_block", f"decoder_block={block!r}, a layer the estimate does not model "
                                f"(it models {', '.join(MODELLED_DECODER_BLOCKS)})")
    attention = resolved.get("attention_type")
    if attention not in MODELLED_ATTENTION:
        refuse("attention_type", f"attention_type={attention!r}")
    if block != "gpt3" and resolved.get("trainable_position_size", -1) > 0:
        refuse("trainable_position_size", "learned position embeddings outside GPT-3's layers: "
                                          f"trainable_position_size={resolved['trainable_position_size']!r}")
    if block != "gemma4" and resolved.get("share_kv_projections"):
        refuse("share_kv_projections", "shared key/value projections outside Gemma 4's global layers")


def model_shape(config: Mapping[str, object], key: str = "model_name") -> ModelShape:
    """The shape of the model a run trains, from the installed MaxText's configs.

    ``config`` holds the run's MaxText keys (at least ``model_name``, or MaxText's
    ``default``). A name MaxText does not ship is a ConfigError under ``key``; a
    model the estimate does not model is :class:`NoEstimate`.
    """
    check_known({"model_name": config.get("model_name", "default")}, key=lambda _: key)
    resolved = resolved_config(config)
    if resolved is None:
        raise NoEstimate(key, config.get("model_name"), "a model whose shape is unknown: MaxText is not "
                         "installed here, and its configs/models/<model_name>.yml is where shapes come from")
    name = resolved["model_name"]
    if name != "default" and model_overlay(str(name)) is None:
        # pyconfig would train base.yml's shape under this name; the estimate would not know it is that.
        raise NoEstimate(key, name, "a model_name without a configs/models/<model_name>.yml to read its shape from")
    _refuse_unmodelled(config, resolved, key)
    block = str(resolved["decoder_block"])
    soft_cap = resolved.get("final_logits_soft_cap")
    return ModelShape(
        name=str(name),
        decoder_block=block,
        d_model=resolved["base_emb_dim"],
        vocab_size=resolved["vocab_size"],
        blocks=LAYOUTS[block](resolved),
        tied_embeddings=bool(resolved["logits_via_embedding"]),
        positions=max(int(resolved.get("trainable_position_size", -1)), 0),
        final_norm_bias=block == "gpt3",
        logits_soft_cap=float(soft_cap) if soft_cap and resolved["logits_via_embedding"] else None,
        context_autoregressive=int(resolved.get("ici_context_autoregressive_parallelism", 1)) > 1,
    )


def get_model(model: str | ModelShape, key: str = "model_name") -> ModelShape:
    """A model by its MaxText ``model_name`` (or a ModelShape passed through)."""
    if isinstance(model, ModelShape):
        return model
    if not isinstance(model, str):
        raise ConfigError(key, model, "a MaxText model_name")
    return model_shape({"model_name": model}, key)


def modelled_models() -> tuple[str, ...]:
    """Every ``model_name`` the installed MaxText ships that the estimates model (empty without MaxText)."""
    maxtext = installed()
    if maxtext is None:
        return ()
    found = []
    for name in sorted(maxtext.models):
        try:
            get_model(name)
        except NoEstimate:
            continue
        found.append(name)
    return tuple(found)
