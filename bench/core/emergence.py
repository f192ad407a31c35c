"""Emergence detection: a typed criterion, and a tracker over evaluations.

A run *emerges* at the first evaluation step from which the criterion holds for `consecutive`
evaluations in a row (a crossing that falls back does not count). A run whose loss goes
non-finite is *diverged*; one that never emerges within its budget is *censored* at the budget.

This module owns the definitions every table and figure uses: a metric's direction
(`higher_is_better`), progress (0 at the task's no-context baseline, 1 at its Bayes ceiling), the
plateau and the transition width. Evaluation runs at step 0 too. The plateau ends at the last
evaluation after step 0 that sits at most 10% of the way up, before the final run of evaluations
at 90% or more; the width is the steps from there to the first of that run. A run whose curve
left the baseline before its first evaluation after step 0 has no observed plateau, and no width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

Metric = Literal["val/loss", "val/token_acc", "val/exact_acc"]
SCREEN_MARGIN = 0.2
"""progress below the threshold's at which a screened evaluation still evaluates the whole set"""


def on_plateau(step: int, plateau_end: int | None) -> bool:
    """Whether `step` lies on a run's plateau (at or before its recorded end): where attention
    patching's pre-emergence model must come from."""
    return plateau_end is not None and step <= plateau_end


@dataclass
class EmergenceCriterion:
    metric: Metric = "val/token_acc"
    """held-out metric the criterion reads"""
    threshold: float = 0.99
    """the metric must reach this (at least for accuracies, at most for the loss)"""
    consecutive: int = 2
    """evaluations in a row that must hold the threshold to confirm emergence"""
    stop_early: bool = True
    """stop training once emergence is confirmed"""

    def __post_init__(self) -> None:
        if not 1 <= self.consecutive <= 10_000:
            raise ValueError(f"consecutive: must be in 1..10000, got {self.consecutive}")
        if self.higher_is_better and not 0 < self.threshold <= 1:
            raise ValueError(
                f"threshold: must be in (0, 1] for {self.metric}, got {self.threshold}"
            )
        if not self.higher_is_better and not 0 < self.threshold < math.inf:  # NaN fails too
            raise ValueError(f"threshold: must be a finite number > 0 for {self.metric}, "
                             f"got {self.threshold}")

    @property
    def higher_is_better(self) -> bool:
        return higher_is_better(self.metric)

    def holds(self, value: float) -> bool:
        return value >= self.threshold if self.higher_is_better else value <= self.threshold


def higher_is_better(metric: str) -> bool:
    """Accuracies rise as a model learns; the loss falls."""
    return metric != "val/loss"


def reference_key(metric: str) -> str:
    """The key of a metric in a task's references (`val/token_acc` -> `token_acc`)."""
    return metric.split("/", 1)[1]


def check_threshold(criterion: EmergenceCriterion, references: dict[str, dict[str, float]]) -> None:
    """The threshold must lie strictly between what a predictor that reads no context scores and
    what the Bayes-optimal predictor scores (a perfect score may be asked of a deterministic
    task): otherwise every run emerges at once or none ever can."""
    key, t = reference_key(criterion.metric), criterion.threshold
    base, top = references["no_context"][key], references["ceiling"][key]
    allowed = f"allowed: between the no-context baseline {base:.4g} and the Bayes ceiling {top:.4g}"
    if criterion.higher_is_better:
        beyond, trivial = (t > top or (t == top and top < 1)), t <= base
    else:
        beyond, trivial = (t < top or (t == top and top > 0)), t >= base
    if beyond:
        raise ValueError(f"threshold: {t:g} for {criterion.metric} is beyond this task's "
                         f"Bayes ceiling, so no run can emerge; {allowed}")
    if trivial:
        raise ValueError(f"threshold: {t:g} for {criterion.metric} is met without reading the "
                         f"context; {allowed}")


Status = Literal["running", "emerged", "censored", "diverged", "leaked"]


