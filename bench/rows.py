"""What a leaderboard row is: finished runs grouped by their config less the seed, their labels,
and the values a row takes on a swept axis. Shared by the table, its tests and its figures."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from architectures import ContractError, resolve
from datamodules import TASKS

from .config import ConfigError, content_hash, experiment

# The task fields every leaderboard row shows, default or not.
TASK_FIELDS = ("state_size", "sparsity", "n_cells", "n_colors", "n_rules", "n_states")


def label(section: dict[str, Any], schema: type | None, always: tuple[str, ...] = ()) -> str:
    """`name(field=value, ...)`: the fields in `always`, then those that differ from defaults."""
    defaults = {f.name: f.default for f in fields(schema)} if schema else {}
    keys = [k for k in always if k in section]
    keys += [k for k in section if k not in keys and k != "name" and defaults.get(k) != section[k]]
    shown = ", ".join(f"{k}={section[k]}" for k in keys)
    return f"{section['name']}({shown})" if shown else section["name"]


def _arch_schema(name: str) -> type | None:
    try:
        return resolve(name)
    except ContractError:  # a plug-in that is not importable here: show every field
        return None


def row_labels(config: dict[str, Any]) -> tuple[str, str]:
    """(task, architecture) as the leaderboard shows them."""
    return (label(config["task"], TASKS[config["task"]["name"]][0], TASK_FIELDS),
            label(config["arch"], _arch_schema(config["arch"]["name"])))


def group_key(config: dict[str, Any], without: tuple[str, ...] = ("seed",)) -> str:
    """Hash of a job's config less the seed: one leaderboard row per value."""
    config = {k: v for k, v in experiment(config).items() if k not in without}
    if "lr" in without:
        config["train"] = {k: v for k, v in config["train"].items() if k != "lr"}
    return content_hash(config, 10)


def by_row(results: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Finished runs grouped by leaderboard row (their config hash less the seed)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault(group_key(r["config"]), []).append(r)
    return groups


def survival_sample(runs: list[dict[str, Any]]) -> tuple[list[float], list[bool]]:
    """(steps-to-emergence, or the budget for a seed that never emerged; emerged or not)."""
    times = [r["steps_to_emergence"] if r["status"] == "emerged" else r["budget_steps"]
             for r in runs]
    return times, [r["status"] == "emerged" for r in runs]


def lr_preference(median: float, solve_rate: float, lr: float) -> tuple[float, float, float]:
    """Sort key of a learning rate: the lowest KM median steps-to-emergence, then the higher
    solve rate, then the smaller rate."""
    return median, -solve_rate, lr


# --- axes: a row's value on a swept factor ------------------------------------------------------
def axis_value(config: dict[str, Any], axis: str) -> float:
    """A row's value on an axis: `section.field` of its config, or `supports` = C(S, s)."""
    if axis == "supports":
        task = config["task"]
        if "sparsity" not in task:
            raise ConfigError(f"plots: 'supports' needs a linear_map task, got {task['name']}")
        return math.comb(task["state_size"], task["sparsity"])
    section, _, name = axis.partition(".")
    if name not in config.get(section, {}):
        raise ConfigError(f"plots: '{axis}' is not a field of every row's {section}")
    return config[section][name]


def series(config: dict[str, Any], axes: list[str]) -> str:
    """The row's label with the given fields taken out: rows that differ only on the axes."""
    trimmed = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    for axis in axes:
        section, _, name = axis.partition(".")
        trimmed.get(section, {}).pop(name, None)
    task, arch = trimmed["task"], trimmed["arch"]
    labels = [label(task, TASKS[task["name"]][0], TASK_FIELDS) if "name" in task else
              label({**task, "name": "task"}, None),
              label(arch, _arch_schema(arch["name"])) if "name" in arch else
              label({**arch, "name": "arch"}, None)]
    return " / ".join(dict.fromkeys(labels))


def covarying(rows: list[dict[str, Any]], axes: list[str]) -> list[str]:
    """Fields that are a function of the axes over these rows and vary with them (e.g.
    head_dim = width / n_heads): they belong to the axis, not to the series."""
    keyed = [(tuple(axis_value(r["job_config"], a) for a in axes), r["job_config"]) for r in rows]
    out = []
    for section in ("task", "arch", "train"):
        for name in sorted({k for _, c in keyed for k in c.get(section, {})}):
            field = f"{section}.{name}"
            seen: dict[tuple, set] = {}
            for values, config in keyed:
                seen.setdefault(values, set()).add(repr(config.get(section, {}).get(name)))
            if (field not in axes and all(len(v) == 1 for v in seen.values())
                    and len(set.union(*seen.values())) > 1):
                out.append(field)
    return out


def factor_groups(rows: list[dict[str, Any]], axes: list[str]):
    """{series label: [(axis values, row)]}: the rows that differ only on `axes` (and on the
    fields that move with them) share a series."""
    trim = ["task.sparsity" if a == "supports" else a for a in axes] + covarying(rows, axes)
    groups: dict[str, list[tuple[tuple[float, ...], dict[str, Any]]]] = {}
    for row in rows:
        config = row["job_config"]
        values = tuple(axis_value(config, a) for a in axes)
        groups.setdefault(series(config, trim), []).append((values, row))
    return groups
