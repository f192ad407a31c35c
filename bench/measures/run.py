"""A run with its measurements: training (bench.training.run.fit) with the mixing-pattern maps
attached as a Callback, then the post-hoc analyses its config asks for, on the finished run's
checkpoints: the exact emergence step by replay, attention patching, the circuit screen."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from datamodules.base import SequenceTask

from ..core.errors import ConfigError
from ..core.record import RunRecord
from ..training.checkpoint import analysis_path, analysis_steps, remove_resume_checkpoint
from ..training.config import RunConfig
from ..training.run import fit, keeps_analysis_checkpoints, trainer_options, write_json_atomic
from .maps import MixingMapCallback


def measures(cfg: RunConfig, task: SequenceTask) -> list:
    """The callbacks that measure a run while it trains."""
    return [MixingMapCallback(cfg, task)]


def train(cfg: RunConfig, run_dir: Path | str, progress: bool = True) -> dict[str, Any] | None:
    """Train `cfg` with its measurements, run its post-hoc analyses, write `run_dir/result.json`
    (a `RunRecord`) and return its dict (None on ranks other than 0)."""
    run_dir = Path(run_dir)
    fitted = fit(cfg, run_dir, progress, measures)
    if fitted is None:
        return None
    record = fitted.record
    written = _canonical(record)
    analyse_run(cfg, fitted.task, run_dir, record, fitted.world_size)
    if _canonical(record) != written:  # the analyses added to it: result.json again, whole
        write_json_atomic(run_dir / "result.json", record.to_json())
    return record.to_json()


def _canonical(record: RunRecord) -> str:
    return json.dumps(record.to_json(), sort_keys=True, default=str)  # NaN == NaN here


def analyse_run(cfg: RunConfig, task: SequenceTask, run_dir: Path, record: RunRecord,
                world_size: int) -> None:
    """The analyses a finished run's config asks for, added to `record` in place: the kept
    checkpoints, the exact emergence step (a replay), attention patching and the circuit
    screen; checkpoints kept only to replay from are removed after the replay."""
    if keeps_analysis_checkpoints(cfg):
        record.checkpoints = {s: analysis_path(run_dir, s).stat().st_size
                              for s in analysis_steps(run_dir)}
    if cfg.measure.refine and record.emerged:
        if world_size > 1:
            record.refine = "skipped: a multi-device run (replay runs on one device)"
        else:
            from .refine import refine

            done = refine(cfg, task, run_dir, record.steps_to_emergence,
                          trainer_options(cfg, progress=False))
            record.refined_step = done.pop("refined_step")
            record.refine = done
    if cfg.measure.patch and record.emerged:
        record.patch = patch_summary(run_dir)
    if cfg.measure.circuits:
        record.circuits = circuits_summary(run_dir)
    if cfg.measure.refine and not cfg.measure.keep_checkpoints:  # kept only to replay from
        for s in analysis_steps(run_dir):
            analysis_path(run_dir, s).unlink()
        remove_resume_checkpoint(run_dir)
        record.checkpoints = {}


def patch_summary(run_dir: Path) -> dict[str, Any] | str:
    """`bench patch` on the finished run with its default steps, as kept in result.json (or why
    it could not run: a mixer without patchable attention)."""
    from .patching import patch_run

    try:
        report = patch_run(run_dir)
    except ConfigError as e:
        return f"not patched: {e}"
    return {k: report[k] for k in ("pre", "post", "greedy", "ground_truth", "on_plateau")}


def circuits_summary(run_dir: Path) -> dict[str, Any] | str:
    """`bench circuits` on the finished run with the default thresholds, as kept in
    result.json (or why it could not run). Each checkpoint keeps its heads' selectivity ratios
    (4 significant digits), so a view other than the assigned classes (`sink_course`) can be
    read from the results database after the run directory is gone."""
    from .circuits import SUMMARY_KEYS, screen_run

    try:
        report = screen_run(run_dir)
    except ConfigError as e:
        return f"not screened: {e}"
    steps = [{"step": s["step"], "classes": s["classes"], "loss": s["loss"],
              "ratios": [[[float(f"{r:.4g}") for r in head] for head in layer]
                         for layer in s["ratios"]]}
             for s in report["steps"]]
    return {"steps": steps, **{k: report[k] for k in SUMMARY_KEYS}}
