"""A leaderboard's columns, as data: each is one entry (its CSV field, how it is computed from a
row's run records and Kaplan-Meier summary, its header and cell in the table, the convention it
follows), and the table, the conventions paragraph under it and the CSV all iterate this list.
A new statistic is one entry.

The list is in the CSV's order; `table_rank` orders the table's columns (the learning rate sits
beside the architecture there, at the end of the CSV). A field with no header is CSV only, or
shown inside another column's cell (the solve rate inside "solved").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.record import RunRecord
from ..core.stats import SurvivalSummary, finite_median

Row = dict[str, Any]


def steps_text(x: float, budget: float | None = None) -> str:
    """A step count as the table shows it: NA when undefined, > budget when not reached."""
    if math.isnan(x):
        return "NA"
    if math.isinf(x):
        return f"> {budget:.0f}" if budget else "not reached"
    return f"{x:.0f}"


def number(x: float | None, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


@dataclass(frozen=True)
class Column:
    name: str
    """the CSV field, and the row's key"""
    compute: Callable[[list[RunRecord], SurvivalSummary], Any] | None = None
    """the value from a row's runs and KM summary; None: set where the row is assembled (its
    labels, hash and learning rate)"""
    header: str | None = None
    """the table's header of the column this field leads; None: CSV only, or in another cell"""
    cell: Callable[[Row], str] | None = None
    """the table cell of a row (default: the value as text)"""
    null: Callable[[Row], str] | None = None
    """the cell in a null row (chance, no context, Bayes-optimal); default '-'"""
    table_rank: float = 0
    """the column's place in the table (the CSV keeps the list's order)"""
    convention: str = ""
    """the sentence(s) under the table that say how to read it"""
    lr_only: bool = False
    """shown only where the table has a learning-rate column (a grid or tuned rates)"""

    def text(self, row: Row) -> str:
        return self.cell(row) if self.cell else str(row[self.name])


def _solved(r: Row) -> str:
    return (f"{r['emerged']}/{r['seeds']} ({r['solve_rate']:.0%})"
            + (f", **{r['leaked']} leaked**" if r.get("leaked") else ""))


def _median(r: Row) -> str:
    ci = f"[{steps_text(r['median_ci_low'])}, {steps_text(r['median_ci_high'])}]"
    return f"{steps_text(r['median_steps'], r['budget'])} {ci}"


def _width(runs: list[RunRecord], km: SurvivalSummary) -> float:
    widths = [r.transition_width for r in runs if r.transition_width is not None]
    return statistics.median(widths) if widths else math.nan


def _width_note(runs: list[RunRecord], km: SurvivalSummary) -> str:
    missing = [r.width_note or "not recorded" for r in runs if r.transition_width is None]
    return "; ".join(f"{missing.count(n)} of {len(runs)}: {n}" for n in dict.fromkeys(missing))


MEDIAN = (
    "Steps-to-emergence are Kaplan-Meier estimates over seeds: a seed that never emerges is "
    "censored at its budget. Quantiles follow R survival's quantile.survfit: the first step "
    "where the survival curve is at or below 1 - q, the midpoint of a flat exactly there; "
    "\"> N\": fewer than that share of seeds emerged within the budget N. The 95% interval of "
    "the median is read off the log-log pointwise band (Brookmeyer-Crowley, survfit's "
    "conf.type = \"log-log\"); NA: that end is undefined (the band never crosses 0.5 at a "
    "defined point).")
WIDTH = (
    "Width: median steps from the end of the plateau (the last evaluation "
    "after step 0 at most 10% of the way from the no-context baseline to the ceiling) to the "
    "first of the final evaluations at 90% or more, over the seeds where a plateau was seen "
    "(the CSV's width_note says how many were not).")
ACCURACY = (
    "Held-out acc / train acc: median over seeds "
    "of the best token accuracy over all evaluations on the held-out transitions / on the fixed "
    "probe of training sequences; gap: median of the largest excess of train over held-out at "
    "one evaluation (memorisation shows as a large gap). Null rows: chance guesses uniformly; "
    "no context is the best predictor that reads no context (the per-position majority of the "
    "held-out set); Bayes-optimal (where a perfect score is out of reach) knows the rule pool "
    "and infers the active rule from the prefix.")
INSTANCES = (
    "Instances: distinct task instances (matrices "
    "or rule pools) among the seeds; flagged: seeds whose instance is degenerate (the CSV "
    "and result.json say how).")
