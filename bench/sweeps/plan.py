"""The cost plan a sweep prints before it trains (`--estimate` prints it alone and writes nothing).

Each distinct row (a job's config less its seed and rate) is calibrated here: its model and task
are built and a few optimizer steps timed with the training step a run takes (the module's own loss,
optimizer, scheduler and clip; no evaluation), at the threads one worker gets. From that rate:
- worst case: every job runs its whole budget (`train.max_steps`), as a seed that never emerges
  does;
- best case: every job stops at the first emergence it could confirm (`consecutive` evaluations,
  the first at step 0),
each plus the evaluations' share of a run (EVAL_SHARE: what `bench perf` measures, 5-15% at the
committed sizes), summed and divided among the workers. Jobs already finished in `out` are not
counted; runs a `--reuse` would copy are (the plan is made before the copy), and so is a tuned
row's reported runs at its first rate until its rate is chosen (an upper bound on a resumed tuned
sweep).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.rows import group_key
from ..training.config import RunConfig

CALIBRATION_STEPS = 5  # timed steps per row, after WARMUP_STEPS untimed ones
WARMUP_STEPS = 1
EVAL_SHARE = 0.15  # the evaluations' share of a run's wall time, at most (bench perf: 5-15%)


@dataclass
class Plan:
    jobs: int
    """jobs left to train"""
    rows: list[tuple[str, str, int, float]]
    """(the row's config hash as `bench status`, the table and --row show it, with "+N rates"
    where a tuned row's jobs run at several rates; architecture, its jobs left, calibrated
    steps/s)"""
    best_h: float
    worst_h: float
    workers: int

    def lines(self) -> list[str]:
        out = [f"plan: {self.jobs} job(s) to train with {self.workers} worker(s): "
               f"{_hours(self.best_h)} if every run emerges at its first chance, "
               f"{_hours(self.worst_h)} if every run uses its whole budget"]
        out += [f"  row {row} ({arch}): {n} job(s) at {rate:,.1f} steps/s (calibrated here)"
                for row, arch, n, rate in self.rows]
        return out


def _hours(h: float) -> str:
    return f"{h * 60:,.0f} min" if h < 1 else f"{h:,.1f} h"


def make_plan(jobs: list[RunConfig], workers: int, finished: set[str] = frozenset()) -> Plan:
    """The plan of training `jobs` (less those whose ids are in `finished`) on `workers`
    workers, each row calibrated once in this process."""
    todo = [j for j in jobs if j.job_id() not in finished]
    threads = max(1, (os.cpu_count() or 1) // max(workers, 1))
    rows: dict[str, list[RunConfig]] = {}
    for job in todo:
        rows.setdefault(group_key(job.to_dict(), ("seed", "lr")), []).append(job)
    best = worst = 0.0
    table = []
    for key, group in rows.items():
        rate = calibrate(group[0], threads)
        hashes = sorted({group_key(job.to_dict()) for job in group})
        shown = hashes[0] + (f" +{len(hashes) - 1} rates" if len(hashes) > 1 else "")
        table.append((shown, group[0].arch.name, len(group), rate))
        for job in group:
            first = job.train.eval_every * max(job.emergence.consecutive - 1, 0)
            worst += job.train.max_steps / rate
            best += min(max(first, 1), job.train.max_steps) / rate
    scale = (1 + EVAL_SHARE) / 3600 / max(workers, 1)
    return Plan(len(todo), table, best * scale, worst * scale, workers)


def calibrate(job: RunConfig, threads: int) -> float:
    """Training steps per second of `job`'s model and task here, at `threads` threads: the
    bare training step (`bench perf`'s), timed after WARMUP_STEPS untimed ones."""
    import torch

    from ..training.bare_loop import BareLoop
    from ..training.config import build_run_task
    from ..training.lightning_module import EmergenceModule

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(job.seed)
        task = build_run_task(job)
        module = EmergenceModule(job.arch, job.train, task, job.runtime.compile)
        loop = BareLoop(module, task, torch.device("cpu"))
        loop.run(WARMUP_STEPS)
        durations, _ = loop.run(CALIBRATION_STEPS)
        return CALIBRATION_STEPS / max(sum(durations), 1e-9)
    finally:
        torch.set_num_threads(before)


def finished_ids(out: Path) -> set[str]:
    """Ids of the jobs already finished in `out`'s results database (none where it has none)."""
    from .results import FINISHED, ResultsDB

    path = Path(out) / ResultsDB.FILENAME
    if not path.is_file():
        return set()
    db = ResultsDB(path, read_only=True)
    try:
        return db.job_ids(FINISHED)
    finally:
        db.close()


def check_budget(plan: Plan, max_hours: float | None) -> None:
    """Refuse a plan whose worst case is above `max_hours` (None: no cap)."""
    from ..core.errors import ConfigError

    if max_hours is not None and not (math.isfinite(max_hours) and max_hours > 0):
        raise ConfigError(f"--max-hours: must be a positive number of hours, got {max_hours}")
    if max_hours is not None and plan.worst_h > max_hours:
        raise ConfigError(f"--max-hours: the worst case is {_hours(plan.worst_h)}, above "
                          f"{max_hours:g} h; run fewer rows (--row) or raise the cap")
