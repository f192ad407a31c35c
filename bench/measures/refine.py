"""The exact emergence step, by replay.

A run evaluates every `eval_every` steps, so it knows emergence only to that grid: the crossing
lies after the last evaluation below the threshold (`lower`) and at or before the first one of
the confirmed run above it (`upper`). A training batch is a function of (seed, step), so training
replayed from the checkpoint at `lower` sees the same batches; evaluating after every step until
`upper` gives the first step whose held-out metric passes the threshold. The replay's weights at
`upper` are compared with the run's own checkpoint there: on CPU they are equal bit for bit, and
the result says whether they were (`exact`).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from ..core.emergence import EmergenceCriterion
from ..training.checkpoint import analysis_path, analysis_steps
from ..training.config import RunConfig
from ..training.lightning_module import EmergenceModule


class StepCurve(Callback):
    """The criterion's metric after every step of the replay."""

    def __init__(self, criterion: EmergenceCriterion, after: int):
        self.criterion, self.after = criterion, after
        self.curve: list[tuple[int, float]] = []

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = trainer.global_step
        if step > self.after and not trainer.sanity_checking:
            self.curve.append((step, float(trainer.callback_metrics[self.criterion.metric])))


def bracket(run_dir: Path, crossing: int) -> tuple[int, int]:
    """(lower, upper): the kept checkpoints on either side of the evaluated crossing."""
    steps = analysis_steps(run_dir)
    below = [s for s in steps if s < crossing]
    if crossing not in steps or not below:
        raise FileNotFoundError(f"{run_dir}: no checkpoints bracket step {crossing} (kept: "
                                f"{steps or 'none'})")
    return below[-1], crossing


def refine(cfg: RunConfig, task: Any, run_dir: Path, crossing: int,
           trainer_options: dict[str, Any]) -> dict[str, Any]:
    """Replay `cfg` from the checkpoint before `crossing` to it, evaluating after every step.
    Returns {refined_step, lower, upper, exact, curve}."""
    lower, upper = bracket(run_dir, crossing)
    replay = dataclasses.replace(cfg.train, eval_every=1, max_steps=upper)
    module = EmergenceModule(cfg.arch, replay, task, cfg.runtime.compile)
    curve = StepCurve(cfg.emergence, lower)
    trainer = L.Trainer(
        max_steps=upper, val_check_interval=1, check_val_every_n_epoch=None,
        gradient_clip_val=cfg.train.grad_clip or None, logger=False, callbacks=[curve],
        default_root_dir=run_dir, **{**trainer_options, "enable_checkpointing": False,
                                     "enable_progress_bar": False, "num_sanity_val_steps": 0})
    with warnings.catch_warnings():  # the run's own callbacks are not needed to replay it
        warnings.filterwarnings("ignore", message=".*callbacks used to create the checkpoint.*")
        trainer.fit(module, datamodule=task, ckpt_path=analysis_path(run_dir, lower),
                    weights_only=True)
    saved = torch.load(analysis_path(run_dir, upper), map_location="cpu",
                       weights_only=True)["state_dict"]
    mine = {k: v.cpu() for k, v in module.state_dict().items()}
    exact = saved.keys() == mine.keys() and all(torch.equal(saved[k], mine[k]) for k in saved)
    passing = [s for s, v in curve.curve if math.isfinite(v) and cfg.emergence.holds(v)]
    return {"refined_step": passing[0] if passing else upper, "lower": lower, "upper": upper,
            "exact": exact, "curve": curve.curve}
