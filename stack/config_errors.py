"""The wording of a config the key table refuses: pydantic's first error, as one ConfigError under the key the
user set (``gke-ray-tpu:runs[0].minSlices``), with the value they wrote and what the key takes, in words read
from the key table (a field's type, bounds, choices or example)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Mapping, Union, get_args, get_origin

from annotated_types import Ge, Le
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from gke_ray_tpu.core.errors import ConfigError
from gke_ray_tpu.stack.config import RUN_EXAMPLE, DeclaredRun, StackConfig


def config_error(error: ValidationError, raw: Mapping[str, str]) -> ConfigError:
    """The first problem, under the key the user set (``gke-ray-tpu:runs[0].minSlices``) and with the value they wrote."""
    first = error.errors()[0]
    loc = first["loc"]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):
        # A rule of a run's field names the field: the run goes in front of it.
        return cause if len(loc) <= 1 or ":" in cause.key else cause.renamed(f"{_key(loc[:-1])}.{cause.key}")
    if len(loc) == 1:
        value = raw.get(loc[0])
        if first["type"] in ("greater_than_equal", "less_than_equal"):
            value = _INTEGER.validate_python(value)  # the number read, out of bounds; else what was written
        expected = "a value (set it with `pulumi config set`)" if first["type"] == "missing" else _expected(loc, first["type"])
        return ConfigError(loc[0], value, expected)
    return ConfigError(_key(loc), None if first["type"] == "missing" else first["input"], _expected(loc, first["type"]))


_INTEGER = TypeAdapter(int)


def _key(loc: tuple) -> str:
    return loc[0] + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc[1:])


def _fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A model's fields by the key a user writes."""
    return {field.alias or name: field for name, field in model.model_fields.items()}


def _expected(loc: tuple, error_type: str) -> str:
    """What the value at ``loc`` (a key, or a run's index and field) takes, in words."""
    if len(loc) == 1:
        return _words(_fields(StackConfig)[loc[0]])
    if len(loc) == 2:
        return f"an object such as {json.dumps(RUN_EXAMPLE)}"
    if error_type == "extra_forbidden":
        return f"a known field: {', '.join(_fields(DeclaredRun))}"
    return _words(_fields(DeclaredRun)[loc[2]])


def _words(field: FieldInfo) -> str:
    """A field's type and bounds in words, unless it says otherwise (``json_schema_extra={"expected": ...}``)."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if "expected" in extra:
        return str(extra["expected"])
    kind = _bare(field.annotation)
    if field.examples:
        return f"a JSON {(get_origin(kind) or kind).__name__} such as {field.examples[0]}"
    if get_origin(kind) is Literal:
        return f"one of {', '.join(map(str, get_args(kind)))}"
    if kind is bool:
        return "true or false"
    if kind is int:
        low = next(m.ge for m in field.metadata if isinstance(m, Ge))
        high = next((m.le for m in field.metadata if isinstance(m, Le)), None)
        return f"an integer between {low} and {high}" if high is not None else f"an integer >= {low}"
    return "a string"


def _bare(annotation: Any) -> Any:
    """The type under Optional[...] and Annotated[...]."""
    if get_origin(annotation) is Union:
        (annotation,) = [arg for arg in get_args(annotation) if arg is not type(None)]
    return get_args(annotation)[0] if get_origin(annotation) is Annotated else annotation
