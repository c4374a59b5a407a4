"""The tutorial's training runs, as data.

Each preset is the MaxText ``key=value`` list of one ``ray job submit`` command
of the GKE tutorial "Multislice and elastic training on TPUs using Ray Train",
in the tutorial's order. ``base_output_directory`` (from the stack's
``checkpointDir`` output, or the local run directory) goes first and
``run_name`` last, as in the tutorial; any key can be overridden on the
command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from components.errors import ConfigError

Backend = Literal["tpu", "cpu"]


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    maxtext: tuple[tuple[str, str], ...]
    """MaxText keys in argv order, without base_output_directory and run_name."""
    run_name: str
    """The tutorial's run name; the submit command makes it unique per run."""
    backend: Backend = "tpu"
    elastic: bool = False
    """Run with ``num_workers=(min, max)`` and ``FailureConfig(max_failures=3)``."""


_LLAMA3_8B = (
    ("dataset_type", "synthetic"),
    ("per_device_batch_size", "4"),
    ("max_target_length", "4096"),
    ("model_name", "llama3-8b"),
    ("steps", "100"),
    ("ici_fsdp_parallelism", "4"),
    ("ici_tensor_parallelism", "4"),
)

RESTART_CHECKPOINT_PERIOD = "25"
"""Steps between checkpoints of a run that may restart (elastic, Spot, --max-failures).

MaxText's base.yml says 10000, so a 100-step run checkpoints only at step 0 and
at the end, and a restart redoes everything. Every 25 steps bounds the loss to
25 steps (~50 s of the 8B run at the planner's ~2 s/step) while a ~90 GiB
8B checkpoint (float32 weights + Adam state) has time to reach the bucket
before the next one starts."""

PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            name="llama3-8b",
            description="Llama 3 8B baseline: FSDP 4 x tensor 4 inside each slice, data parallel over DCN",
            maxtext=_LLAMA3_8B,
            run_name="rayjob-multi-slice",
        ),
        Preset(
            name="llama3-70b",
            description="Llama 3 70B, 2D sharding: tensor 4 x FSDP 4 per slice, FSDP 2 over DCN, full remat",
            maxtext=(
                ("dataset_type", "synthetic"),
                ("per_device_batch_size", "2"),
                ("max_target_length", "4096"),
                ("model_name", "llama3-70b"),
                ("steps", "100"),
                ("ici_tensor_parallelism", "4"),
                ("ici_fsdp_parallelism", "4"),
                ("dcn_fsdp_parallelism", "2"),
                ("dcn_data_parallelism", "1"),
                ("remat_policy", "full"),
            ),
            run_name="rayjob-multi-slice-70b-fsdp",
        ),
        Preset(
            name="llama3-8b-elastic",
            description="The 8B baseline, elastic between the stack's elasticMinSlices and numSlices, "
            f"checkpointing every {RESTART_CHECKPOINT_PERIOD} steps",
            maxtext=(*_LLAMA3_8B, ("checkpoint_period", RESTART_CHECKPOINT_PERIOD)),
            run_name="rayjob-elastic-8b",
            elastic=True,
        ),
        Preset(
            name="tiny-cpu",
            description="A 2-layer, 64-wide decoder on CPU workers: the same trainer, minutes not hours",
            maxtext=(
                ("dataset_type", "synthetic"),
                ("hardware", "cpu"),
                ("per_device_batch_size", "1"),
                ("max_target_length", "64"),
                ("base_emb_dim", "64"),
                ("base_num_query_heads", "2"),
                ("base_num_kv_heads", "2"),
                ("base_mlp_dim", "128"),
                ("base_num_decoder_layers", "2"),
                ("head_dim", "32"),
                ("vocab_size", "256"),
                # base.yml's 3e-5 barely moves the loss in 10 steps; 1e-3 makes
                # "the loss went down" a real signal (6.1 -> 3.9 here).
                ("learning_rate", "1e-3"),
                ("steps", "10"),
                ("checkpoint_period", "5"),
            ),
            run_name="local-tiny",
            backend="cpu",
        ),
    )
}


def get_preset(name: str, key: str = "--preset") -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(key, name, f"one of {', '.join(PRESETS)}") from None
