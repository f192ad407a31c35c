"""Train one job with a real Lightning Trainer and write its directory.

The directory holds `metrics.csv` (CSVLogger) and, once the run is over, `result.json`, written
atomically: a directory without `result.json` is an unfinished run.
"""

from __future__ import annotations

import json
import logging
import math
import platform
import time
import warnings
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import lightning as L
from lightning.pytorch.callbacks import Callback
from torch import nn

from architectures import ReportsKernelPath
from datamodules.base import SequenceTask

from ..core.emergence import EmergenceTracker, reference_key
from ..core.errors import ConfigError
from ..core.files import write_atomic
from ..core.record import Accuracy, RunRecord
from .callback import EmergenceCallback, progress_bars
from .checkpoint import (
    AnalysisCheckpoint,
    ResumeCheckpoint,
    remove_resume_checkpoint,
    resume_point,
)
from .config import RunConfig, build_run_task, check_contract, hardware
from .lightning_module import EmergenceModule
from .loggers import build_loggers
from .memory import check_memory
from .pretrain import check_pretrain, pretrain_task, read_record, warm_up
from .trainer import check_precision, precision_swap_unsaid

PACKAGES = ("emergence-bench", "torch", "lightning", "torchmetrics", "omegaconf", "numpy",
            "fla-core", "triton", "mamba-ssm")


def versions() -> dict[str, str]:
    """What produced a result: library versions, and the CPU, the instruction set torch's CPU
    kernels dispatch to and the torch thread count (a run's floating-point path, and so its
    per-seed steps, can change with any of them; a VM's CPU name alone may not tell)."""
    import torch

    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    cpu = cpuinfo()
    found["cpu"] = cpu.get("model name") or platform.processor() or platform.machine()
    found["cpu_id"] = cpu_id(cpu)
    found["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    found["torch_threads"] = str(torch.get_num_threads())
    return found


def cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    first = text.split("\n\n")[0].splitlines()
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first)}


def cpu_id(info: dict[str, str]) -> str:
    """Family, model, stepping and microcode, from `cpuinfo()`: what can tell apart two VMs that
    both report "AMD EPYC" and do not agree bitwise (docs/history.md, 2026-12-05)."""
    return ", ".join(f"{k} {info[k]}" for k in ("cpu family", "model", "stepping", "microcode")
                     if k in info) or "?"


def quiet_lightning() -> None:
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*IterableDataset.*__len__.*")
    warnings.filterwarnings("ignore", message=".*Trying to infer the `batch_size`.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*is deprecated.*")
    warnings.filterwarnings("ignore", message=".*exists and is not empty.*")  # a resumed run


def emergence_callback(cfg: RunConfig, task: SequenceTask) -> EmergenceCallback:
    """The criterion's callback, with progress measured from the task's no-context baseline to
    its Bayes ceiling."""
    key, refs = reference_key(cfg.emergence.metric), task.references()
    return EmergenceCallback(cfg.emergence, refs["no_context"][key], refs["ceiling"][key])


def trainer_options(cfg: RunConfig, progress: bool) -> dict[str, Any]:
    """The Trainer arguments a run's training and its replay share (not the budget, cadence,
    logger or callbacks)."""
    return {
        **{k: v for k, v in hardware(cfg.runtime).items() if k != "logger"},
        "enable_checkpointing": keeps_checkpoints(cfg),
        "enable_model_summary": False,
        "enable_progress_bar": progress,
        "num_sanity_val_steps": -1,  # the whole evaluation before the first step: step 0
        "log_every_n_steps": cfg.train.eval_every,
        **cfg.trainer,
    }


def keeps_analysis_checkpoints(cfg: RunConfig) -> bool:
    """Analysis checkpoints are kept for analysis, or to replay the crossing from."""
    return cfg.measure.keep_checkpoints or cfg.measure.refine


def keeps_checkpoints(cfg: RunConfig) -> bool:
    return bool(cfg.runtime.checkpoint_every or keeps_analysis_checkpoints(cfg))


def build_trainer(cfg: RunConfig, run_dir: Path, callbacks: list[Callback], progress: bool,
                  resume_step: int | None = None, tracker: EmergenceTracker | None = None):
    if cfg.runtime.checkpoint_every:
        every = cfg.runtime.checkpoint_every
        callbacks = [*callbacks, ResumeCheckpoint(run_dir, cfg.job_id(), every)]
    if keeps_analysis_checkpoints(cfg) and tracker is not None:
        callbacks = [*callbacks, AnalysisCheckpoint(run_dir, cfg.job_id(), tracker,
                                                    cfg.train.eval_every)]
    options = trainer_options(cfg, progress)
    callbacks = [*callbacks, *progress_bars(progress)]
    try:
        with precision_swap_unsaid():
            trainer = L.Trainer(
                max_steps=cfg.train.max_steps,
                val_check_interval=cfg.train.eval_every,
                check_val_every_n_epoch=None,
                gradient_clip_val=cfg.train.grad_clip or None,
                logger=build_loggers(cfg.runtime.logger, run_dir, cfg.job_id(),
                                     cfg.to_dict(), resume_step),
                callbacks=callbacks,
                default_root_dir=run_dir,
                **options,
            )
    except Exception as e:  # Lightning rejects e.g. an accelerator this machine lacks
        raise ConfigError(f"trainer: {str(e).splitlines()[0]}") from None
    check_precision(trainer, options.get("precision"))
    return trainer


