"""Running a sweep: its jobs (bench.sweeps.spec) listed in one SQLite database and the
unfinished ones run by an executor.

Resume: a job whose row is finished is skipped; rows left `running` by a killed sweep, and failed
ones, run again. One sweep at a time per directory (an advisory lock that dies with its process).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from tqdm.auto import tqdm

from ..core.errors import ConfigError, Interrupted
from ..core.record import RunRecord
from ..core.rows import group_key
from ..core.schema import field_defaults
from ..core.seeds import seed_list
from ..training.config import RunConfig
from .plan import check_budget, finished_ids, make_plan
from .results import FINISHED, ResultsDB, SweepLock, check_out_dir
from .spec import SweepSpec, at_rates, check_contracts, choose_rates, expand, tuning_jobs


def run_sweep(spec: SweepSpec, out: Path, executor: str = "local", workers: int = 1,
              options: dict[str, Any] | None = None, progress: bool = True,
              keep: Callable[[RunConfig], bool] | None = None,
              reuse: list[Path] | tuple[Path, ...] = (),
              reuse_tuning: list[Path] | tuple[Path, ...] = (),
              tune_only: bool = False, estimate: bool = False,
              max_hours: float | None = None, preflight: bool = True) -> dict[str, int] | None:
    """Run every unfinished job of `spec` (those `keep` accepts) into `out`; return the counts
    per status. `reuse`: sweep directories whose finished runs of the same job ids are copied
    in instead of trained (recorded in the database's meta, said above the table);
    `reuse_tuning`: the same for the tuning runs only (the rates they chose stand; the reported
    runs train again, as when a measurement changed). `tune_only`: the tuning runs only (to
    look at them, say whether a row is near its budget, before any reported seed trains).
    The cost plan (bench.sweeps.plan) is printed first; `estimate` stops there (None: nothing
    written), `max_hours` refuses a plan whose worst case is above it; a caller that has checked
    the contracts and printed the plan itself (`bench compare`) passes `preflight=False`."""
    from .executors import resolve_executor

    options = options or {}
    out = out.absolute()
    kept = (lambda jobs: jobs) if keep is None else (lambda jobs: [j for j in jobs if keep(j)])
    tuning = kept(tuning_jobs(spec))
    every = expand(spec)  # validated before anything is written (rates still unknown)
    jobs = kept(every)
    runner = resolve_executor(executor, workers, options)
    check_out_dir(out)
    _check_sources(spec, tune_only, [*reuse, *reuse_tuning], bool(reuse_tuning))
    if preflight:
        check_contracts([*tuning, *jobs])
        plan = make_plan([*tuning, *jobs], 1 if executor == "local" else workers,
                         finished_ids(out))
        print("\n".join(plan.lines()), file=sys.stderr)
        check_budget(plan, max_hours)
    if estimate:
        return None
    _print_checkpoint_cost([*tuning, *jobs], out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"name": spec.name, "executor": executor, "workers": workers,
            "spec": OmegaConf.to_container(OmegaConf.structured(spec)),
            "arch_defaults": {job.arch.name: field_defaults(type(job.arch))
                              for job in [*tuning, *every]}}
    with SweepLock(out):
        if tuning:  # first the tuning seeds; their results choose each row's rate
            _run_jobs(tuning, out, runner, workers, options, progress, meta, f"{spec.name} (tune)",
                      reuse=[*reuse, *reuse_tuning], expect=reuse_tuning)
            if tune_only:
                return _counts(out)
            rates = _tuned_rates(out, tuning)
            missing = {group_key(j.to_dict(), ("seed", "lr")) for j in jobs} - set(rates)
            if missing:  # a row whose every tuning job failed has no rate to report at
                return _counts(out)
            jobs = at_rates(jobs, rates)  # the kept rows only: others were not tuned
            return _run_jobs([*tuning, *jobs], out, runner, workers, options, progress, meta,
                             spec.name, reuse=reuse)
        # untuned: every row is listed (status and the table show the whole spec), the kept
        # rows run (a tuned spec lists the kept rows only: the others' rates are not known yet)
        run = None if keep is None else {j.job_id() for j in jobs}
        return _run_jobs(every, out, runner, workers, options, progress, meta, spec.name, run,
                         reuse)


def _check_sources(spec: SweepSpec, tune_only: bool, sources: list[Path],
                   reuse_tuning: bool) -> None:
    """Refused before anything is written: a tuning flag on a spec that tunes nothing, and a
    reused directory with no results database."""
    for flag, given in (("--tune-only", tune_only), ("--reuse-tuning", reuse_tuning)):
        if given and not spec.tune:
            raise ConfigError(f"{flag}: {spec.name} tunes no learning rate (no `tune:`), so it "
                             "has no tuning runs")
    for source in sources:
        ResultsDB(Path(source) / ResultsDB.FILENAME, read_only=True).close()


def _tuned_rates(out: Path, tuning: list[RunConfig]) -> dict[str, float]:
    """Each row's learning rate, chosen from its finished tuning runs in `out`."""
    db = ResultsDB(out / ResultsDB.FILENAME, read_only=True)
    try:
        ids = {job.job_id() for job in tuning}
        return choose_rates([RunRecord.from_json(json.loads(r["result"])) for r in db.rows()
                             if r["id"] in ids and r["status"] in FINISHED])
    finally:
        db.close()


def _print_checkpoint_cost(jobs: list[RunConfig], out: Path) -> None:
    """Analysis checkpoints are off by default; a sweep that keeps them says what they cost."""
    keeping = [j for j in jobs if j.measure.keep_checkpoints]
    if keeping:
        from ..training.checkpoint import analysis_disk_bytes

        total = sum(analysis_disk_bytes(j) for j in keeping)
        size = f"{total / 2**30:,.2f} GiB" if total >= 2**30 else f"{total / 2**20:,.1f} MiB"
        print(f"analysis checkpoints (measure.keep_checkpoints): up to {size} for {len(keeping)} "
              f"runs in {out}/runs/*/checkpoints", file=sys.stderr)


def _counts(out: Path) -> dict[str, int]:
    db = ResultsDB(out / ResultsDB.FILENAME, read_only=True)
    try:
        return db.counts()
    finally:
        db.close()


def _run_jobs(jobs: list[RunConfig], out: Path, runner, workers: int, options: dict[str, Any],
              progress: bool, meta: dict[str, Any], title: str,
              run: set[str] | None = None, reuse=(), expect=None) -> dict[str, int]:
    """List `jobs` as the sweep's jobs, copy in the finished runs of the same ids from the
    `reuse` directories, and run the unfinished ones (those whose ids are in `run`, if given);
    return counts per status. A source of `expect` (default: every `reuse` directory) that
    has copied nothing into this sweep by now is warned about."""
    db = ResultsDB(out / ResultsDB.FILENAME, create=True)
    try:
        history = seed_history(db, meta["spec"])
        db.sync(jobs, {**meta, "started_at": time.time(), "total": len(jobs),
                       "seed_history": history})
        db.requeue_interrupted()
        ids = run if run is not None else [job.job_id() for job in jobs] if reuse else []
        reused = db.meta("reused", {})
        for source in reuse:
            adopted = db.adopt(Path(source) / ResultsDB.FILENAME, ids)
            if adopted:
                reused[str(source)] = sorted({*reused.get(str(source), []), *adopted})
                db.set_meta("reused", reused)
                print(f"reused {len(adopted)} finished run(s) of the same job ids from {source}")
            elif str(source) not in reused and source in (reuse if expect is None else expect):
                # a wrong directory would train the whole sweep
                print(f"warning: reuse {source}: none of its finished runs has one of these "
                      f"{len(ids)} job ids (another spec, or its rates?); nothing copied",
                      file=sys.stderr)
        pending = db.rows("in_spec = 1 AND status = 'pending'")
        todo = [json.loads(r["config"]) for r in pending if run is None or r["id"] in run]
        counts = db.counts()
        done = (sum(counts[s] for s in FINISHED) if run is None else  # else the kept rows'
                sum(r["id"] in run and r["status"] in FINISHED for r in db.rows("in_spec = 1")))
        bar = tqdm(total=len(jobs) if run is None else len(run), initial=done, desc=title,
                   unit="job", disable=not progress, dynamic_ncols=True)
        emerged, failed = counts["emerged"], 0
        bar.set_postfix(emerged=emerged, failed=failed)
        try:
            for summary in runner(todo, out, workers, options):
                emerged += summary["status"] == "emerged"
                failed += summary["status"] == "failed"
                bar.update(1)
                bar.set_postfix(emerged=emerged, failed=failed, refresh=False)
                if summary["status"] == "failed":
                    bar.write(f"job {summary['id']} failed: {summary['error']}")
        except KeyboardInterrupt:  # Ctrl-C: nothing finished is lost, nothing running counts
            bar.close()
            back = db.requeue_running()
            raise Interrupted(f"interrupted: {back} running job(s) back to pending (resume "
                              f"checkpoints kept); run the same command again to resume") from None
        bar.close()
        return db.counts()
    finally:
        db.close()


def seed_history(db: ResultsDB, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The record of a spec's seeds growing after runs had finished (a look at the results before
    the sample was fixed): earlier entries, plus one when this sweep grows the seeds."""
    history = db.meta("seed_history", [])
    before = (db.meta("spec") or {}).get("seeds")
    finished = sum(db.counts()[s] for s in FINISHED)
    if before is None or not finished:
        return history
    old, new = set(seed_list(before, "seeds")), set(seed_list(spec["seeds"], "seeds"))
    if new > old:
        history = [*history, {"at": time.strftime("%Y-%m-%d"), "from": len(old),
                              "to": len(new), "finished_before": finished}]
    return history
