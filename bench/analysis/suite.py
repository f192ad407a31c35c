"""`bench suite`: a mixer against the standard suite in one command, with its cost told first.

A suite file (leaderboards/suite.yaml) names tiers; a tier lists cells, each an ordinary sweep
spec whose committed directory (the spec's path without `.yaml`) holds the built-in mixers' runs.
With a mixer (`arch.name=...`, `plugins=[...]`), every cell is a `bench compare` against its
committed rows: the mixer trains under each cell's seeds, budget, criterion and learning-rate
protocol, the built-in rows are reused by job id, never retrained. Without one, the suite's own
rows train into the cells' committed directories (resuming what is there).

Before anything is written: every job of every cell is checked (the mixer's contract at each
cell's length included), and one cost plan over all of them is printed (`--estimate` stops
there, `--max-hours` caps it). Running the same command again resumes every cell; Ctrl-C stops
as a sweep does. The `smoke` tier answers in minutes whether a mixer runs and its maps are
measured (smoke.md, no verdict); a scored tier writes the scorecard (bench.analysis.scorecard).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.record import RunRecord
from ..core.rows import content_hash
from ..sweeps.plan import check_budget, finished_ids, make_plan
from ..sweeps.results import read_results
from ..sweeps.spec import check_contracts, expand, load_spec, tuning_jobs
from ..training.config import read_yaml_mapping
from ..training.sections import build_section
from .compare import finished_before, new_jobs, new_sections, prepare, train_compare
from .reproduce import committed_dir

SMOKE = "smoke"


@dataclass
class Tier:
    about: str = ""
    """what the tier answers and what it costs"""
    cells: list[str] = field(default_factory=list)
    """sweep specs, relative to the suite file; each cell is named by its file's stem"""
    pending: str = ""
    """why a tier has no cells yet (then it is refused with this reason)"""


@dataclass
class Suite:
    name: str = "suite"
    about: str = ""
    tiers: dict[str, Tier] = field(default_factory=dict)

    def cells(self, tier: str, base: Path) -> dict[str, Path]:
        """The tier's cells: name -> spec path (checked: the tier and every file exist)."""
        if tier not in self.tiers:
            raise ConfigError(f"--tier: unknown '{tier}'; allowed: {', '.join(self.tiers)}")
        chosen = self.tiers[tier]
        if not chosen.cells:
            raise ConfigError(f"--tier: {tier} has no cells yet ({chosen.pending or 'none'})")
        out = {}
        for cell in chosen.cells:
            path = base / cell
            if not path.is_file():
                raise ConfigError(f"tiers.{tier}.cells: {cell}: no such sweep spec")
            if path.stem in out:
                raise ConfigError(f"tiers.{tier}.cells: two cells named {path.stem}")
            out[path.stem] = path
        return out


def load_suite(path: Path | str) -> Suite:
    raw = read_yaml_mapping(path, str(path), "no such suite file",
                            "a suite file is a mapping (name, about, tiers)")
    suite = build_section(Suite, {k: v for k, v in raw.items() if k != "tiers"}, "")
    tiers = raw.get("tiers") or {}
    return dataclasses.replace(suite, tiers={
        str(name): build_section(Tier, body, f"tiers.{name}") for name, body in tiers.items()})


def run_suite(path: Path, tier: str, overrides: list[str], out: Path | None, executor: str,
              workers: int, options: dict[str, Any], progress: bool, estimate: bool = False,
              max_hours: float | None = None) -> Path | None:
    """Run the suite's `tier` (with a mixer when `overrides` name one) and write its report;
    returns the report's path (None with `estimate`: the plan only, nothing written)."""
    suite = load_suite(path)
    cells = suite.cells(tier, path.parent)
    lanes = 1 if executor == "local" else workers
    if overrides:
        arch, _ = new_sections(overrides)
        root = out or Path("runs") / "suite" / f"{suite.name}-{tier}-{content_hash(arch, 8)}"
        plans = {name: prepare(spec, overrides, root / name) for name, spec in cells.items()}
        jobs = [j for plan in plans.values() for j in new_jobs(plan)]
        done = set().union(*(finished_before(plan) for plan in plans.values()))
    else:
        root = out or path.with_suffix("") / tier
        specs = {name: load_spec(spec) for name, spec in cells.items()}
        dirs = {name: (out / name if out else committed_dir(cells[name])) for name in cells}
        jobs = [j for spec in specs.values() for j in [*tuning_jobs(spec), *expand(spec)]]
        done = set().union(*(finished_ids(d) for d in dirs.values()))
    check_contracts(jobs)  # a mixer that breaks it: one line, nothing written
    cost = make_plan(jobs, lanes, done)
    print("\n".join(cost.lines()), file=sys.stderr)
    check_budget(cost, max_hours)
    if estimate:
        return None
    committed: dict[str, set[str]] | None = None
    if overrides:
        for plan in plans.values():
            train_compare(plan, executor, workers, options, progress)
        dirs = {name: plan.out for name, plan in plans.items()}
        committed = {name: set(plan.committed_jobs) for name, plan in plans.items()}
    else:
        from ..sweeps.sweep import run_sweep
        from .leaderboard import write_leaderboard

        for name, spec in specs.items():
            run_sweep(spec, dirs[name], executor, workers, options, progress, preflight=False)
            spec_dict, results = read_results(dirs[name])
            write_leaderboard(dirs[name], spec_dict["name"], results, spec_dict)
    return write_report(suite, tier, dirs, root, committed)


