"""Sweeps: a YAML spec of one task x architectures x seeds, expanded into jobs and run in turn.

Every job is validated before the first one trains. A job whose directory already holds a
`result.json` is skipped, so rerunning a sweep resumes it; an unfinished job directory is
cleared and the job rerun.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from tqdm.auto import tqdm

from .config import ConfigError, RunConfig, build_section, load_run_config


@dataclass
class SweepSpec:
    name: str = "sweep"
    """title of the leaderboard"""
    task: Any = None
    """the task section of every job (task.name and its fields), or a list of them"""
    archs: list[dict[str, Any]] = field(default_factory=list)
    """one architecture section per leaderboard row"""
    seeds: int = 4
    """seeds 0 .. seeds-1 for every architecture"""
    train: dict[str, Any] = field(default_factory=dict)
    emergence: dict[str, Any] = field(default_factory=dict)
    trainer: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise ValueError(f"seeds: must be >= 1, got {self.seeds}")
        if not self.archs:
            raise ValueError("archs: must list at least one architecture")
        if not self.tasks or not all(isinstance(t, dict) for t in self.tasks):  # None too
            raise ValueError("task: must be a mapping or a non-empty list of mappings")

    @property
    def tasks(self) -> list[dict[str, Any]]:
        return self.task if isinstance(self.task, list) else [self.task]


def load_spec(path: Path | str) -> SweepSpec:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such sweep spec")
    try:
        raw = OmegaConf.load(path)
    except (OmegaConfBaseException, ValueError) as e:  # YAML syntax errors land here too
        raise ConfigError(f"{path}: not a valid YAML mapping ({str(e).splitlines()[0]})") from None
    return build_section(SweepSpec, raw, "")


def expand(spec: SweepSpec) -> list[RunConfig]:
    """All jobs of the spec, validated, in (task, architecture, seed) order."""
    jobs = []
    for task in spec.tasks:
        for i, arch in enumerate(spec.archs):
            for seed in range(spec.seeds):
                overrides = {"task": task, "arch": arch, "train": spec.train,
                             "emergence": spec.emergence, "trainer": spec.trainer, "seed": seed}
                try:
                    jobs.append(load_run_config(overrides))
                except ConfigError as e:
                    where = f"archs[{i}]: " if str(e).startswith("arch.") else ""
                    raise ConfigError(f"{where}{e}") from None
    ids = [job.job_id() for job in jobs]
    if len(set(ids)) != len(ids):
        raise ConfigError("archs: two entries resolve to the same architecture config")
    return jobs


def run_sweep(spec: SweepSpec, out: Path, progress: bool = True) -> list[dict[str, Any]]:
    """Run every unfinished job of `spec` under `out/runs/<job id>/`; return all results."""
    from .run import train, write_json_atomic  # Lightning is imported only when training

    jobs = expand(spec)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "spec.json", OmegaConf.to_container(OmegaConf.structured(spec)))
    results = []
    bar = tqdm(jobs, desc=spec.name, unit="job", disable=not progress)
    for job in bar:
        run_dir = out / "runs" / job.job_id()
        done = run_dir / "result.json"
        if not done.exists():
            shutil.rmtree(run_dir, ignore_errors=True)
            train(job, run_dir, progress=False)
        results.append(read_result(done))
        emerged = sum(r["status"] == "emerged" for r in results)
        bar.set_postfix(emerged=f"{emerged}/{len(results)}")
    return results


def read_result(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def read_results(out: Path) -> list[dict[str, Any]]:
    """Every finished job under `out/runs/`."""
    return [read_result(p) for p in sorted((out / "runs").glob("*/result.json"))]
