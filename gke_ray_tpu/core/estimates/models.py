"""Model shapes, read from the installed MaxText's own model configs: the numbers the estimates need.

A run's shape is what MaxText itself resolves (:func:`gke_ray_tpu.core.maxtext.resolved_config`):
``configs/base.yml``, then ``configs/models/<model_name>.yml``, then the run's
own keys (``override_model_config=true`` lets those change the shape, as the
CPU preset does). So every model MaxText ships has a shape here, and a new
MaxText brings its new models without a table to update.

The estimates model one kind of model: a dense decoder whose scanned layer is
one pre-norm attention block (q, k, v and output projections) and one MLP of
``len(mlp_activations)`` input projections and an output projection, the same
in every layer (:data:`MODELLED_DECODER_BLOCKS`). Anything else - a mixture of
experts, multi-latent attention, layers that alternate inside one scanned block
(Gemma 2 and 3, OLMo 3, Llama 4), GPT-3's learned positions - is a valid run
whose memory the estimate does not know: :class:`NoEstimate`, and XLA's compile
check gives the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.core.maxtext import check_known, installed, model_overlay, resolved_config

COMPILE_CHECK = "python -m gke_ray_tpu.stack.preview --section training --compile"
"""XLA's own answer for a run the estimate cannot model."""

MODELLED_DECODER_BLOCKS = ("llama2", "mistral", "gemma", "qwen2", "qwen3")
"""MaxText ``decoder_block`` values whose scanned layer is one attention and one MLP block, like every other
layer's; their extras are per-layer vectors the parameter count includes (qwen2's q/k/v biases, qwen3's q/k
norms). Gemma 2 and 3 scan several layers of two attention kinds as one block, OLMo 3 a cycle of layers."""

MODELLED_ATTENTION = ("global", "local_sliding")
"""``attention_type`` values with MaxText's plain q/k/v/o projections (a sliding window changes FLOPs, not weights)."""

_MUST_BE: dict[str, tuple[object, str]] = {
    "num_experts": (1, "a mixture of experts"),
    "global_parameter_scale": (1, "dimensions scaled by global_parameter_scale"),
    "mtp_num_layers": (0, "multi-token prediction layers"),
    "share_kv_projections": (False, "shared key/value projections"),
    "use_multimodal": (False, "a vision encoder"),
    "trainable_position_size": (-1, "learned position embeddings"),
    "engram_layers": ([], "engram layers"),
}
"""Keys that add or change weights in ways the estimate does not count: value it models, what else means."""


class NoEstimate(ConfigError):
    """A run MaxText accepts whose memory the estimate does not model: no figure rather than a wrong one."""

    def __init__(self, key: str, value: object, reason: str):
        super().__init__(key, value, f"a dense decoder the estimate models, not {reason}")
        self.args = (f"no estimate for {key}={value!r} ({reason}): run the compile check ({COMPILE_CHECK})",)


@dataclass(frozen=True)
class ModelShape:
    """Decoder-only transformer shape, in MaxText's vocabulary (the resolved config's keys)."""

    name: str
    """``model_name``"""
    num_layers: int
    """``base_num_decoder_layers``"""
    d_model: int
    """``base_emb_dim``"""
    num_heads: int
    """``base_num_query_heads``"""
    num_kv_heads: int
    """``base_num_kv_heads``"""
    head_dim: int
    """``head_dim``"""
    mlp_dim: int
    """``base_mlp_dim``"""
    vocab_size: int
    """``vocab_size``"""
    num_mlp_activations: int = 2
    """``len(mlp_activations)``: 2 for a gated MLP (``wi_0`` and ``wi_1``)."""
    tied_embeddings: bool = False
    """``logits_via_embedding``"""
    attention_bias: bool = False
    """``attention_bias``: a bias on each of the q, k and v projections (Qwen 2)."""
    qk_norm: bool = False
    """``use_qk_norm``: an RMSNorm scale of ``head_dim`` on queries and on keys (Qwen 3)."""

    # Parameter counts (exact; every weight matrix, bias and norm scale).

    @property
    def attention_params_per_layer(self) -> int:
        q = self.d_model * self.num_heads * self.head_dim
        kv = 2 * self.d_model * self.num_kv_heads * self.head_dim
        out = self.num_heads * self.head_dim * self.d_model
        bias = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim if self.attention_bias else 0
        qk_norm = 2 * self.head_dim if self.qk_norm else 0
        return q + kv + out + bias + qk_norm

    @property
    def mlp_params_per_layer(self) -> int:
        return (self.num_mlp_activations + 1) * self.d_model * self.mlp_dim

    @property
    def params_per_layer(self) -> int:
        norms = 2 * self.d_model  # pre-attention and pre-MLP RMSNorm scales
        return self.attention_params_per_layer + self.mlp_params_per_layer + norms

    @property
    def embedding_params(self) -> int:
        """Token embedding plus (untied) output projection."""
        tables = 1 if self.tied_embeddings else 2
        return tables * self.vocab_size * self.d_model

    @property
    def num_params(self) -> int:
        final_norm = self.d_model
        return self.num_layers * self.params_per_layer + self.embedding_params + final_norm


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
    if block not in MODELLED_DECODER_BLOCKS:
        refuse("decoder_block", f"decoder_block={block!r}, a layer the estimate does not model "
                                f"(it models {', '.join(MODELLED_DECODER_BLOCKS)})")
    attention = resolved.get("attention_type")
    if attention not in MODELLED_ATTENTION:
        refuse("attention_type", f"attention_type={attention!r}")


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
    return ModelShape(
        name=str(resolved["model_name"]),
        num_layers=resolved["base_num_decoder_layers"],
        d_model=resolved["base_emb_dim"],
        num_heads=resolved["base_num_query_heads"],
        num_kv_heads=resolved["base_num_kv_heads"],
        head_dim=resolved["head_dim"],
        mlp_dim=resolved["base_mlp_dim"],
        vocab_size=resolved["vocab_size"],
        num_mlp_activations=len(resolved["mlp_activations"]),
        tied_embeddings=bool(resolved["logits_via_embedding"]),
        attention_bias=bool(resolved.get("attention_bias", False)),
        qk_norm=bool(resolved.get("use_qk_norm", False)),
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
