"""A row's value on a swept axis: a config field (`arch.n_heads`) or an axis its task derives
from its fields (a linear map's `supports` = C(S, s)). Torch-free: tables and figures use it."""

from __future__ import annotations

from typing import Any

from datamodules import TASKS

from ..core.errors import ConfigError


class AxisError(ConfigError):
    """An axis a row's config cannot give; the message names the axis, and the caller the spec
    section that asked for it (`plots:`, `tests:`)."""


DERIVED_AXES = {axis: info for schema in TASKS.values() for axis, info in schema.DERIVED.items()}


def derived_axis(axis: str) -> tuple[str, str] | None:
    """(the field it stands in for, its figure title) of an axis a task derives, else None."""
    return DERIVED_AXES.get(axis)


def axis_value(config: dict[str, Any], axis: str) -> float:
    """A row's value on an axis: `section.field` of its config, or an axis its task derives
    from its fields (a linear map's `supports` = C(S, s))."""
    if "." not in axis:
        task = config["task"]
        schema = TASKS[task["name"]]
        if axis not in schema.DERIVED:
            raise AxisError(f"'{axis}' is not an axis of the {task['name']} task; "
                            f"its derived axes: {', '.join(schema.DERIVED) or 'none'}")
        return schema.derived(axis, task)
    if axis.startswith("pretrain."):  # a warm-up field; from scratch reads `none`
        value: Any = config.get("pretrain") or "none"
        for key in axis.split(".")[1:]:
            value = value.get(key, "none") if isinstance(value, dict) else "none"
        return value
    section, _, name = axis.partition(".")
    if name not in config.get(section, {}):
        raise AxisError(f"'{axis}' is not a field of every row's {section}")
    return config[section][name]
