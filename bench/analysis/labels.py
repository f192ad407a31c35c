"""What a leaderboard row is: finished runs grouped by their config less the seed, their labels,
and the values a row takes on a swept axis. Shared by the table, its tests and its figures."""

from __future__ import annotations

import functools
import re
from typing import Any

from datamodules import TASKS

from ..core.record import TORCH_INIT
from ..core.schema import field_defaults
from ..sweeps.axes import AxisError, axis_value, derived_axis

Recorded = dict[str, dict[str, Any]]
"""Architecture defaults as the sweep that made a database recorded them (its `arch_defaults`
meta, by architecture name): labels read from a database with them need no torch and show
what differed from the defaults the runs had, even for a plug-in not importable here."""


NO_DEFAULTS = {"init": TORCH_INIT}
"""An architecture's defaults where no architecture is named (its name is the axis): every field
is shown but `init` at PyTorch's defaults, which every run recorded before the field had."""


def label(section: dict[str, Any], defaults: dict[str, Any] | None,
          always: tuple[str, ...] = ()) -> str:
    """`name(field=value, ...)`: the fields in `always`, then those that differ from `defaults`
    (every field where the defaults are unknown)."""
    defaults = defaults or {}
    keys = [k for k in always if section.get(k) is not None]  # None: a field that does not apply
    keys += [k for k in section if k not in keys and k != "name" and section[k] is not None
             and defaults.get(k) != section[k]]
    shown = ", ".join(f"{k}={section[k]}" for k in keys)
    return f"{section['name']}({shown})" if shown else section["name"]


def task_label(task: dict[str, Any]) -> str:
    """The task as tables show it: the fields it always shows, then those off their defaults."""
    schema = TASKS[task["name"]]
    return label(task, field_defaults(schema), schema.SHOWN)


def arch_defaults(name: str, recorded: Recorded | None = None) -> dict[str, Any] | None:
    """The recorded defaults of an architecture, else its config class's (this imports the
    architectures, and torch); None for a plug-in that is not importable here."""
    if recorded and name in recorded:  # a database from before `init` ran PyTorch's defaults
        return {"init": TORCH_INIT} | recorded[name]
    return _class_defaults(name)


@functools.cache
def _class_defaults(name: str) -> dict[str, Any] | None:
    from architectures import ContractError, resolve

    try:
        return field_defaults(resolve(name))
    except ContractError:
        return None


def row_labels(config: dict[str, Any], recorded: Recorded | None = None) -> tuple[str, str]:
    """(task, architecture) as the leaderboard shows them, the architecture's fields against
    the `recorded` defaults of the database the run came from; a warm-up is part of the
    architecture's history, shown after it."""
    arch = label(config["arch"], arch_defaults(config["arch"]["name"], recorded))
    return task_label(config["task"]), arch + warmup_label(config.get("pretrain"))


def warmup_label(pretrain: dict[str, Any] | None) -> str:
    """` after dyck(...) x500 (body)`, or nothing for a run from scratch."""
    if not pretrain:
        return ""
    return (f" after {task_label(pretrain['task'])} x{pretrain['steps']} "
            f"(lr {pretrain['lr']:g}, {pretrain['transfer']})")


# --- axes: a row's value on a swept factor ------------------------------------------------------
def series(config: dict[str, Any], axes: list[str],
           defaults: dict[str, Any] | None = None) -> str:
    """The row's label with the given fields taken out: rows that differ only on the axes;
    `defaults`: its architecture's (else read off its config class)."""
    trimmed = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    for axis in axes:
        section, _, name = axis.partition(".")
        (trimmed.get(section) or {}).pop(name, None)
    task, arch = trimmed["task"], trimmed["arch"]
    labels = [task_label(task) if "name" in task else
              label({**task, "name": "task"}, None),
              label(arch, defaults if defaults is not None else arch_defaults(arch["name"]))
              if "name" in arch else
              label({**arch, "name": "arch"}, NO_DEFAULTS)]
    if not any(a.startswith("pretrain.") for a in axes):  # warm-ups differ between series
        labels[-1] += warmup_label(config.get("pretrain"))
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


def lacking(rows: list[dict[str, Any]], axes: list[str]) -> list[dict[str, Any]]:
    """The rows whose config has no value on one of `axes` (a row `bench compare` added with
    other fields): left out of the tests and plots on those axes. A sweep's own rows never
    lack one (checked before it runs)."""
    out = []
    for row in rows:
        try:
            for a in axes:
                axis_value(row["job_config"], a)
        except AxisError:
            out.append(row)
    return out


def natural_key(text: str) -> tuple:
    """Sort key that orders the numbers inside a label by value: 'S=8' before 'S=12'."""
    return tuple((0, float(part), "") if i % 2 else (1, 0.0, part)
                 for i, part in enumerate(re.split(r"(\d+(?:\.\d+)?)", text)))


def factor_groups(rows: list[dict[str, Any]], axes: list[str]):
    """{series label: [(axis values, row)]}: the rows that differ only on `axes` (and on the
    fields that move with them) share a series; rows without a value on an axis are left out
    (`lacking`)."""
    left_out = {id(r) for r in lacking(rows, axes)}
    if rows and len(left_out) == len(rows):  # no row has it: the axis itself is wrong
        for a in axes:
            axis_value(rows[0]["job_config"], a)  # raises, naming the axis
    rows = [r for r in rows if id(r) not in left_out]
    trim = [f"task.{derived_axis(a)[0]}" if derived_axis(a) else a for a in axes]
    # a derived axis stands in for one field (supports = C(S, s) for S): the task's other fields
    # (s) stay series even where every cell's C(S, s) is distinct and so determines them
    trim += covarying(rows, [a for a in axes if not derived_axis(a)])
    groups: dict[str, list[tuple[tuple[float, ...], dict[str, Any]]]] = {}
    for row in rows:
        config = row["job_config"]
        values = tuple(axis_value(config, a) for a in axes)
        groups.setdefault(series(config, trim, row.get("arch_defaults")), []).append(
            (values, row))
    return groups
