"""Resume checkpoints: a killed, preempted or retried run continues from its last checkpoint
instead of step 0, and ends with the result the uninterrupted run would have had.

Every `runtime.checkpoint_every` steps (at the first evaluation at or after it) the run saves
`checkpoints/resume.ckpt` in its directory with Lightning's `ModelCheckpoint`, after the
evaluation has been recorded: weights, optimizer and schedule, loop counters and the state of
the callbacks that keep the curves and the emergence tracker. The file is replaced atomically
(a kill while saving leaves the previous one) and removed when the run finishes. Because a
training batch is a function of (seed, step), the resumed run sees the batches the uninterrupted
one would have; on CPU it reproduces it exactly.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from ..core.errors import ConfigError
from ..core.record import RunRecord

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


def remove_resume_checkpoint(run_dir: Path) -> None:
    """The run finished: its resume checkpoint goes (analysis checkpoints stay)."""
    resume_path(run_dir).unlink(missing_ok=True)
    if (run_dir / DIRNAME).is_dir() and not any((run_dir / DIRNAME).iterdir()):
        (run_dir / DIRNAME).rmdir()


class _AtomicCheckpoint(ModelCheckpoint):
    """A ModelCheckpoint whose files are replaced atomically (a kill while saving leaves the
    previous file) and carry the job id and step."""

    def __init__(self, run_dir: Path, job_id: str, **kwargs: Any):
        super().__init__(dirpath=run_dir / DIRNAME, every_n_epochs=1,
                         save_on_train_epoch_end=False, enable_version_counter=False, **kwargs)
        self.job_id = job_id

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


class ResumeCheckpoint(_AtomicCheckpoint):
    """Saves `resume.ckpt` at the end of an evaluation once `every` steps have passed since the
    last save (never during the step-0 sanity evaluation); flushes the CSV log first, so the log
    on disk holds every row up to the checkpoint."""

    def __init__(self, run_dir: Path, job_id: str, every: int):
        super().__init__(run_dir, job_id, filename=Path(FILENAME).stem, save_top_k=1)
        self.every, self._saved_at = every, 0

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = trainer.global_step
        if trainer.sanity_checking or step - self._saved_at < self.every:
            return
        self._saved_at = step
        for logger in trainer.loggers:
            logger.save()
        super().on_validation_end(trainer, pl_module)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "saved_at": self._saved_at}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._saved_at = state_dict.pop("saved_at", 0)
        super().load_state_dict(state_dict)


def analysis_path(run_dir: Path, step: int) -> Path:
    return run_dir / DIRNAME / f"step={step:07d}.ckpt"


def finished_run(run_dir: Path) -> RunRecord:
    """RUN_DIR's run record (an analysis's input), or a one-line ConfigError: missing, not
    JSON, without the run's config, or not a run's record."""
    path = run_dir / "result.json"
    if not path.is_file():
        raise ConfigError(f"RUN_DIR: {run_dir} holds no finished run (result.json)")
    try:
        result = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"RUN_DIR: {path} is not a run's result (not JSON: "
                          f"{str(e).splitlines()[0]})") from None
    if not isinstance(result, dict) or not isinstance(result.get("config"), dict):
        raise ConfigError(f"RUN_DIR: {path} is not a run's result (it holds no config mapping)")
    try:
        return RunRecord.from_json(result)
    except (ConfigError, TypeError) as e:
        raise ConfigError(f"RUN_DIR: {path} is not a run's result ({e})") from None


def load_analysis_module(run_dir: Path, step: int, cfg: Any, task: Any) -> Any:
    """The run's `EmergenceModule` (config `cfg`, task instance `task`) with the weights of
    its analysis checkpoint at `step`, in eval mode on the CPU (loaded with weights_only); a
    file that is not this run's checkpoint is a one-line ConfigError."""
    from .lightning_module import EmergenceModule

    module = EmergenceModule(cfg.arch, cfg.train, task, cfg.runtime.compile)
    path = analysis_path(run_dir, step)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        module.load_state_dict(state["state_dict"])
    except Exception as e:  # unpickling garbage raises anything; a foreign model, KeyError
        raise ConfigError(f"RUN_DIR: {path} is not a checkpoint of this run "
                          f"({type(e).__name__} on loading it)") from None
    return module.eval()


