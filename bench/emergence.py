"""Emergence detection: a typed criterion, a tracker over evaluations, and the Lightning Callback.

A run *emerges* at the first evaluation step from which the criterion holds for `consecutive`
evaluations in a row (a crossing that falls back does not count). A run whose loss goes
non-finite is *diverged*; one that never emerges within its budget is *censored* at the budget.
The transition width is the number of steps from the end of the plateau (last evaluation at most
10% of the way from chance to solved) to the first evaluation of the final rise past 90%.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Literal

import lightning as L
from lightning.pytorch.callbacks import Callback

Metric = Literal["val/loss", "val/token_acc", "val/exact_acc"]


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
        if self.consecutive < 1:
            raise ValueError(f"consecutive: must be >= 1, got {self.consecutive}")
        if self.higher_is_better and not 0 < self.threshold <= 1:
            raise ValueError(
                f"threshold: must be in (0, 1] for {self.metric}, got {self.threshold}"
            )
        if not self.higher_is_better and self.threshold <= 0:
            raise ValueError(f"threshold: must be > 0 for {self.metric}, got {self.threshold}")

    @property
    def higher_is_better(self) -> bool:
        return self.metric != "val/loss"

    def holds(self, value: float) -> bool:
        return value >= self.threshold if self.higher_is_better else value <= self.threshold


Status = Literal["running", "emerged", "censored", "diverged"]


@dataclass
class EmergenceTracker:
    """Feeds on (step, value) evaluations; pure Python so constructed curves can test it."""

    criterion: EmergenceCriterion
    chance: float
    """the metric's value at chance (ln V for the loss, 1/V for token accuracy)"""
    solved: float
    """the metric's value when solved (0 for the loss, 1 for accuracies)"""
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

    def finish(self, budget_step: int) -> Status:
        """Close the run: still running at the end of the budget means censored."""
        if self.status == "running":
            self.status, self.step = "censored", budget_step
        return self.status

    def progress(self, value: float) -> float:
        """0 at chance, 1 when solved."""
        return (value - self.chance) / (self.solved - self.chance)

    def transition(self) -> tuple[int, int] | None:
        """(end of the plateau, start of the final rise): the last evaluation at most 10% of the
        way from chance to solved before the rise, and the first of the final run >= 90%."""
        if self.status != "emerged":
            return None
        upto = [(s, self.progress(v)) for s, v in self.history]
        t90 = None
        for s, p in reversed(upto):
            if p < 0.9:
                break
            t90 = s
        if t90 is None:
            return None
        t10 = max((s for s, p in upto if s < t90 and p <= 0.1), default=0)
        return t10, t90

    def transition_width(self) -> int | None:
        """Steps from the end of the plateau (<= 10%) to the start of the final rise (>= 90%)."""
        ends = self.transition()
        return None if ends is None else ends[1] - ends[0]


class EmergenceCallback(Callback):
    """Runs the tracker after every evaluation and stops training once the outcome is known."""

    def __init__(self, criterion: EmergenceCriterion, chance: float, solved: float):
        self.tracker = EmergenceTracker(criterion, chance, solved)
        self._t0 = time.perf_counter()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._t0 = time.perf_counter()

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = trainer.callback_metrics
        value = float(metrics[self.tracker.criterion.metric])
        if not math.isfinite(float(metrics.get("train/loss", 0.0))):
            value = math.nan
        value = trainer.strategy.broadcast(value, src=0)  # every rank takes rank 0's decision
        status = self.tracker.update(trainer.global_step, value, time.perf_counter() - self._t0)
        if status == "diverged" or (status == "emerged" and self.tracker.criterion.stop_early):
            trainer.should_stop = True
