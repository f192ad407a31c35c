"""Seeds per hour (`bench perf --seeds-per-hour`): the figure a sweep is planned by.

Finished seeds of a quickstart-sized job per hour, per executor setting (workers x threads on
CPU; workers per GPU on CUDA). Each setting runs `workers` concurrent processes that each train
the quickstart job through the runner (evaluation, screens and influence maps at the default
cadence) for a fixed stretch of steps; their summed steps/s over the slowest worker's training
time, divided by the job's budget (JOB_STEPS, the quickstart spec's: a censored seed's cost; an
emerging seed stops sooner, so this is the floor).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from ..core import markdown
from ..training.config import load_run_config

JOB_STEPS = 2000  # the quickstart spec's budget: one seed's cost at most


def settings(accelerator: str) -> list[tuple[int, int]]:
    """(workers, threads each) to compare: on CPU one process with every core and one process
    per core (and per pair of cores past 4); on CUDA 1, 2 and 4 workers per device."""
    import os

    cores = os.cpu_count() or 1
    if accelerator == "gpu":
        return [(w, max(cores // w, 1)) for w in (1, 2, 4)]
    out = [(1, cores), (cores, 1)]
    if cores >= 4:
        out.append((cores // 2, 2))
    return out


def job_seeds_per_hour(row: dict[str, Any]) -> float:
    """A row's estimate: JOB_STEPS-step jobs per hour in one process, training at its Lightning
    step time with its screened evaluation's share of the wall time."""
    return 3600 * row["lightning_steps_per_s"] * (1 - row["eval_share"]) / JOB_STEPS


def seeds_per_hour(cfgs: list[Any], steps: int, accelerator: str) -> list[dict[str, Any]]:
    """Per mixer (its quickstart config) and setting: finished quickstart seeds per hour."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    rows = []
    ctx = mp.get_context("spawn")
    for cfg in cfgs:
        config = cfg.to_dict()
        config["train"] |= {"max_steps": steps}
        config["runtime"] |= {"checkpoint_every": 0, "accelerator": accelerator}
        config["emergence"] |= {"stop_early": False}
        for workers, threads in settings(accelerator):
            with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
                walls = list(pool.map(_timed_job, [config] * workers, range(workers),
                                      [threads] * workers))
            rate = workers * steps / max(walls)  # steps/s of the whole machine
            rows.append({"arch": cfg.arch.name, "workers": workers, "threads": threads,
                         "steps_per_s": rate, "seeds_per_hour": rate * 3600 / JOB_STEPS})
    return rows


def _timed_job(config: dict[str, Any], index: int, threads: int) -> float:
    """Train one job in this worker process; return its training wall time (the runner's)."""
    import torch

    from ..measures.run import train
    from ..training.run import quiet_lightning

    torch.set_num_threads(threads)
    quiet_lightning()
    with tempfile.TemporaryDirectory() as tmp:
        result = train(load_run_config({**config, "seed": index}), Path(tmp), progress=False)
    return result["wall_time_s"]


def seeds_markdown(rows: list[dict[str, Any]], accelerator: str) -> list[str]:
    """The seeds-per-hour table, each mixer's best setting in bold."""
    best = {}
    for r in rows:
        if r["seeds_per_hour"] > best.get(r["arch"], 0):
            best[r["arch"]] = r["seeds_per_hour"]
    unit = "workers per GPU" if accelerator == "gpu" else "workers x threads"
    return ["", f"Seeds per hour of a quickstart-sized job ({JOB_STEPS:,} steps, the quickstart "
            "budget; an emerging seed stops sooner) by executor setting "
            f"(`--executor processes`, {unit}):", "",
            *markdown.table(["mixer", "setting", "steps/s (machine)", "seeds/hour"], [
                [r["arch"], f"{r['workers']} x {r['threads']}", f"{r['steps_per_s']:.1f}",
                 (f"**{r['seeds_per_hour']:.0f}**" if r["seeds_per_hour"] == best[r["arch"]]
                  else f"{r['seeds_per_hour']:.0f}")] for r in rows])]