REFERENCE = "transformer"
"""the architecture every mixer is scored against: attention, the suite's own row of it"""


def cell_rows(directory: Path, committed: set[str] | None = None
              ) -> tuple[dict[str, list[RunRecord]], str | None]:
    """A cell's reported rows, each at its chosen rate, by label (`mlp_mixer(d_model=16)`), and
    the label of attention's row among the suite's own (those of `committed` job ids; every row
    when None): None where there is none, a ConfigError where there are several."""
    from .leaderboard import best_lr, reported, summarise

    spec_dict, results = read_results(directory)
    chosen = best_lr(summarise(reported(results, spec_dict), spec_dict.get("arch_defaults")))
    rows = {row["architecture"].strip("`"): row["runs"] for row, _ in chosen}
    own = [label for label, runs in rows.items() if runs[0].config["arch"]["name"] == REFERENCE
           and (committed is None or runs[0].job_id in committed)]
    if len(own) > 1:
        raise ConfigError(f"{directory}: {len(own)} {REFERENCE} rows ({', '.join(own)}); a suite "
                          "cell scores against one")
    return rows, (own[0] if own else None)


def write_report(suite: Suite, tier: str, dirs: dict[str, Path], root: Path,
                 committed: dict[str, set[str]] | None = None) -> Path:
    """smoke.md for the smoke tier (runs and maps, no verdict), else the scorecard."""
    from ..core.files import write_atomic
    from .scorecard import score, write_scorecard

    read = {name: cell_rows(d, committed[name] if committed else None)
            for name, d in dirs.items()}
    cells = {name: rows for name, (rows, _) in read.items()}
    title = f"{suite.name}: {tier} tier"
    if tier != SMOKE:
        reference = {name: ref for name, (_, ref) in read.items() if ref is not None}
        path = write_scorecard(score(cells, reference), root, title)
    else:
        root.mkdir(parents=True, exist_ok=True)
        path = root / "smoke.md"
        write_atomic(path, smoke_markdown(cells, title))
    print(f"{path}", file=sys.stderr)
    return path


def smoke_markdown(cells: dict[str, dict[str, list[RunRecord]]], title: str) -> str:
    """Per cell and mixer: the seeds that finished, those that emerged, and whether the mixing
    maps (influence and intervention) were measured, finite, and at how many of the evaluations
    a run keeps (the first, those bracketing emergence, the last): no verdict at two seeds."""
    lines = [f"# {title}", "", "Whether each mixer runs and its mixing maps are measured; two "
             "seeds decide nothing about when it learns (no verdict).", "",
             "| cell | mixer | finished | emerged | maps measured | kept map steps | steps/s |",
             "|---|---|---|---|---|---|---|"]
    for cell, rows in cells.items():
        for label, runs in rows.items():
            kept = [_map_steps(r) for r in runs]
            rates = sorted(r.steps_per_s for r in runs if r.steps_per_s)
            rate = f"{rates[len(rates) // 2]:.1f}" if rates else "-"
            lines.append(f"| {cell} | {label} | {len(runs)} | "
                         f"{sum(r.emerged for r in runs)} | {sum(k > 0 for k in kept)} of "
                         f"{len(runs)} | {min(kept)} | {rate} |")
    return "\n".join(lines) + "\n"


def _map_steps(run: RunRecord) -> int:
    """How many evaluations' maps the run kept, both maps measured and finite (0: not)."""
    maps = [run.influence, run.intervention]
    if any(m is None or not m.steps for m in maps) or not all(
            math.isfinite(v) for m in maps for grid in m.maps for row in grid for v in row):
        return 0
    return min(len(m.steps) for m in maps)
