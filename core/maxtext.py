"""The MaxText keys this project reads or reasons about, in one typed form.

MaxText merges its ``base.yml``, a model overlay and the ``key=value`` items of
its command line; OmegaConf types command-line values as YAML scalars (``4`` is
an int, ``1e-3`` a float, ``true`` a bool). Presets, stack config and the job
spec hold MaxText settings as such typed values. Text becomes a value once, at
the edge (:func:`parse_value`, for ``key=value`` typed on a command line), and a
value becomes text once, when the trainer's command line is rendered
(:func:`render`).

:data:`BASE_DEFAULTS` are MaxText 0.2.5's ``base.yml`` values of the keys the
estimates and the submit command read (``tests/test_core_maxtext.py`` compares
them, and the value vocabularies below, with the installed MaxText).
:func:`check_settings` applies the type and range rule of each of those keys,
so a zero batch size or a fractional step count is refused before a job or a
preview uses it.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Mapping, Union

from core.errors import ConfigError
from core.parallelism import mesh_values

Value = Union[str, int, float, bool]

BASE_DEFAULTS: dict[str, Value] = {
    "model_name": "default",
    "per_device_batch_size": 12.0,
    "max_target_length": 2048,
    "steps": 150_001,
    "checkpoint_period": 10_000,
    "remat_policy": "full",
    "weight_dtype": "float32",
    "dtype": "bfloat16",
    "grad_dtype": "float32",
    "mu_dtype": "",
    "opt_type": "adamw",
}

DTYPES = ("bfloat16", "float32", "float16", "float8_e4m3fn", "float8_e5m2")
"""MaxText's ``DType`` values (``configs/types.py``)."""
REMAT_POLICIES = (
    "full",
    "none",
    "minimal",
    "minimal_with_context",
    "minimal_flash",
    "minimal_with_quantization",
    "minimal_with_context_and_quantization",
    "save_dot_with_context_except_mlp",
    "save_dot_except_mlpwi",
    "save_dot_except_mlp",
    "save_qkv_proj",
    "qkv_proj_offloaded",
    "minimal_offloaded",
    "custom",
    "save_out_proj",
)
"""The policies MaxText's decoder accepts (``get_remat_policy``: anything else fails an assertion)."""
OPTIMIZERS = ("adamw", "adam_pax", "sgd", "muon")
"""MaxText's ``OptimizerType`` values."""


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _one_of(choices: tuple[str, ...], allow_empty: bool = False) -> tuple[Callable[[object], bool], str]:
    shown = ", ".join(choices) + (" or '' (inherit)" if allow_empty else "")
    return (lambda value: value in choices or (allow_empty and value == "")), f"one of {shown}"


RULES: dict[str, tuple[Callable[[object], bool], str]] = {
    "model_name": (lambda value: isinstance(value, str) and bool(value), "a MaxText model name"),
    "per_device_batch_size": (lambda value: _number(value) and value > 0, "a number > 0"),
    "max_target_length": (_positive_int, "an integer >= 1"),
    "steps": (_positive_int, "an integer >= 1 (the submit command counts the steps)"),
    "checkpoint_period": (_positive_int, "an integer >= 1"),
    "remat_policy": _one_of(REMAT_POLICIES),
    "weight_dtype": _one_of(DTYPES),
    "dtype": _one_of(DTYPES),
    "grad_dtype": _one_of(DTYPES),
    "mu_dtype": _one_of(DTYPES, allow_empty=True),
    "opt_type": _one_of(OPTIMIZERS),
}
"""key -> (rule, what a valid value is)."""


def check_settings(values: Mapping[str, object], key: Callable[[str], str] = lambda name: name) -> None:
    """Raise ConfigError for the first value that breaks its key's rule.

    ``key`` turns a MaxText key into the name the user set it under (for a
    stack: ``gke-ray-tpu:plannedOverrides.steps``). Mesh keys get the sharding
    check's own value rule (an integer >= 1, or -1).
    """
    for name, value in values.items():
        rule = RULES.get(name)
        if rule is not None and not rule[0](value):
            raise ConfigError(key(name), value, rule[1])
    for kind in ("ici", "dcn"):
        try:
            mesh_values(values, kind)
        except ConfigError as error:
            raise error.renamed(key(error.key)) from None


# No leading zeros: YAML 1.1 would read 010 as octal 8, so such text stays text (and fails a count's rule).
_INT = re.compile(r"[-+]?(0|[1-9][0-9]*(_[0-9]+)*)")
_FLOAT = re.compile(r"[-+]?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")


def parse_value(text: str) -> Value:
    """A command-line value as MaxText's parser types it: int, float, bool or text."""
    if _INT.fullmatch(text):
        return int(text.replace("_", ""))
    if _FLOAT.fullmatch(text):
        return float(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def render(value: Value) -> str:
    """A typed value as ``key=value`` text that parses back to the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)
