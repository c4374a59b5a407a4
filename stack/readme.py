"""The docs' generated part: the config table of docs/deploy.md, rendered from the config model.

``tests/test_readme.py`` keeps docs/deploy.md's table equal to this one;
``python -m gke_ray_tpu.stack.readme`` prints it for pasting.
"""

from __future__ import annotations

import json

from gke_ray_tpu.stack.config import NAMESPACE, StackConfig


def config_table() -> str:
    """The config table of docs/deploy.md, from the model: key, default, notes."""
    rows = ["| key | default | notes |", "|---|---|---|"]
    for field in StackConfig.model_fields.values():
        alias = field.alias or ""
        key = alias.split(":", 1)[1] if alias.startswith(NAMESPACE + ":") else alias
        if field.is_required():
            default = "required"
        elif field.default_factory is not None:
            default = f"`{json.dumps(field.default_factory())}`"
        elif field.default is None:
            default = "unset"
        elif isinstance(field.default, (bool, tuple)):
            default = f"`{json.dumps(field.default)}`"
        else:
            default = f"`{field.default}`"
        rows.append(f"| `{key}` | {default} | {field.description} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(config_table())
