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
import statistics
import sys
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.record import RunRecord, upgrade_config
from ..core.rows import by_row, content_hash, group_key
from ..sweeps.plan import check_budget, finished_ids, make_plan
from ..sweeps.results import FINISHED, ResultsDB, read_results
from ..sweeps.spec import (
    DuplicateRows,
    SweepSpec,
    check_contracts,
    expand,
    load_spec,
    tuning_jobs,
)
from ..sweeps.sweep import run_sweep
from ..training.sections import parse_overrides
from .labels import Recorded, lacking, row_labels
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


def check_committed(db_path: Path, tuning: list, jobs: list) -> None:
    """The committed database holds every job of the spec (its `tuning` runs at every rate, or
    without tuning its reported `jobs`), all finished: so the merged sweep retrains none of
    them. A tuned spec's reported runs are at the rates its tuning runs chose: those are
    checked through the tuning runs."""
    if not db_path.is_file():
        raise ConfigError(f"--against: no committed results at {db_path}")
    ids = {j.job_id() for j in (tuning or jobs)}
    db = ResultsDB(db_path, read_only=True)
    try:
        finished = db.job_ids(FINISHED)
        reported = db.counts()
    finally:
        db.close()
    missing = ids - finished
    unfinished = sum(n for s, n in reported.items() if s not in FINISHED)
    if missing or unfinished:
        raise ConfigError(f"--against: {db_path} does not hold every finished job of the spec "
                          f"({len(missing) or unfinished} missing or unfinished); finish it "
                          "with bench sweep first")


def size_notes(results: list[RunRecord], new_rows: set[str],
               recorded: Recorded | None = None) -> list[str]:
    """One line per new row whose parameters are more than 20% off the baselines' median on
    the same task."""
    baselines: dict[str, list[int]] = {}
    new: list[tuple[str, str, int]] = []
    for key, runs in by_row(results).items():
        task, arch = row_labels(runs[0].config, recorded)
        if key in new_rows:
            new.append((task, arch, runs[0].n_params))
        else:
            baselines.setdefault(task, []).append(runs[0].n_params)
    notes = []
    for task, arch, params in new:
        base = statistics.median(baselines.get(task, [params]))
        if abs(params / base - 1) > SIZE_TOLERANCE:
            notes.append(f"size: `{arch}` has {params:,} parameters, {params / base - 1:+.0%} "
                         f"against the baselines' median {base:,.0f} on {task} (beyond "
                         f"±{SIZE_TOLERANCE:.0%}: compare at matched size)")
    return notes


@dataclasses.dataclass
class ComparePlan:
    """What `bench compare` will do, decided before anything is copied or trained."""

    spec: SweepSpec
    """the committed board with the new row in `added` (every board check applied to it)"""
    committed_db: Path
    committed_jobs: list[str]
    """ids of the committed board's jobs (a tuned board's reported ones at its first rate)"""
    new_jobs: list[str]
    """ids of the jobs the new row trains (its tuning runs included); every other job of the
    merged board is a committed row, reused"""
    new_archs: set[str]
    out: Path
    notes: list[str]
    """tests and plots the new row is left out of (it lacks their field)"""
    resume: bool = False
    """`out` already holds this compare, interrupted: rerunning the command resumes it"""


def prepare(against: Path, overrides: list[str], out: Path | None) -> ComparePlan:
    """The merged board (committed rows plus the new one) checked as one spec, its new jobs, the
    committed database it reuses, and where it goes: everything but the copy and the training."""
    arch, plugins = new_sections(overrides)
    spec = load_spec(against)
    reference = committed_dir(against)
    db_path = reference / ResultsDB.FILENAME
    tuning = tuning_jobs(spec)
    committed = [*tuning, *expand(spec)]
    check_committed(db_path, tuning, committed)
    merged = dataclasses.replace(spec, added=[arch], plugins=[*spec.plugins, *plugins])
    committed_ids = [j.job_id() for j in committed]
    known = set(committed_ids)
    try:
        jobs = [*tuning_jobs(merged), *expand(merged)]  # every check, on the merged board
    except DuplicateRows:
        shown = " ".join(f"arch.{k}={v}" for k, v in arch.items())
        raise ConfigError(f"arch.name: {shown} is already a row of {against} (the same "
                          "resolved architecture config); nothing to compare: change a field "
                          "or give another mixer") from None
    new = [j for j in jobs if j.job_id() not in known]  # (duplicates were refused)
    new_archs = {_key(j.to_dict()["arch"]) for j in new}
    notes = left_out_notes(merged, [j.to_dict() for j in new])
    out = out or Path("runs") / "compare" / f"{spec.name}-{content_hash(arch, 8)}"
    if out.absolute() == reference.absolute():
        raise ConfigError(f"--out: {out} holds the committed results; give a fresh directory")
    new_ids = [j.job_id() for j in new]
    resume = (out / ResultsDB.FILENAME).exists()
    if resume and not _holds(out, new_ids):
        raise ConfigError(f"--out: {out} already holds a results database of another sweep; "
                          "give a fresh directory (bench sweep resumes a sweep)")
    return ComparePlan(merged, db_path, committed_ids, new_ids, new_archs, out, notes, resume)


def _holds(out: Path, ids: list[str]) -> bool:
    """Whether `out`'s database lists every job of `ids`: the same compare, interrupted."""
    db = ResultsDB(out / ResultsDB.FILENAME, read_only=True)
    try:
        return set(ids) <= db.job_ids()
    finally:
        db.close()