@dataclass
class EmergenceTracker:
    """Feeds on (step, value) evaluations; pure Python so constructed curves can test it."""

    criterion: EmergenceCriterion
    baseline: float
    """the metric's value without context (the task's no-context predictor): progress 0"""
    solved: float
    """the metric's value when solved (the task's Bayes ceiling): progress 1"""
    history: list[tuple[int, float]] = field(default_factory=list)
    status: Status = "running"
    step: int | None = None
    wall_time_s: float | None = None
    _streak_start: tuple[int, float] | None = None
    _streak: int = 0

    def update(self, step: int, value: float, wall_time_s: float = 0.0) -> Status:
        if self.status != "running":
            return self.status
        self.history.append((step, value))
        if not math.isfinite(value):
            self.status, self.step = "diverged", step
        elif self.criterion.holds(value):
            if self._streak == 0:
                self._streak_start = (step, wall_time_s)
            self._streak += 1
            if self._streak >= self.criterion.consecutive:
                self.status = "emerged"
                self.step, self.wall_time_s = self._streak_start
        else:
            self._streak, self._streak_start = 0, None
        return self.status

    @property
    def crossing(self) -> int | None:
        """The evaluation step where the current (or confirmed) run of passing evaluations
        began: the emergence step once emerged, a candidate before; None otherwise."""
        if self.status == "emerged":
            return self.step
        return self._streak_start[0] if self.status == "running" and self._streak_start else None

    def state(self) -> dict[str, Any]:
        """What a resumed run needs to continue this tracker (plain values)."""
        return {"history": [list(h) for h in self.history], "status": self.status,
                "step": self.step, "wall_time_s": self.wall_time_s,
                "streak_start": list(self._streak_start) if self._streak_start else None,
                "streak": self._streak}

    def restore(self, state: dict[str, Any]) -> None:
        self.history = [(int(s), float(v)) for s, v in state["history"]]
        self.status, self.step, self.wall_time_s = (state["status"], state["step"],
                                                    state["wall_time_s"])
        start = state["streak_start"]
        self._streak_start = (int(start[0]), float(start[1])) if start else None
        self._streak = int(state["streak"])

    def needs_full(self, screened: float) -> bool:
        """Whether an evaluation whose screen (a fixed subset) read `screened` must evaluate
        the whole set: while the outcome is open, when a run of passing evaluations is under
        way, the screen is not finite, or it is within SCREEN_MARGIN of the threshold in
        progress units (so every evaluation that could pass, or break a streak, is a full one).
        """
        if self.status != "running":
            return False
        if self._streak or not math.isfinite(screened):
            return True
        return (self.progress(screened)
                >= self.progress(self.criterion.threshold) - SCREEN_MARGIN)

    def leak(self, step: int) -> Status:
        """A decisive evaluation at `step` changed when the future was scrambled: the run read
        inputs it must not, so it never emerged whatever its accuracy (`leaked`, final)."""
        self.status, self.step, self._streak, self._streak_start = "leaked", step, 0, None
        return self.status

    def finish(self, budget_step: int) -> Status:
        """Close the run: still running at the end of the budget means censored."""
        if self.status == "running":
            self.status, self.step = "censored", budget_step
        return self.status

    def progress(self, value: float) -> float:
        """0 at the no-context baseline, 1 when solved."""
        return (value - self.baseline) / (self.solved - self.baseline)

    def transition(self) -> tuple[int | None, int | None, str]:
        """(end of the plateau, start of the final rise, why a width is missing or ""); a run
        that emerged short of 90% progress has a plateau end (the last evaluation <= 10% up
        before emergence) but no final rise."""
        if self.status != "emerged":
            return None, None, f"{self.status}: no rise to measure"
        upto = [(s, self.progress(v)) for s, v in self.history]
        t90 = None
        for s, p in reversed(upto):
            if p < 0.9:
                break
            t90 = s
        # a criterion short of 90% progress has a plateau (before emergence) but no width
        end = self.plateau_end(self.step if t90 is None else t90)
        if t90 is None:
            return end, None, "the criterion was met short of 90% of the way up"
        if end is None:
            return None, t90, "no evaluation after step 0 sat on the plateau (<= 10% up)"
        return end, t90, ""

    def plateau_end(self, before: int | None) -> int | None:
        """The last evaluation after step 0 (and before step `before`) at most 10% of the way
        up."""
        flat = [s for s, v in self.history
                if 0 < s and (before is None or s < before) and self.progress(v) <= 0.1]
        return max(flat, default=None)

    def transition_width(self) -> int | None:
        """Steps from the end of the plateau (<= 10%) to the start of the final rise (>= 90%),
        where a plateau was observed."""
        t10, t90, _ = self.transition()
        return None if t10 is None or t90 is None else t90 - t10