def analysis_steps(run_dir: Path) -> list[int]:
    """The steps of a run's analysis checkpoints, in order."""
    found = (run_dir / DIRNAME).glob("step=*.ckpt") if (run_dir / DIRNAME).is_dir() else []
    return sorted(int(p.stem.split("=")[1]) for p in found)


def is_log_spaced(step: int, eval_every: int) -> bool:
    """Step 0 and the evaluations 1, 2, 4, 8, ... evaluations in."""
    k, r = divmod(step, eval_every)
    return step == 0 or (r == 0 and k & (k - 1) == 0)


class AnalysisCheckpoint(_AtomicCheckpoint):
    """Full checkpoints (weights, optimizer, schedule, loops) for analysis and replay, kept in
    `checkpoints/step=NNNNNNN.ckpt`: at initialisation and at log-spaced evaluations (1, 2, 4,
    8, ... evaluations in), at the end of the plateau (the last evaluation at most 10% of the
    way up before the crossing: attention patching's pre model), at the two evaluations that
    bracket emergence (the last before the first passing evaluation of the confirmed run, and
    that one), and at the end. To keep the bracket and the plateau's end it saves at every
    evaluation and deletes what no rule keeps once it knows."""

    def __init__(self, run_dir: Path, job_id: str, tracker: Any, eval_every: int):
        super().__init__(run_dir, job_id, save_top_k=-1)
        self.run_dir, self.tracker, self.eval_every = run_dir, tracker, eval_every
        self.saved: list[int] = []  # steps on disk, in order

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_step == 0 and 0 not in self.saved:  # the initialisation
            self._save_checkpoint(trainer, str(analysis_path(self.run_dir, 0)))
            self.saved.append(0)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = trainer.global_step
        if trainer.sanity_checking or step in self.saved:
            return
        self._save_checkpoint(trainer, str(analysis_path(self.run_dir, step)))
        self.saved.append(step)
        self._prune(final=False)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = trainer.global_step
        if step not in self.saved:  # stopped between evaluations (the budget's end)
            self._save_checkpoint(trainer, str(analysis_path(self.run_dir, step)))
            self.saved.append(step)
        self._prune(final=True)

    def kept(self, final: bool) -> set[int]:
        keep = {s for s in self.saved if is_log_spaced(s, self.eval_every)}
        keep.add(self.saved[-1])  # the latest: the end, or a future bracket's lower side
        crossing = self.tracker.crossing
        plateau = self.tracker.plateau_end(crossing)  # patching's pre-emergence model
        if plateau is not None and plateau in self.saved:
            keep.add(plateau)
        if crossing is not None and crossing in self.saved:
            i = self.saved.index(crossing)
            keep |= set(self.saved[max(i - 1, 0):]) if not final and \
                self.tracker.status == "running" else set(self.saved[max(i - 1, 0):i + 1])
        return keep

    def _prune(self, final: bool) -> None:
        keep = self.kept(final)
        for s in [s for s in self.saved if s not in keep]:
            analysis_path(self.run_dir, s).unlink(missing_ok=True)
            self.saved.remove(s)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "saved": list(self.saved)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.saved = list(state_dict.pop("saved", []))
        super().load_state_dict(state_dict)


def analysis_disk_bytes(cfg: Any) -> int:
    """An upper estimate of one run's analysis checkpoints on disk: initialisation, the
    log-spaced evaluations, the plateau's end, the bracket and the end, each the weights and
    AdamW's two moments in float32."""
    from .memory import parameter_count

    evaluations = max(cfg.train.max_steps // cfg.train.eval_every, 1)
    count = 1 + evaluations.bit_length() + 4
    return count * parameter_count(cfg)[0] * 4 * 3