@runtime_checkable
class RecordsFields(Protocol):
    """A callback that measured something the run's record keeps (the mixing-pattern maps):
    `record_fields` gives those fields when the run ends."""

    def record_fields(self, tracker: EmergenceTracker) -> dict[str, Any]: ...


class Fitted(NamedTuple):
    record: RunRecord
    task: SequenceTask
    world_size: int


Measures = Callable[[RunConfig, SequenceTask], list[Callback]]


def fit(cfg: RunConfig, run_dir: Path | str, progress: bool = True,
        measures: Measures | None = None) -> Fitted | None:
    """Train `cfg` with the callbacks `measures(cfg, task)` attached, write `run_dir/result.json`
    (a `RunRecord`) and return it with the task (None on ranks other than 0). A run directory
    holding this job's resume checkpoint continues from it (bench.training.checkpoint); the
    checkpoint is removed once result.json is written. A run with its measurements and
    post-hoc analyses is `bench.measures.run.train`.

    The result is assembled where rank 0 trains, so every Lightning launcher works: in this
    process, in processes `ddp` starts by rerunning the command, or in `ddp_spawn` children.
    """
    quiet_lightning()
    run_dir = Path(run_dir)
    check_memory(cfg)  # before anything is allocated
    task = build_run_task(cfg)
    # a mixer that breaks the contract is rejected before anything trains or is written, at
    # every length the run calls it at (a warm-up's too)
    lengths = dict.fromkeys([task.seq_len, *([pretrain_task(cfg).seq_len] if cfg.pretrain else [])])
    check_contract(cfg, list(lengths))
    check_pretrain(cfg)
    resume = resume_point(run_dir, cfg.job_id())
    L.seed_everything(cfg.seed, verbose=False)
    module = EmergenceModule(cfg.arch, cfg.train, task, cfg.runtime.compile)
    warmed = None
    if cfg.pretrain is not None:  # a resumed run's checkpoint holds the transferred weights
        run_dir.mkdir(parents=True, exist_ok=True)
        warmed = read_record(run_dir) if resume else None
        if warmed is None:
            warmed = warm_up(cfg, module, run_dir, trainer_options(cfg, progress))
    emergence = emergence_callback(cfg, task)
    recorder = RunRecorder(cfg, task, emergence.tracker, run_dir, warmed)
    extra = measures(cfg, task) if measures else []
    trainer = build_trainer(cfg, run_dir, [*extra, emergence, recorder], progress,
                            resume[1] if resume else None, emergence.tracker)
    if cfg.train.batch_size % trainer.world_size:
        raise ConfigError(f"train.batch_size: {cfg.train.batch_size} does not split over "
                          f"{trainer.world_size} devices; use a multiple of it")
    trainer.fit(module, datamodule=task, ckpt_path=resume[0] if resume else None,
                weights_only=True)
    if not trainer.is_global_zero:
        return None
    remove_resume_checkpoint(run_dir)
    # under ddp_spawn rank 0 trained in a spawned child, whose recorder wrote the file
    record = recorder.record or RunRecord.from_json(json.loads((run_dir / "result.json")
                                                               .read_text()))
    return Fitted(record, task, trainer.world_size)


