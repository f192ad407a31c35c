"""What identifies a job and a leaderboard row: a content hash of the resolved config's
experiment sections (a job id with the seed, a row without).
Pure Python: sweeps, tables and figures all key by these."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .record import TORCH_INIT, RunRecord, upgrade_config

NOT_THE_EXPERIMENT = ("measure", "runtime", "plugins")
"""what is measured, how and where it runs, and where a mixer's code lives: sections, whole"""


def experiment(config: dict[str, Any]) -> dict[str, Any]:
    """A resolved config (as a dict, of any age: read through upgrade_config) less the sections
    that are not the experiment: the part job ids and leaderboard rows are keyed by (results
    from before a measurement existed match, and a GPU rerun of a CPU leaderboard lands in the
    same rows)."""
    config = upgrade_config(config)
    out = {k: v for k, v in config.items()  # no warm-up: ids as before the field existed
           if k not in NOT_THE_EXPERIMENT and not (k == "pretrain" and v is None)}
    if isinstance(config.get("arch"), dict) and config["arch"].get("init") == TORCH_INIT:
        # PyTorch's defaults, what every record before the field ran: their ids as they were
        out["arch"] = {k: v for k, v in config["arch"].items() if k != "init"}
    return out


def content_hash(data: Any, length: int) -> str:
    """Hex digest of `data` as canonical JSON (sorted keys)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:length]


def job_id(config: dict[str, Any]) -> str:
    """A resolved config's job id: the same job has the same id anywhere."""
    return content_hash(experiment(config), 12)


def group_key(config: dict[str, Any], without: tuple[str, ...] = ("seed",)) -> str:
    """Hash of a job's config less the seed: one leaderboard row per value."""
    config = {k: v for k, v in experiment(config).items() if k not in without}
    if "lr" in without:
        config["train"] = {k: v for k, v in config["train"].items() if k != "lr"}
    return content_hash(config, 10)


def by_row(results: list[RunRecord]) -> dict[str, list[RunRecord]]:
    """Finished runs grouped by leaderboard row (their config hash less the seed)."""
    groups: dict[str, list[RunRecord]] = {}
    for r in results:
        groups.setdefault(group_key(r.config), []).append(r)
    return groups


def survival_sample(runs: list[RunRecord]) -> tuple[list[float], list[bool]]:
    """(steps-to-emergence, or the budget for a seed that never emerged; emerged or not)."""
    return [r.survival_time for r in runs], [r.emerged for r in runs]


def lr_preference(median: float, solve_rate: float, lr: float) -> tuple[float, float, float]:
    """Sort key of a learning rate: the lowest KM median steps-to-emergence, then the higher
    solve rate, then the smaller rate."""
    return median, -solve_rate, lr
