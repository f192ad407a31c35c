"""Run records for analysis tests: a test names the fields it is about, the rest are neutral."""

from typing import Any

from bench.core.record import RunRecord

NEUTRAL: dict[str, Any] = {
    "job_id": "test", "status": "censored", "steps_to_emergence": None,
    "tokens_to_emergence": None, "wall_time_to_emergence_s": None, "transition_width": None,
    "plateau_end": None, "rise_step": None, "width_note": "", "accuracy": {}, "steps": 0,
    "budget_steps": 0, "final_metrics": {}, "curve": [], "curves": {}, "learned_patterns": [],
    "wall_time_s": 0.0, "steps_per_s": None, "tokens_per_s": None, "n_params": 0,
    "kernel_path": "torch", "mixer_params_per_layer": [], "state_per_layer": None,
    "instance_seed": None, "task_flags": [], "split": {}, "references": {}, "config": {},
    "versions": {}}


def record(fields: dict[str, Any] | None = None, **more: Any) -> RunRecord:
    """A RunRecord of `fields` (as result.json spells them) and `more`, neutral elsewhere."""
    return RunRecord.from_json({**NEUTRAL, **(fields or {}), **more})


def records(runs: list[dict[str, Any]]) -> list[RunRecord]:
    return [record(r) for r in runs]
