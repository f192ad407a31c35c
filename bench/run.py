"""Train one job with a real Lightning Trainer and write its directory.

The directory holds `metrics.csv` (CSVLogger) and, once the run is over, `result.json`, written
atomically: a directory without `result.json` is an unfinished run.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import time
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger

from architectures import ContractError, check_mixer
from datamodules import StateSequenceTask, build_task

from .config import ConfigError, RunConfig
from .emergence import EmergenceCallback, EmergenceTracker
from .module import EmergenceModule

PACKAGES = ("emergence-bench", "torch", "lightning", "torchmetrics", "omegaconf", "numpy",
            "fla-core", "triton", "mamba-ssm")


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def quiet_lightning() -> None:
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*IterableDataset.*__len__.*")
    warnings.filterwarnings("ignore", message=".*Trying to infer the `batch_size`.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*is deprecated.*")


def chance_and_solved(metric: str, vocab_size: int) -> tuple[float, float]:
    if metric == "val/loss":
        return math.log(vocab_size), 0.0
    if metric == "val/token_acc":
        return 1.0 / vocab_size, 1.0
    return 0.0, 1.0  # exact-state accuracy: chance is V^-S, indistinguishable from 0


def build_trainer(cfg: RunConfig, run_dir: Path, callbacks: list[Callback], progress: bool):
    options: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "enable_checkpointing": False,
        "enable_model_summary": False,
        "enable_progress_bar": progress,
        "num_sanity_val_steps": 0,
        "log_every_n_steps": cfg.train.eval_every,
        **cfg.trainer,
    }
    try:
        return L.Trainer(
            max_steps=cfg.train.max_steps,
            val_check_interval=cfg.train.eval_every,
            check_val_every_n_epoch=None,
            gradient_clip_val=cfg.train.grad_clip or None,
            logger=CSVLogger(run_dir, name="", version=""),
            callbacks=callbacks,
            default_root_dir=run_dir,
            **options,
        )
    except Exception as e:  # Lightning rejects e.g. an accelerator this machine lacks
        raise ConfigError(f"trainer: {str(e).splitlines()[0]}") from None


def train(cfg: RunConfig, run_dir: Path | str, progress: bool = True) -> dict[str, Any] | None:
    """Train `cfg`, write `run_dir/result.json` and return it (None on ranks other than 0).

    The result is assembled where rank 0 trains, so every Lightning launcher works: in this
    process, in processes `ddp` starts by rerunning the command, or in `ddp_spawn` children.
    """
    quiet_lightning()
    run_dir = Path(run_dir)
    task = build_task(
        cfg.task, batch_size=cfg.train.batch_size, eval_size=cfg.train.eval_size, seed=cfg.seed
    )
    try:  # a mixer that breaks the contract is rejected before anything trains or is written
        check_mixer(cfg.arch, task.seq_len)
    except ContractError as e:
        raise ConfigError(f"arch.name: {e}") from None
    L.seed_everything(cfg.seed, verbose=False)
    module = EmergenceModule(cfg.arch, cfg.train, task)
    chance, solved = chance_and_solved(cfg.emergence.metric, task.vocab_size)
    emergence = EmergenceCallback(cfg.emergence, chance, solved)
    recorder = RunRecorder(cfg, task, emergence.tracker, run_dir)
    trainer = build_trainer(cfg, run_dir, [emergence, recorder], progress)
    for size, name in ((cfg.train.batch_size, "batch_size"), (cfg.train.eval_size, "eval_size")):
        if size % trainer.world_size:
            raise ConfigError(f"train.{name}: {size} does not split over "
                              f"{trainer.world_size} devices; use a multiple of it")
    trainer.fit(module, datamodule=task)
    if not trainer.is_global_zero:
        return None
    return json.loads((run_dir / "result.json").read_text())


class RunRecorder(Callback):
    """Times the run, keeps every logged metric at each evaluation (the curves) and, on rank 0,
    writes result.json when training ends."""

    def __init__(self, cfg: RunConfig, task: StateSequenceTask, tracker: EmergenceTracker,
                 run_dir: Path):
        self.cfg, self.task, self.tracker, self.run_dir = cfg, task, tracker, run_dir
        self._t0 = time.perf_counter()
        self.curves: dict[str, list[float]] = {"step": []}

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        seen = len(self.curves["step"])
        self.curves["step"].append(trainer.global_step)
        for key, value in trainer.callback_metrics.items():
            self.curves.setdefault(key, [math.nan] * seen).append(float(value))
        for values in self.curves.values():  # a metric missing at this evaluation
            values.extend([math.nan] * (seen + 1 - len(values)))

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._t0 = time.perf_counter()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.tracker.finish(self.cfg.train.max_steps)
        if trainer.is_global_zero:
            wall = time.perf_counter() - self._t0
            result = summarise_run(self.cfg, self.task, pl_module, trainer, self.tracker, wall,
                                   self.curves)
            write_json_atomic(self.run_dir / "result.json", result)


def summarise_run(
    cfg: RunConfig, task: StateSequenceTask, module: EmergenceModule, trainer: L.Trainer,
    tracker: EmergenceTracker, wall: float, curves: dict[str, list[float]],
) -> dict[str, Any]:
    """The contents of result.json."""
    steps = trainer.global_step
    emerged = tracker.status == "emerged"
    tokens_per_step = cfg.train.batch_size * task.n_tokens
    return {
        "job_id": cfg.job_id(),
        "status": tracker.status,
        "steps_to_emergence": tracker.step if emerged else None,
        "tokens_to_emergence": tracker.step * tokens_per_step if emerged else None,
        "wall_time_to_emergence_s": tracker.wall_time_s if emerged else None,
        "transition_width": tracker.transition_width(),
        "steps": steps,
        "budget_steps": cfg.train.max_steps,
        "final_metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
        "curve": tracker.history,
        "curves": curves,
        "learned_patterns": module.learned_patterns(),
        "wall_time_s": wall,
        "steps_per_s": steps / wall if wall > 0 else None,
        "tokens_per_s": steps * tokens_per_step / wall if wall > 0 else None,
        "n_params": sum(p.numel() for p in module.model.parameters()),
        "kernel_path": kernel_path(module),
        "mixer_params_per_layer": [sum(p.numel() for p in b.mixer.parameters())
                                   for b in module.model.blocks],
        "state_per_layer": cfg.arch.state_size(task.seq_len),
        "config": cfg.to_dict(),
        "versions": versions(),
    }


def kernel_path(module: EmergenceModule) -> str:
    """Which path the mixers ran: `fused` (library kernels), `reference`, or `torch`."""
    paths = {getattr(m, "last_path", None) for m in module.model.modules()} - {None}
    return "+".join(sorted(paths)) or "torch"


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")  # a diverged loss stays NaN
    os.replace(tmp, path)