def left_out_notes(spec: SweepSpec, configs: list[dict[str, Any]]) -> list[str]:
    """One line per test or plot of the board whose field the new row does not have."""
    asked = [("test", [e.get("compare") or e.get("trend")]) for e in spec.tests]
    asked += [("plot", list(axes)) for axes in spec.plots]
    row = [{"job_config": configs[0]}]
    return [f"left out: the new row has no {' x '.join(axes)}, so the {kind} on it does not "
            "include it" for kind, axes in asked if lacking(row, axes)]


def machine_notes(results: list[RunRecord], new_rows: set[str]) -> list[str]:
    """A note when the new rows ran on another machine than the committed ones (CPU model and
    torch threads, as each run recorded them): their steps/s then compare machines, not
    mixers."""
    def machine(run: RunRecord) -> str:
        v = run.versions or {}
        return f"{v.get('cpu', '?')}, {v.get('torch_threads', '?')} threads"

    new, old = set(), set()
    for key, runs in by_row(results).items():
        (new if key in new_rows else old).update(machine(r) for r in runs)
    if not new or not old or new == old:
        return []
    return [f"steps/s: the committed rows ran on {'; '.join(sorted(old))}, the new row on "
            f"{'; '.join(sorted(new))}: that column compares machines, not mixers"]


def init_notes(results: list[RunRecord], new_rows: set[str]) -> list[str]:
    """A note when the new rows started from another initialisation (`arch.init`) than the
    committed ones (a board from before 2026-12-07 ran PyTorch's defaults): then the comparison
    mixes the mixers with how they started, which moves attention's steps many-fold."""
    new, old = set(), set()
    for key, runs in by_row(results).items():
        (new if key in new_rows else old).update(upgrade_config(r.config)["arch"]["init"]
                                                 for r in runs)
    if not new or not old or new == old:
        return []
    return [f"initialisation: the committed rows ran arch.init={', '.join(sorted(old))}, the new "
            f"row arch.init={', '.join(sorted(new))}; the comparison then mixes the mixers with "
            f"how they started (rerun with arch.init={sorted(old)[0]} to compare like with like)"]


def holm_notes(before: list, after: list) -> list[str]:
    """Committed comparisons whose Holm p moved because the new row's comparisons joined their
    family (Holm adjusts over every comparison of one test entry)."""
    old = {(c.test, c.series, c.between): c.p_holm for c in before}
    moved = [(c, old[k]) for c in after if (k := (c.test, c.series, c.between)) in old
             and abs(old[k] - c.p_holm) > 1e-12]
    return [f"Holm: `{c.test}` {c.between} ({c.series}) is {c.p_holm:.3g} here against "
            f"{was:.3g} on the committed board: the new row's comparisons joined its family"
            for c, was in moved]


def new_jobs(plan: ComparePlan) -> list:
    """Every job the compare trains: the new row's (its tuning runs included)."""
    jobs = [*tuning_jobs(plan.spec), *expand(plan.spec)]
    return [j for j in jobs if _key(j.to_dict()["arch"]) in plan.new_archs]


def finished_before(plan: ComparePlan) -> set[str]:
    """Ids of the jobs already finished where the compare reads them from: its own database
    when it resumes, else the committed one."""
    return finished_ids(plan.out if plan.resume else plan.committed_db.parent)


def compare(against: Path, overrides: list[str], out: Path | None, executor: str,
            workers: int, options: dict[str, Any], progress: bool, estimate: bool = False,
            max_hours: float | None = None) -> tuple[Path, list[str]] | None:
    """Train the new row into `out` beside a copy of the committed results; write compare.md
    (notes and the merged table) and return (out, notes). The cost plan of the new runs is
    printed first; `estimate` stops there (None, nothing written); `max_hours` caps it."""
    plan = prepare(against, overrides, out)
    new = new_jobs(plan)
    check_contracts(new)  # a mixer that breaks it: one line, nothing written
    cost = make_plan(new, 1 if executor == "local" else workers, finished_before(plan))
    print("\n".join(cost.lines()), file=sys.stderr)
    check_budget(cost, max_hours)
    if estimate:
        return None
    return train_compare(plan, executor, workers, options, progress)


def train_compare(plan: ComparePlan, executor: str, workers: int, options: dict[str, Any],
                  progress: bool) -> tuple[Path, list[str]]:
    """What `compare` does once its plan is printed: copy the committed database in (unless it
    resumes), train the new row, write compare.md; returns (out, notes)."""
    from .claims import run_tests
    from .leaderboard import best_lr, reported, summarise

    out = plan.out
    out.mkdir(parents=True, exist_ok=True)
    if not plan.resume:  # a rerun of an interrupted compare resumes its own database
        src = ResultsDB(plan.committed_db, read_only=True)
        try:
            src.copy_to(out / ResultsDB.FILENAME)
        finally:
            src.close()
    run_sweep(plan.spec, out, executor, workers, options, progress, preflight=False)
    spec_dict, results = read_results(out)
    recorded = spec_dict.get("arch_defaults", {})
    rows = write_leaderboard(out, spec_dict["name"], results, spec_dict)
    new_rows = {key for key, runs in by_row(results).items()
                if _key(runs[0].config["arch"]) in plan.new_archs}
    committed = [r for r, _ in best_lr(summarise(
        [r for r in reported(results, spec_dict) if group_key(r.config) not in new_rows],
        recorded))]
    tests = spec_dict.get("tests") or []
    notes = [*size_notes(results, new_rows, recorded), *machine_notes(results, new_rows),
             *init_notes(results, new_rows),
             *plan.notes, *holm_notes(run_tests(tests, committed), run_tests(tests, rows))]
    table = (out / "leaderboard.md").read_text()
    (out / "compare.md").write_text("\n".join([*notes, "", table] if notes else [table]))
    return out, notes


def _key(arch: dict[str, Any]) -> str:
    return json.dumps(arch, sort_keys=True)
