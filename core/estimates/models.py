"""Model shapes as data: the numbers the estimates need, nothing else.

Each entry mirrors a MaxText model config. Sources (AI-Hypercomputer/maxtext,
stored copies read 2026):

* ``llama3-8b``  - ``src/maxtext/configs/models/llama3-8b.yml``
* ``llama3-70b`` - ``src/maxtext/configs/models/llama3-70b.yml``
* ``default``    - the ``base_*`` defaults of ``src/maxtext/configs/base.yml``
  (what MaxText trains when no ``model_name`` is applied: 16 layers, width 2048,
  16 heads, 16 KV heads, MLP 7168, vocab 32000). It is here because the
  tutorial's sample "Llama 3 70B" log line matches this model's FLOPs, not
  the 70B's (see ``tests/test_estimates_flops_cost.py``).
* ``tiny``       - not a MaxText ``model_name``; a small Llama-style shape for
  CPU smoke tests. Train it in MaxText with ``override_model_config=true`` plus
  the keys from :meth:`ModelShape.maxtext_overrides`.

All Llama-family entries use the ``llama2`` decoder block (RMSNorm, RoPE,
SwiGLU MLP with ``mlp_activations: ["silu", "linear"]``) and untied input /
output embeddings (``logits_via_embedding: false``).
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ConfigError


@dataclass(frozen=True)
class ModelShape:
    """Decoder-only transformer shape, in MaxText's vocabulary."""

    name: str
    """Registry key; equals MaxText's ``model_name`` where one exists."""
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
    """``len(mlp_activations)``: 2 for SwiGLU (``wi_0`` and ``wi_1``)."""
    tied_embeddings: bool = False
    """``logits_via_embedding``"""
    maxtext_model_name: str | None = None
    """The ``model_name`` to pass to MaxText, or None for shapes MaxText lacks."""
    source: str = ""

    # Parameter counts (exact; every weight matrix and norm scale).

    @property
    def attention_params_per_layer(self) -> int:
        q = self.d_model * self.num_heads * self.head_dim
        kv = 2 * self.d_model * self.num_kv_heads * self.head_dim
        out = self.num_heads * self.head_dim * self.d_model
        return q + kv + out

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

    def maxtext_overrides(self) -> dict[str, object]:
        """MaxText keys that reproduce this shape (with ``override_model_config=true``)."""
        return {
            "base_num_decoder_layers": self.num_layers,
            "base_emb_dim": self.d_model,
            "base_num_query_heads": self.num_heads,
            "base_num_kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "base_mlp_dim": self.mlp_dim,
            "vocab_size": self.vocab_size,
            "logits_via_embedding": self.tied_embeddings,
        }


_MAXTEXT = "AI-Hypercomputer/maxtext src/maxtext/configs/"

MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape(
            name="llama3-8b",
            num_layers=32,
            d_model=4096,
            num_heads=32,
            num_kv_heads=8,
            head_dim=128,
            mlp_dim=14336,
            vocab_size=128256,
            maxtext_model_name="llama3-8b",
            source=_MAXTEXT + "models/llama3-8b.yml",
        ),
        ModelShape(
            name="llama3-70b",
            num_layers=80,
            d_model=8192,
            num_heads=64,
            num_kv_heads=8,
            head_dim=128,
            mlp_dim=28672,
            vocab_size=128256,
            maxtext_model_name="llama3-70b",
            source=_MAXTEXT + "models/llama3-70b.yml",
        ),
        ModelShape(
            name="default",
            num_layers=16,
            d_model=2048,
            num_heads=16,
            num_kv_heads=16,
            head_dim=128,
            mlp_dim=7168,
            vocab_size=32000,
            maxtext_model_name="default",
            source=_MAXTEXT + "base.yml (base_* defaults)",
        ),
        ModelShape(
            name="tiny",
            num_layers=2,
            d_model=256,
            num_heads=4,
            num_kv_heads=2,
            head_dim=64,
            mlp_dim=512,
            vocab_size=1024,
            maxtext_model_name=None,
            source="this repo (smoke-test shape, not a MaxText model)",
        ),
    )
}


def get_model(model: str | ModelShape, key: str = "model_name") -> ModelShape:
    """Look a model up by name (or pass a ModelShape through); unknown names are a ConfigError."""
    if isinstance(model, ModelShape):
        return model
    try:
        return MODELS[model]
    except (KeyError, TypeError):
        raise ConfigError(key, model, f"one of {', '.join(sorted(MODELS))}") from None
