"""The Lightning callback that feeds each evaluation to the emergence tracker and stops a run
once its outcome is known."""

from __future__ import annotations

import math
import time
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, RichProgressBar
from lightning.pytorch.callbacks.progress.rich_progress import _RICH_AVAILABLE

from ..core.emergence import EmergenceCriterion, EmergenceTracker


class EmergenceCallback(Callback):
    """Runs the tracker after every evaluation and stops training once the outcome is known."""

    def __init__(self, criterion: EmergenceCriterion, baseline: float, solved: float):
        self.tracker = EmergenceTracker(criterion, baseline, solved)
        self._t0 = time.perf_counter()
        self._before = 0.0  # seconds trained before a resume

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._t0 = time.perf_counter() - self._before

    def state_dict(self) -> dict[str, Any]:  # kept in resume checkpoints
        return {"tracker": self.tracker.state(), "elapsed": time.perf_counter() - self._t0}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.tracker.restore(state_dict["tracker"])
        self._before = state_dict["elapsed"]
        self._t0 = time.perf_counter() - self._before  # whichever hook runs first

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule,
                                outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        """After the screen's last chunk: log its reading of the criterion's metric
        (val/screen) and end the evaluation there unless the whole set could change the
        outcome (step 0 and the last evaluation are always whole)."""
        screen = trainer.datamodule.screen_chunks(trainer.world_size)
        if batch_idx != screen - 1 or trainer.sanity_checking:
            return
        last = trainer.global_step + trainer.val_check_interval > trainer.max_steps
        screened = pl_module.current(self.tracker.criterion.metric)
        # the screen's own reading, kept beside the whole set's where both are made: the gap
        # between them is what a skipped whole evaluation could have hidden
        pl_module.log("val/screen", screened, on_step=False, on_epoch=True, batch_size=1)
        full = last or self.tracker.needs_full(screened)
        if not trainer.strategy.broadcast(full, src=0):
            pl_module.skip_from = screen

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # the sanity check evaluates the whole set before the first step: the step-0 point
        metrics = trainer.callback_metrics
        value = float(metrics[self.tracker.criterion.metric])
        if not math.isfinite(float(metrics.get("train/loss", 0.0))):
            value = math.nan
        value = trainer.strategy.broadcast(value, src=0)  # every rank takes rank 0's decision
        status = self.tracker.update(trainer.global_step, value, time.perf_counter() - self._t0)
        leaked = bool(trainer.strategy.reduce_boolean_decision(
            getattr(pl_module, "leaked", False), all=False))  # a leak on any rank
        if leaked:
            status = self.tracker.leak(trainer.global_step)
        if status in ("diverged", "leaked") or (status == "emerged"
                                                and self.tracker.criterion.stop_early):
            trainer.should_stop = True


class StepProgressBar(RichProgressBar):
    """Lightning's rich bar described as training, not "Epoch 0/-2": a run is one endless
    epoch bounded by train.max_steps."""

    def _get_train_description(self, current_epoch: int) -> str:
        return f"{'Training':{len(self.validation_description)}}"


def progress_bars(progress: bool) -> list[Callback]:
    """The progress bar a run shows: none without `progress`; Lightning's tqdm bar where rich
    is not installed."""
    return [StepProgressBar()] if progress and _RICH_AVAILABLE else []