STATE = (
    "State/layer: numbers one layer keeps per sequence to produce "
    "the next token at the task's full length (a recurrent state, or the cache or inputs it "
    "reads again).")
CONFIG = "Config: hash of the row's config less the seed."

COLUMNS: list[Column] = [
    Column("task", header="task", null=lambda r: r["task"], table_rank=0),
    Column("architecture", header="architecture", cell=lambda r: f"`{r['architecture']}`",
           null=lambda r: f"*{r['architecture']}*", table_rank=1),
    Column("seeds", lambda runs, km: len(runs)),
    Column("emerged", lambda runs, km: km.events, header="solved", cell=_solved, table_rank=3),
    Column("diverged", lambda runs, km: sum(r.status == "diverged" for r in runs)),
    Column("leaked", lambda runs, km: sum(r.status == "leaked" for r in runs)),
    Column("solve_rate", lambda runs, km: km.events / len(runs)),
    Column("median_steps", lambda runs, km: km.median, header="median steps [95% CI]",
           cell=_median, table_rank=4, convention=MEDIAN),
    Column("median_ci_low", lambda runs, km: km.ci_low),
    Column("median_ci_high", lambda runs, km: km.ci_high),
    Column("q1_steps", lambda runs, km: km.q1, header="quartiles", table_rank=5,
           cell=lambda r: f"{steps_text(r['q1_steps'], r['budget'])} to "
                          f"{steps_text(r['q3_steps'], r['budget'])}"),
    Column("q3_steps", lambda runs, km: km.q3),
    Column("median_width", _width, header="width", table_rank=6, convention=WIDTH,
           cell=lambda r: "-" if math.isnan(r["median_width"]) else f"{r['median_width']:.0f}"),
    Column("width_note", _width_note),
    Column("heldout_acc",
           lambda runs, km: finite_median([r.accuracy.heldout_token_acc for r in runs]),
           header="held-out acc", cell=lambda r: number(r["heldout_acc"]),
           null=lambda r: number(r["heldout_acc"]), table_rank=7, convention=ACCURACY),
    Column("train_acc", lambda runs, km: finite_median([r.accuracy.train_token_acc for r in runs]),
           header="train acc", cell=lambda r: number(r["train_acc"]), table_rank=8),
    Column("gap", lambda runs, km: finite_median([r.accuracy.gap for r in runs]),
           header="gap", cell=lambda r: number(r["gap"]), table_rank=9),
    Column("instances", lambda runs, km: len({r.instance_seed for r in runs}),
           header="instances", table_rank=10, convention=INSTANCES,
           cell=lambda r: f"{r['instances']}" + (f" ({r['flagged']} flagged)" if r["flagged"]
                                                 else "")),
    Column("flagged", lambda runs, km: sum(bool(r.task_flags) for r in runs)),
    Column("params", lambda runs, km: runs[0].n_params, header="params", table_rank=11,
           cell=lambda r: f"{r['params']:,}"),
    Column("state_per_layer", lambda runs, km: runs[0].state_per_layer, header="state/layer",
           table_rank=12, convention=STATE,
           cell=lambda r: "-" if r["state_per_layer"] is None else f"{r['state_per_layer']:,}"),
    Column("steps_per_s", lambda runs, km: statistics.median(r.steps_per_s for r in runs),
           header="steps/s", cell=lambda r: f"{r['steps_per_s']:.1f}", table_rank=13),
    Column("config", header="config", cell=lambda r: f"`{r['config']}`",
           null=lambda r: f"`{r['config']}`", table_rank=14, convention=CONFIG),
    Column("lr", header="lr", table_rank=2, lr_only=True,
           cell=lambda r: f"{r['lr']:g}" + (f" (of {r['lr_grid']})" if r["lr_grid"] else "")),
    Column("lr_grid"),
]


def csv_fields() -> list[str]:
    """The CSV's header: every column's field, in the list's order."""
    return [c.name for c in COLUMNS]


def table_columns(lr_column: bool) -> list[Column]:
    """The columns the table shows, in its order."""
    shown = [c for c in COLUMNS if c.header and (lr_column or not c.lr_only)]
    return sorted(shown, key=lambda c: c.table_rank)


def computed(runs: list[RunRecord], km: SurvivalSummary) -> Row:
    """Every computed field of a row."""
    return {c.name: c.compute(runs, km) for c in COLUMNS if c.compute}


CONVENTIONS = " ".join(c.convention for c in table_columns(True) if c.convention)
"""the paragraph under every table"""
