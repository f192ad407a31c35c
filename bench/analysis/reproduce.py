"""`bench reproduce SPEC`: rerun a committed leaderboard into a fresh directory and say, row by row
and with a statistical test, whether the new results agree with the committed ones.

Per row (a configuration less its seed): a log-rank test on the steps-to-emergence distributions
(censored seeds kept; exact by permutation below 20 seeds a group) and a Fisher exact test on the
solve rates. The p-values of the whole table are Holm-adjusted (a table is many hypotheses); a
row *differs* when either of its adjusted p-values is below `alpha`. "Agrees" is not proof of
sameness: each row also says the smallest slowdown its seed counts would detect with 80% power
(simulated by resampling the committed seeds) and how many seeds per side would detect a 1.5x
slowdown. Rerunning the committed seeds reproduces them exactly (p = 1) only on the same CPU
with the same torch thread count and libraries (result.json's `versions` records them): the
transformer's per-seed steps change with either (quickstart seed 7: 500 committed, 350 at one
thread and 450 at two on this AMD EPYC), and even two VMs that both report "AMD EPYC" and one
thread did not agree bitwise (docs/history.md). So a rerun is a replication and tested as one;
fresh seeds
(`--seed-start`) make it an independent replication.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from ..core import markdown
from ..core.errors import ConfigError
from ..core.record import RunRecord
from ..core.rows import by_row, survival_sample
from ..core.seeds import MAX_SEEDS
from ..core.stats import (
    holm,
    kaplan_meier,
    logrank_test,
    recommended_seeds,
    smallest_detectable,
    solve_rate_p,
)
from ..sweeps.results import ResultsDB, read_results
from ..sweeps.spec import SweepSpec, load_spec, row_filter
from ..sweeps.sweep import run_sweep
from .columns import steps_text
from .labels import Recorded, row_labels
from .leaderboard import write_leaderboard


def committed_dir(spec_path: Path) -> Path:
    """Where a spec's committed results live: next to it, without `.yaml`."""
    return spec_path.with_suffix("")


def select_spec(spec: SweepSpec, seeds: int | None, seed_start: int) -> SweepSpec:
    if seed_start < 0:
        raise ConfigError(f"--seed-start: must be >= 0, got {seed_start}")
    if seeds is not None and not 1 <= seeds <= MAX_SEEDS:
        raise ConfigError(f"--seeds: must be in 1..{MAX_SEEDS:,}, got {seeds}")
    if seeds is None and not seed_start:
        return spec
    chosen = ([s + seed_start for s in spec.seed_list()] if seeds is None
              else list(range(seed_start, seed_start + seeds)))
    try:
        return dataclasses.replace(spec, seeds=chosen)
    except ValueError as e:  # e.g. the new seeds overlap the tuning seeds
        raise ConfigError(f"--seed-start/--seeds: {e}") from None


def _median(runs: list[RunRecord]) -> str:
    return steps_text(kaplan_meier(*survival_sample(runs)).median)


def compare(committed: list[RunRecord], fresh: list[RunRecord], alpha: float,
            recorded: Recorded | None = None) -> list[dict[str, Any]]:
    """One verdict per row of `fresh`, tested against the committed runs of the same row."""
    reference = by_row(committed)
    rows = []
    for key, runs in by_row(fresh).items():
        ref = reference.get(key, [])
        task, arch = row_labels(runs[0].config, recorded)
        row = {"config": key, "task": task, "architecture": arch,
               "committed_solved": f"{sum(r.emerged for r in ref)}/{len(ref)}",
               "new_solved": f"{sum(r.emerged for r in runs)}/{len(runs)}",
               "committed_median": _median(ref) if ref else "-", "new_median": _median(runs)}
        if ref:
            (ta, ea), (tb, eb) = survival_sample(ref), survival_sample(runs)
            test = logrank_test(ta, ea, tb, eb)
            row["p_logrank"], row["method"] = test.p, test.method
            row["p_solve_rate"] = solve_rate_p(sum(ea), len(ea), sum(eb), len(eb))
            budget = max(r.budget_steps for r in ref)
            row["detectable_slowdown"] = smallest_detectable(ta, ea, budget, len(tb), alpha)
            row["seeds_for_1.5x"] = recommended_seeds(ta, ea, budget, 1.5, alpha)
        rows.append(row)
    tested = [r for r in rows if "p_logrank" in r]
    adjusted = holm([p for r in tested for p in (r["p_logrank"], r["p_solve_rate"])])
    for i, r in enumerate(tested):
        r["p_adjusted"] = min(adjusted[2 * i], adjusted[2 * i + 1])
    for r in rows:
        r["verdict"] = ("no committed runs" if "p_adjusted" not in r
                        else "agrees" if r["p_adjusted"] >= alpha else "differs")
    return rows


