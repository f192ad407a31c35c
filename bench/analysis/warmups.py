"""Warm-ups: what each row's warm-up cost and whether the steps it saved repaid it. The
leaderboard's warm-up section, shown when a row trained after a warm-up (`pretrain`).

Per warm-up row: the warm-up task, its steps and tokens per run, the median of its own held-out
token accuracy at the end of the warm-up (beside that task's ceiling: did the warm-up learn its
corpus?), and the target's Kaplan-Meier median steps-to-emergence against the from-scratch row
that differs only in the warm-up. **Saved** is the from-scratch median minus the warm-up
row's; **repaid** means the steps saved are at least the warm-up's own steps (a step of either
phase is one batch through the same model; the tokens per step differ with the two tasks'
lengths, shown). A median past the budget makes the difference a bound (`>`), or undefined
when both are past it.
"""

from __future__ import annotations

import math
from typing import Any

from ..core import markdown
from ..core.rows import group_key
from ..core.stats import finite_median


def scratch_key(config: dict[str, Any]) -> str:
    """The row key of the same configuration trained from scratch."""
    return group_key({**config, "pretrain": None})


def saved(scratch: float, warm: float, budget: int, cost: int) -> tuple[str, bool | None]:
    """(target steps saved as text, repaid: saved >= `cost` warm-up steps; None where the
    medians past the `budget` leave it undetermined)."""
    if math.isinf(scratch) and math.isinf(warm):
        return "-", None
    if math.isinf(scratch):  # the scratch median lies past the budget: saved > budget - warm
        bound = budget - warm
        return f"> {bound:,.0f}", True if bound >= cost else None
    if math.isinf(warm):  # saved < scratch - budget <= 0
        return f"< {scratch - budget:,.0f}", False
    return f"{scratch - warm:+,.0f}", scratch - warm >= cost


def warmup_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The warm-up section (empty when no row warmed up)."""
    by_key = {r["config"]: r for r in rows}
    out = []
    for row in rows:
        config = row["job_config"]
        pre = config.get("pretrain")
        if not pre:
            continue
        records = [r.pretrain for r in row["runs"] if isinstance(r.pretrain, dict)]
        if not records:
            continue
        base = by_key.get(scratch_key(config))
        text, repaid = (saved(base["median_steps"], row["median_steps"], row["budget"],
                              pre["steps"]) if base else ("no from-scratch row", None))
        acc = finite_median([r.get("heldout_token_acc") or math.nan for r in records])
        out.append([row["task"], f"`{row['architecture']}`", pre["task"]["name"],
                    f"{pre['steps']:,}", f"{records[0]['tokens']:,}",
                    f"{acc:.3f} of {records[0]['ceiling_token_acc']:.3f}",
                    _steps(base["median_steps"]) if base else "-",
                    _steps(row["median_steps"]), text,
                    {True: "yes", False: "no", None: "undetermined"}[repaid]])
    if not out:
        return []
    return ["Warm-ups: each warm-up row's cost and the target steps it saved against the same "
            "configuration from scratch (Kaplan-Meier medians; repaid: saved >= the warm-up's "
            "own steps; a description of the medians, not a test: the tests above say whether "
            "a difference is detected; its held-out accuracy is on the warm-up task's own "
            "held-out part, against that task's ceiling).", "",
            *markdown.table(["task", "architecture", "warm-up", "warm-up steps",
                             "warm-up tokens", "warm-up held-out acc", "median from scratch",
                             "median after warm-up", "steps saved", "repaid"], out)]


def _steps(value: float) -> str:
    return "never" if math.isinf(value) else f"{value:,.0f}"
