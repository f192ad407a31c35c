"""`bench compare`: your mixer as one more row of a committed leaderboard, training only its runs.

The new row gets the committed spec's tasks, seeds, budget, criterion, trainer options and
learning-rate protocol (its own tuning runs when the spec tunes); the committed rows are reused
from their results database, copied into a fresh directory, never retrained (the comparison
refuses a database that does not hold every committed job, rather than retrain a baseline). The
merged table notes every new row whose parameter count is more than 20% off the baselines'.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import statistics
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.rows import by_row, content_hash
from ..sweeps.results import FINISHED, ResultsDB, read_results
from ..sweeps.spec import SweepSpec, expand, load_spec, tuning_jobs
from ..sweeps.sweep import run_sweep
from ..training.sections import parse_overrides
from .labels import record_defaults, row_labels
from .leaderboard import write_leaderboard
from .reproduce import committed_dir

SIZE_TOLERANCE = 0.2  # a new row more than 20% larger or smaller than the baselines is noted


def new_sections(overrides: list[str]) -> tuple[dict[str, Any], list[str]]:
    """(the new arch section, its plug-in modules) from `arch.*` and `plugins` overrides."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(parse_overrides(overrides))
    other = sorted(set(raw) - {"arch", "plugins"})
    if other:
        raise ConfigError(f"{other[0]}: bench compare takes the committed spec's {other[0]}; "
                          "give only arch.* and plugins")
    arch = raw.get("arch")
    if not isinstance(arch, dict) or "name" not in arch:
        raise ConfigError("arch.name: required (the mixer to compare, e.g. "
                          "arch.name=my_pkg.mixers:MyMixer)")
    return arch, list(raw.get("plugins") or [])


def check_committed(spec: SweepSpec, db_path: Path) -> None:
    """The committed database holds every job the spec lists (tuning runs at every rate and
    the reported runs), all finished: so the merged sweep retrains none of them."""
    if not db_path.is_file():
        raise ConfigError(f"--against: no committed results at {db_path}")
    ids = {j.job_id() for j in tuning_jobs(spec)} if spec.tune else {
        j.job_id() for j in expand(spec)}
    db = ResultsDB(db_path)
    try:
        finished = {r["id"] for r in db.rows("1 = 1") if r["status"] in FINISHED}
        reported = db.counts()
    finally:
        db.close()
    missing = ids - finished
    unfinished = sum(n for s, n in reported.items() if s not in FINISHED)
    if missing or unfinished:
        raise ConfigError(f"--against: {db_path} does not hold every finished job of the spec "
                          f"({len(missing) or unfinished} missing or unfinished); finish it "
                          "with bench sweep first")


def size_notes(results: list[dict[str, Any]], new_rows: set[str]) -> list[str]:
    """One line per new row whose parameters are more than 20% off the baselines' median on
    the same task."""
    baselines: dict[str, list[int]] = {}
    new: list[tuple[str, str, int]] = []
    for key, runs in by_row(results).items():
        task, arch = row_labels(runs[0]["config"])
        if key in new_rows:
            new.append((task, arch, runs[0]["n_params"]))
        else:
            baselines.setdefault(task, []).append(runs[0]["n_params"])
    notes = []
    for task, arch, params in new:
        base = statistics.median(baselines.get(task, [params]))
        if abs(params / base - 1) > SIZE_TOLERANCE:
            notes.append(f"size: `{arch}` has {params:,} parameters, {params / base - 1:+.0%} "
                         f"against the baselines' median {base:,.0f} on {task} (beyond "
                         f"±{SIZE_TOLERANCE:.0%}: compare at matched size)")
    return notes


def compare(against: Path, overrides: list[str], out: Path | None, executor: str,
            workers: int, options: dict[str, Any], progress: bool) -> tuple[Path, list[str]]:
    """Train the new row into `out` beside a copy of the committed results; write compare.md
    (size notes and the merged table) and return (out, size notes)."""
    arch, plugins = new_sections(overrides)
    spec = load_spec(against)
    reference = committed_dir(against)
    db_path = reference / ResultsDB.FILENAME
    check_committed(spec, db_path)
    merged = dataclasses.replace(spec, archs=[*spec.archs, arch],
                                 plugins=[*spec.plugins, *plugins])
    expand(merged)  # validated before anything is copied (a duplicate of a committed row too)
    new_archs = {_key(j.to_dict()["arch"])
                 for j in expand(dataclasses.replace(merged, archs=[arch]))}
    out = out or Path("runs") / "compare" / f"{spec.name}-{content_hash(arch, 8)}"
    if out.absolute() == reference.absolute():
        raise ConfigError(f"--out: {out} holds the committed results; give a fresh directory")
    if (out / ResultsDB.FILENAME).exists():
        raise ConfigError(f"--out: {out} already holds a results database; give a fresh "
                          "directory (bench sweep resumes a sweep)")
    out.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db_path) as src, sqlite3.connect(out / ResultsDB.FILENAME) as dst:
        src.backup(dst)  # a consistent copy, WAL included
    run_sweep(merged, out, executor, workers, options, progress)
    spec_dict, results = read_results(out)
    record_defaults(spec_dict.get("arch_defaults", {}))
    write_leaderboard(out, spec_dict["name"], results, spec_dict)
    new_rows = {key for key, runs in by_row(results).items()
                if _key(runs[0]["config"]["arch"]) in new_archs}
    notes = size_notes(results, new_rows)
    text = "\n".join([*notes, "", (out / "leaderboard.md").read_text()] if notes else
                     [(out / "leaderboard.md").read_text()])
    (out / "compare.md").write_text(text)
    return out, notes


def _key(arch: dict[str, Any]) -> str:
    return json.dumps(arch, sort_keys=True)
