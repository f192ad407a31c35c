"""Config sections from overrides and YAML: OmegaConf structured dataclasses with one-line
errors naming the field. Torch-free (task configs are), so a command can validate a task before
it imports torch; the run config (bench.training.config) builds on it."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from datamodules import TASKS, TaskConfig

from ..core.errors import ConfigError


def _one_line(error: OmegaConfBaseException) -> str:
    key = getattr(error, "full_key", None) or "config"
    msg = str(getattr(error, "msg", error)).splitlines()[0]
    return f"{key}: {msg}"


def parse_overrides(overrides: list[str] | dict[str, Any] | DictConfig) -> DictConfig:
    """`key=value` items (or a nested dict) as an OmegaConf tree; a malformed item is one line."""
    if isinstance(overrides, DictConfig):
        return overrides
    if isinstance(overrides, dict):
        return OmegaConf.create(_plain(overrides))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"{item}: expected key=value")
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as e:
        raise ConfigError(_one_line(e)) from None
    except yaml.YAMLError as e:  # a value OmegaConf's YAML loader refuses
        keys = ", ".join(item.split("=", 1)[0] for item in overrides)
        raise ConfigError(f"{keys}: {yaml_problem(e)}") from None


YAML_NODES = 10_000  # OmegaConf's default max_yaml_expanded_nodes (its guard against alias bombs)


def yaml_problem(e: Exception) -> str:
    """One line for a YAML loading error: OmegaConf's node limit said as what it means here (a
    list of more values than any config needs), else the error's first line."""
    if "node expansion exceeds" in str(e):
        return (f"more than {YAML_NODES:,} values: larger than any config needs (give a count, "
                "e.g. seeds: 8, or a shorter list)")
    return str(e).strip().splitlines()[0]


def _plain(value: Any) -> Any:
    """A nested dict with numpy scalars (a pandas row's values) as plain Python values."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        return value.item()
    return value


def build_section(schema: type, raw: Any, section: str) -> Any:
    """Merge `raw` into the dataclass `schema` and build it, naming `section` in any error.
    Beyond the types OmegaConf checks: a boolean is true or false (not 7), a float is finite."""
    where = f"{section}." if section else ""
    try:
        _check_booleans(schema, raw or {})
        _check_containers(schema, raw or {})
        built = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), raw or {}))
        for f in dataclasses.fields(built):
            value = getattr(built, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{f.name}: must be a finite number, got {value}")
        return built
    except OmegaConfBaseException as e:
        line = _one_line(e)
        if "not in" in line:
            allowed = ", ".join(f.name for f in dataclasses.fields(schema))
            line = f"{line.split(':')[0]}: unknown key; allowed: {allowed}"
        raise ConfigError(f"{section}.{line}" if section else line) from None
    except ValueError as e:
        raise ConfigError(f"{where}{e}") from None
    except Exception as e:  # a plug-in config's own __post_init__ may raise anything
        raise ConfigError(f"{section or 'config'}: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}") from None


def _check_booleans(schema: type, raw: Any) -> None:
    """OmegaConf reads any integer as a boolean; a boolean field takes true or false only."""
    for f in dataclasses.fields(schema):
        if f.type in (bool, "bool") and f.name in raw:
            value = raw[f.name]
            if not (isinstance(value, bool) or str(value).lower() in ("true", "false")):
                raise ValueError(f"{f.name}: must be true or false, got {value!r}")


def _check_containers(schema: type, raw: Any) -> None:
    """A list field given a mapping, or a mapping field a list, named (OmegaConf's merge error
    names neither the field nor what it takes)."""
    wrong = {"list": ((dict, DictConfig), "a list"), "dict": ((list, ListConfig), "a mapping")}
    for f in dataclasses.fields(schema):
        kind = str(f.type).split("[")[0]
        if kind in wrong and f.name in raw and isinstance(raw[f.name], wrong[kind][0]):
            raise ValueError(f"{f.name}: must be {wrong[kind][1]}, got {raw[f.name]!r}")


def task_schema(name: Any, where: str = "") -> type:
    """The task config dataclass `task.name` selects (`where` prefixes the field: `pretrain.`)."""
    if name not in TASKS:
        raise ConfigError(f"{where}task.name: unknown '{name}'; allowed: {', '.join(TASKS)}")
    return TASKS[name]


def load_task_config(overrides: list[str] | dict[str, Any]) -> TaskConfig:
    """A task section from `key=value` items (no `task.` prefix), validated."""
    raw = parse_overrides(overrides)
    return build_section(task_schema(OmegaConf.select(raw, "name", default="linear_map")),
                         raw, "task")
