"""Resume checkpoints: a killed, preempted or retried run continues from its last checkpoint
instead of step 0, and ends with the result the uninterrupted run would have had.

Every `train.checkpoint_every` steps (at the first evaluation at or after it) the run saves
`checkpoints/resume.ckpt` in its directory with Lightning's `ModelCheckpoint`, after the
evaluation has been recorded: weights, optimizer and schedule, loop counters and the state of
the callbacks that keep the curves and the emergence tracker. The file is replaced atomically
(a kill while saving leaves the previous one) and removed when the run finishes. Because a
training batch is a function of (seed, step), the resumed run sees the batches the uninterrupted
one would have; on CPU it reproduces it exactly.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from ..core.errors import ConfigError

DIRNAME = "checkpoints"
FILENAME = "resume.ckpt"
META = "emergence_bench"  # the checkpoint's own entry: {"job_id", "step"}


def resume_path(run_dir: Path) -> Path:
    return run_dir / DIRNAME / FILENAME


def resume_point(run_dir: Path, job_id: str) -> tuple[Path, int] | None:
    """(checkpoint, its step) to resume `job_id` from in `run_dir`, or None to start at step 0.
    A checkpoint of another job is a ConfigError (the directory holds someone else's run); one
    that cannot be read (a disk fault) is ignored with a warning and the run starts over."""
    path = resume_path(run_dir)
    if not path.is_file() or (run_dir / "result.json").exists():
        return None
    try:
        meta = torch.load(path, map_location="cpu", weights_only=True, mmap=True)[META]
    except Exception as e:  # noqa: BLE001 - any unreadable file means: start over
        warnings.warn(f"{path}: unreadable ({type(e).__name__}); the run starts at step 0",
                      stacklevel=2)
        return None
    if meta["job_id"] != job_id:
        raise ConfigError(f"--out: {run_dir} holds a checkpoint of job {meta['job_id']}, not "
                          f"{job_id}; choose another directory or remove {path}")
    return path, int(meta["step"])


def remove_checkpoints(run_dir: Path) -> None:
    shutil.rmtree(run_dir / DIRNAME, ignore_errors=True)


class ResumeCheckpoint(ModelCheckpoint):
    """Saves `resume.ckpt` at the end of an evaluation once `every` steps have passed since the
    last save (never during the step-0 sanity evaluation); flushes the CSV log first, so the log
    on disk holds every row up to the checkpoint."""

    def __init__(self, run_dir: Path, job_id: str, every: int):
        super().__init__(dirpath=run_dir / DIRNAME, filename=Path(FILENAME).stem, save_top_k=1,
                         every_n_epochs=1, save_on_train_epoch_end=False,
                         enable_version_counter=False)
        self.job_id, self.every, self._saved_at = job_id, every, 0

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = trainer.global_step
        if trainer.sanity_checking or step - self._saved_at < self.every:
            return
        self._saved_at = step
        for logger in trainer.loggers:
            logger.save()
        super().on_validation_end(trainer, pl_module)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        checkpoint[META] = {"job_id": self.job_id, "step": trainer.global_step}

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        tmp = f"{filepath}.tmp"
        trainer.save_checkpoint(tmp, self.save_weights_only)  # every rank takes part
        if trainer.is_global_zero:
            os.replace(tmp, filepath)
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "saved_at": self._saved_at}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._saved_at = state_dict.pop("saved_at", 0)
        super().load_state_dict(state_dict)