class RunRecorder(Callback):
    """Times the run, keeps every logged metric at each evaluation (the curves) and, on rank 0,
    writes result.json once when training ends (the warm-up's record, `warmed`, in it) and
    keeps the record as `record`."""

    def __init__(self, cfg: RunConfig, task: SequenceTask, tracker: EmergenceTracker,
                 run_dir: Path, warmed: dict[str, Any] | None = None):
        self.cfg, self.task, self.tracker, self.run_dir = cfg, task, tracker, run_dir
        self.warmed = warmed
        self.record: RunRecord | None = None
        self._t0 = time.perf_counter()
        self._before = 0.0  # seconds trained before a resume
        self.curves: dict[str, list[float]] = {"step": []}

    def state_dict(self) -> dict[str, Any]:  # kept in resume checkpoints
        return {"curves": self.curves, "elapsed": time.perf_counter() - self._t0}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.curves, self._before = state_dict["curves"], state_dict["elapsed"]
        self._t0 = time.perf_counter() - self._before  # whichever hook runs first

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        seen = len(self.curves["step"])
        self.curves["step"].append(trainer.global_step)
        for key, value in trainer.callback_metrics.items():
            self.curves.setdefault(key, [math.nan] * seen).append(float(value))
        for values in self.curves.values():  # a metric missing at this evaluation
            values.extend([math.nan] * (seen + 1 - len(values)))

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._t0 = time.perf_counter() - self._before

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # fit's end, not training's: a run stopped at step 0 (a leak found by the first
        # evaluation) never starts its training loop, and still gets its result
        self.tracker.finish(self.cfg.train.max_steps)
        if trainer.is_global_zero:
            wall = time.perf_counter() - self._t0
            measured = {}
            for callback in trainer.callbacks:
                if isinstance(callback, RecordsFields):
                    measured.update(callback.record_fields(self.tracker))
            record = summarise_run(self.cfg, self.task, pl_module, trainer, self.tracker, wall,
                                   self.curves, measured)
            record.pretrain = self.warmed
            text = write_json_atomic(self.run_dir / "result.json", record.to_json())
            self.record = RunRecord.from_json(json.loads(text))  # the record as written


def summarise_run(
    cfg: RunConfig, task: SequenceTask, module: EmergenceModule, trainer: L.Trainer,
    tracker: EmergenceTracker, wall: float, curves: dict[str, list[float]],
    measured: dict[str, Any] | None = None,
) -> RunRecord:
    """The run's record: the contents of result.json; `measured`: the fields the run's
    measurements gave (`RecordsFields`: the mixing-pattern maps)."""
    measured = measured or {}
    steps = trainer.global_step
    emerged = tracker.status == "emerged"
    tokens_per_step = cfg.train.batch_size * task.n_tokens
    plateau_end, rise, width_note = tracker.transition()
    patterns = module.learned_patterns()
    return RunRecord(
        job_id=cfg.job_id(),
        status=tracker.status,
        steps_to_emergence=tracker.step if emerged else None,
        tokens_to_emergence=tracker.step * tokens_per_step if emerged else None,
        wall_time_to_emergence_s=tracker.wall_time_s if emerged else None,
        transition_width=tracker.transition_width(),
        plateau_end=plateau_end,
        rise_step=rise,
        width_note=width_note,
        accuracy=accuracy_summary(curves),
        steps=steps,
        budget_steps=cfg.train.max_steps,
        final_metrics={k: float(v) for k, v in trainer.callback_metrics.items()},
        curve=tracker.history,
        curves=curves,
        learned_patterns=patterns,
        influence=measured.get("influence"),
        intervention=measured.get("intervention"),
        attention_target=task.attention_target().tolist()
        if patterns or measured.get("influence") else None,
        wall_time_s=wall,
        steps_per_s=steps / wall if wall > 0 else None,
        tokens_per_s=steps * tokens_per_step / wall if wall > 0 else None,
        n_params=sum(p.numel() for p in module.model.parameters()),
        kernel_path=kernel_path(module),
        mixer_params_per_layer=[sum(p.numel() for p in b.mixer.parameters())
                                for b in module.model.blocks],
        state_per_layer=cfg.arch.memory_per_layer(task.seq_len),
        instance_seed=task.instance_seed,
        task_flags=task.flags(),
        split=task.split_sizes(),
        references=task.references(),
        config=cfg.to_dict(),
        versions=versions(),
    )


def accuracy_summary(curves: dict[str, list[float]]) -> Accuracy:
    """The same accuracy figures for every run, read over all its evaluations: the best held-out
    and training-probe token accuracy, and the memorisation gap (the largest excess of the
    training probe over the held-out set at one evaluation)."""
    val = curves.get("val/token_acc", [])
    probe = curves.get("train/token_acc", [])
    gaps = [p - v for p, v in zip(probe, val) if math.isfinite(p - v)]
    finite = [v for v in val if math.isfinite(v)]
    return Accuracy(max(finite, default=math.nan),
                    max((p for p in probe if math.isfinite(p)), default=math.nan),
                    max(gaps, default=math.nan))


def kernel_path(module: nn.Module) -> str:
    """Which path the mixers of a model (or the LightningModule holding it) ran: `fused`
    (library kernels), `reference`, or `torch`."""
    paths = {m.last_path for m in module.modules() if isinstance(m, ReportsKernelPath)}
    paths -= {None}
    return "+".join(sorted(paths)) or "torch"


def write_json_atomic(path: Path, data: Any) -> str:
    """Write `data` as JSON to `path` atomically; returns the text written."""
    text = json.dumps(data, indent=2, default=str) + "\n"  # a NaN loss stays NaN
    write_atomic(path, text)
    return text
