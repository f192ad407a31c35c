"""`bench status DIR`: a sweep's state read from its results database, live or finished."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from ..core import markdown
from ..core.rows import group_key
from ..sweeps.results import FINISHED, ResultsDB, SweepLock
from .labels import row_labels


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def estimate_remaining(rows: list[dict[str, Any]], labels: list[tuple[str, str]], workers: int,
                       now: float) -> float | None:
    """Seconds until the unfinished jobs are done: each takes the mean wall time of the finished
    jobs of its (task, architecture) label in `labels` (one per row; any learning rate), else of
    every finished job, less what a running job has run already; the sum shared by the workers.
    None before any job finished."""
    times: dict[tuple[str, str], list[float]] = {}
    for r, label in zip(rows, labels):  # a resumed job's own wall time spans its attempts
        took = r["wall_time_s"] or (r["finished_at"] or 0) - (r["started_at"] or 0)
        if r["status"] in FINISHED and took > 0:
            times.setdefault(label, []).append(took)
    if not times:
        return None
    overall = statistics.mean(t for ts in times.values() for t in ts)
    total = 0.0
    for r, label in zip(rows, labels):
        if r["status"] in FINISHED:
            continue
        ts = times.get(label)
        left = statistics.mean(ts) if ts else overall
        if r["status"] == "running" and r["started_at"]:
            left = max(0.0, left - (now - r["started_at"]))
        total += left
    return total / max(1, workers)


def _steps(group: dict[str, Any]) -> str:
    """The finished jobs' steps to emergence, sorted, the censored as "> budget" (is a row near
    its budget? what `bench sweep --tune-only` is for)."""
    shown = [f"{s:,}" for s in sorted(group["steps"])]
    for budget in sorted(set(group["censored"])):
        n = group["censored"].count(budget)
        shown.append(f"> {budget:,}" + (f" x{n}" if n > 1 else ""))
    return ", ".join(shown) or "-"


def _groups(rows: list, configs: list[dict[str, Any]],
            labels: list[tuple[str, str]]) -> dict[tuple[str, str, float], dict[str, Any]]:
    """The jobs per (task, architecture, lr) row: counts by status, emerged steps, censored
    budgets and the row's config hash."""
    groups: dict[tuple[str, str, float], dict[str, Any]] = {}
    for r, config, (task, arch) in zip(rows, configs, labels):
        g = groups.setdefault((task, arch, r["lr"]), {"jobs": 0, "done": 0, "emerged": 0,
                                                      "running": 0, "failed": 0, "steps": [],
                                                      "censored": [],
                                                      "config": group_key(config)})
        g["jobs"] += 1
        g["done"] += r["status"] in FINISHED
        g["emerged"] += r["status"] == "emerged"
        g["running"] += r["status"] == "running"
        g["failed"] += r["status"] == "failed"
        if r["status"] == "emerged":
            g["steps"].append(r["steps_to_emergence"])
        elif r["status"] == "censored":
            g["censored"].append(r["steps"])
    return groups


def _unfinished(rows: list, live: bool, now: float) -> list[str]:
    """A line per running (or, with no sweep live, interrupted) job and per failed one."""
    lines = []
    for r in rows:
        if r["status"] == "running":
            what = "running" if live else "interrupted"
            since = f" for {_duration(now - r['started_at'])}" if r["started_at"] else ""
            lines.append(f"{what}: {r['id']} on {r['worker']}{since if live else ''}")
        if r["status"] == "failed":
            error = (r["error"] or "").strip().splitlines()
            lines.append(f"failed: {r['id']} (attempt {r['attempts']}): "
                         f"{error[-1] if error else '?'}")
    return lines


def sweep_status(out: Path) -> dict[str, Any]:
    """What `bench status` reports on the sweep directory `out`: counts, liveness, elapsed time
    and ETA, a table per row and a line per unfinished job (the text), with the jobs as data."""
    db = ResultsDB(out / ResultsDB.FILENAME, read_only=True)
    try:
        rows, counts = db.rows(), db.counts()
        name, workers = db.meta("name", out.name), db.meta("workers", 1)
        started = db.meta("started_at")
        recorded = db.meta("arch_defaults", {})
    finally:
        db.close()
    live = SweepLock.held(out)
    now = time.time()
    done = sum(counts[s] for s in FINISHED)
    remaining = counts["pending"] + counts["running"] + counts["failed"]
    configs = [json.loads(r["config"]) for r in rows]
    labels = [row_labels(config, recorded) for config in configs]  # (task, architecture) per row
    eta = estimate_remaining(rows, labels, workers, now) if remaining else None
    # the last run this sweep finished (a compare's copied rows finished long before it started)
    last = max((r["finished_at"] for r in rows
                if r["finished_at"] and (started is None or r["finished_at"] >= started)),
               default=started)
    elapsed = ((now if live else last) - started) if started else None

    groups = _groups(rows, configs, labels)
    lines = [f"sweep {name}: {done}/{len(rows)} finished ("
             + ", ".join(f"{counts[s]} {s}" for s in FINISHED) + f"), {counts['failed']} failed, "
             + f"{counts['running']} running, {counts['pending']} pending"]
    if live:
        lines.append("live: a sweep process holds this directory"
                     + (f"; elapsed {_duration(elapsed)}" if elapsed is not None else "")
                     + (f"; ETA {_duration(eta)}" if eta is not None else ""))
    else:
        state = "complete" if done == len(rows) else "stopped; `bench sweep` again to resume"
        lines.append(f"not running ({state})"
                     + (f"; ran {_duration(elapsed)}" if elapsed is not None else ""))
    header = ["task", "architecture", "lr", "done", "emerged", "steps to emergence", "running",
              "failed", "config"]
    lines += ["", *markdown.table(header, [
        [task, f"`{arch}`", f"{lr:g}", f"{g['done']}/{g['jobs']}", g["emerged"], _steps(g),
         g["running"], g["failed"], f"`{g['config']}`"]
        for (task, arch, lr), g in groups.items()])]
    lines += _unfinished(rows, live, now)
    return {"name": name, "live": live, "counts": counts, "total": len(rows),
            "elapsed_s": elapsed, "eta_s": eta, "text": "\n".join(lines),
            "jobs": [{k: r[k] for k in ("id", "status", "task", "arch", "seed", "lr",
                                        "steps_to_emergence", "attempts", "worker")}
                     for r in rows]}