def _ratio(x: float | None) -> str:
    if x is None:
        return "-"
    return "> 8x (or nothing emerged)" if math.isinf(x) else f">= {x:g}x slowdown"


def _seeds(n: int | None, tested: bool) -> str:
    return "-" if not tested else "> 48" if n is None else str(n)


def to_markdown(name: str, rows: list[dict[str, Any]], alpha: float, fresh: Path) -> str:
    header = ["task", "architecture", "solved (committed -> new)", "median steps",
              "p log-rank", "p solve rate", "p adjusted", "verdict", "detects (80% power)",
              "seeds for 1.5x", "config"]
    lines = [f"# reproduce {name}", "", f"New results: `{fresh}`. A row differs when a "
             f"Holm-adjusted p-value is below {alpha:g} (log-rank: exact permutation below 20 "
             "seeds a group). Detects: the smallest slowdown of the new runs that these seed "
             "counts would call *differs* with 80% power (simulated by resampling the committed "
             "seeds, unadjusted); an *agrees* says nothing about smaller differences. Seeds for "
             "1.5x: seeds per side that would detect a 1.5-fold slowdown.", ""]
    cells = []
    for r in rows:
        p = [f"{r[k]:.3g}" if k in r else "-" for k in ("p_logrank", "p_solve_rate",
                                                         "p_adjusted")]
        cells.append([
            r["task"], f"`{r['architecture']}`",
            f"{r['committed_solved']} -> {r['new_solved']}",
            f"{r['committed_median']} -> {r['new_median']}", *p,
            f"**{r['verdict']}**", _ratio(r.get("detectable_slowdown")),
            _seeds(r.get("seeds_for_1.5x"), "p_logrank" in r), f"`{r['config']}`"])
    lines += markdown.table(header, cells)
    agree = sum(r["verdict"] == "agrees" for r in rows)
    lines += ["", f"{agree} of {len(rows)} rows agree.", ""]
    return "\n".join(lines)


def reproduce(spec_path: Path, out: Path | None, seeds: int | None, seed_start: int,
              rows: list[str], alpha: float, executor: str, workers: int,
              options: dict[str, Any], progress: bool,
              overrides: list[str] | None = None) -> tuple[list[dict[str, Any]], Path]:
    """Rerun (part of) a committed leaderboard into `out`, compare, write reproduce.md/json.
    `overrides` (key=value) change spec fields first, e.g. runtime.accelerator=gpu: hardware
    keys leave the rows matching the committed ones."""
    if not 0 < alpha < 1:
        raise ConfigError(f"--alpha: must be in (0, 1), got {alpha}")
    spec = select_spec(load_spec(spec_path, overrides or []), seeds, seed_start)
    reference = committed_dir(spec_path)
    db_path = reference / ResultsDB.FILENAME
    if not db_path.is_file():
        raise ConfigError(f"{spec_path}: no committed results at {db_path}")
    out = out or Path("runs") / "reproduce" / spec.name
    if out.absolute() == reference.absolute():
        raise ConfigError(f"--out: {out} holds the committed results; give a fresh directory")
    keep = row_filter(spec, rows)
    _, committed = read_results(reference)
    run_sweep(spec, out, executor, workers, options, progress, keep=keep)
    spec_dict, fresh = read_results(out)  # the jobs just listed: the kept rows and seeds
    write_leaderboard(out, spec.name, fresh, spec_dict)
    table = compare(committed, fresh, alpha, spec_dict.get("arch_defaults"))
    (out / "reproduce.md").write_text(to_markdown(spec.name, table, alpha, out))
    (out / "reproduce.json").write_text(json.dumps({"spec": str(spec_path), "alpha": alpha,
                                                    "rows": table}, indent=2) + "\n")
    return table, out
