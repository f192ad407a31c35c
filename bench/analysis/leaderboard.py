"""Leaderboards: group finished jobs by (task, architecture) config and summarise their seeds.

Rows are built from the records each run wrote (emergence step, transition width, accuracies,
the task's reference values); nothing is re-derived from the curves. With a learning-rate grid,
each configuration is shown at its best rate. Each task gets null rows read off its runs'
references: uniform chance, the best predictor that reads no context, and the Bayes-optimal
ceiling where a perfect score is out of reach. Written as `leaderboard.md` (the spec's claim,
the table, the spec's tests, links to the figures), `leaderboard.csv`, and the figures of
`bench.analysis.plots`.
"""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path
from typing import Any

from ..core import markdown
from ..core.errors import ConfigError
from ..core.record import RunRecord, as_records
from ..core.rows import by_row, content_hash, group_key, lr_preference, survival_sample
from ..core.seeds import TUNE_SEED_START, seed_list
from ..core.stats import SLOPE_RESAMPLES, SurvivalSummary, kaplan_meier, loglog_slope
from .circuits import circuits_figure, circuits_markdown
from .claims import run_tests
from .claims import to_markdown as tests_markdown
from .columns import CONVENTIONS, computed, csv_fields, table_columns
from .labels import Recorded, arch_defaults, factor_groups, natural_key, row_labels
from .mechanism import influence_figure, mechanism_markdown
from .warmups import warmup_markdown

NULL_ROWS = ("chance", "no context", "Bayes-optimal")
LEAKED_NOTE = (
    "Leaked: seeds whose decisive evaluation (step 0, any that could decide emergence, the "
    "last) changed when the inputs after a cut were scrambled, i.e. the mixer read the "
    "future: never emerged, censored at the budget, counted beside the solve rate.")


def tune_seeds(spec: dict[str, Any] | None) -> set[int]:
    """Seeds that only chose learning rates: they never appear in the table's rows."""
    tune = (spec or {}).get("tune") or {}
    return set(seed_list(tune["seeds"], "tune.seeds", TUNE_SEED_START)) if tune else set()


def reported(results: list[RunRecord], spec: dict[str, Any] | None) -> list[RunRecord]:
    """The finished runs the table reports (not the tuning seeds')."""
    tuning = tune_seeds(spec)
    return [r for r in results if r.seed not in tuning]


def summarise(results: list[RunRecord], recorded: Recorded | None = None
              ) -> list[tuple[dict[str, Any], SurvivalSummary]]:
    """One (row, KM summary) per configuration and learning rate, ranked: the columns'
    fields (bench.analysis.columns) and what the tables and figures read beside them; labels
    against the `recorded` architecture defaults of the runs' database."""
    rows = []
    for key, runs in by_row(results).items():
        config = runs[0].config
        task, arch = row_labels(config, recorded)
        km = kaplan_meier(*survival_sample(runs))
        rows.append(({
            "task": task, "architecture": arch, **computed(runs, km), "config": key,
            "lr": config["train"]["lr"], "lr_grid": "",
            "family": group_key(config, ("seed", "lr")),
            "budget": max(r.budget_steps for r in runs),
            "job_config": config,
            "arch_defaults": arch_defaults(config["arch"]["name"], recorded),
            "runs": runs,
        }, km))
    # ranked: within a task, higher solve rate first, then lower median steps; tasks in natural
    # order (state_size=8 before state_size=12)
    return sorted(rows, key=lambda rk: (natural_key(rk[0]["task"]), -rk[0]["solve_rate"],
                                        rk[0]["median_steps"]))



def best_lr(summaries: list[tuple[dict[str, Any], SurvivalSummary]]):
    """Each configuration at its best learning rate: the lowest KM median steps-to-emergence,
    then the higher solve rate, then the smaller lr. `lr_grid` lists the rates tried."""
    families: dict[str, list[tuple[dict[str, Any], SurvivalSummary]]] = {}
    for row, km in summaries:
        families.setdefault(row["family"], []).append((row, km))
    chosen = []
    for members in families.values():
        row, km = min(members, key=lambda rk: lr_preference(
            rk[0]["median_steps"], rk[0]["solve_rate"], rk[0]["lr"]))
        if len(members) > 1:
            row["lr_grid"] = " ".join(f"{m['lr']:g}" for m, _ in
                                      sorted(members, key=lambda rk: rk[0]["lr"]))
        chosen.append((row, km))
    return [rk for rk in summaries if any(rk[0] is c[0] for c in chosen)]


def null_rows(task_row: dict[str, Any]) -> list[dict[str, Any]]:
    """A task's null rows, read off its runs' references (the median over task instances):
    chance, no context, and the Bayes-optimal ceiling where it is short of perfect."""
    refs = [r.references for r in task_row["runs"] if r.references]
    base = {"task": task_row["task"], "seeds": 0, "emerged": 0, "diverged": 0, "leaked": 0,
            "solve_rate": 0.0, "median_steps": math.inf,
            "config": content_hash(task_row["job_config"]["task"], 10)}
    if not refs:
        return []
    out = []
    for name, key in (("chance", "chance"), ("no context", "no_context"),
                      ("Bayes-optimal", "ceiling")):
        acc = statistics.median(r[key]["token_acc"] for r in refs)
        if key != "ceiling" or acc < 1 - 1e-9:
            out.append({**base, "architecture": name, "heldout_acc": acc})
    return out


def with_null_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with each task's null rows after its last."""
    out = []
    for i, row in enumerate(rows):
        out.append(row)
        if i + 1 == len(rows) or rows[i + 1]["task"] != row["task"]:
            out += null_rows(row)
    return out


def _table(rows: list[dict[str, Any]], lr_column: bool) -> list[str]:
    columns = table_columns(lr_column)
    cells = [[(c.null(r) if c.null else "-") if r["architecture"] in NULL_ROWS else c.text(r)
              for c in columns] for r in rows]
    return markdown.table([c.header for c in columns], cells)


CAPTIONS = {"emergence": "fraction of seeds emerged vs step (95% band)",
            "factors": "solve rate and median steps against the swept factors",
            "dynamics": "one seed per row: held-out and training accuracy, attention on the "
                        "parents",
            "attention": "learned attention beside the ground-truth pattern",
            "influence": "gradient and intervention maps before and at emergence beside "
                         "the ground truth",
            "circuits": "head classes and the final induction circuit over training"}


def to_markdown(title: str, rows: list[dict[str, Any]], every_lr: list[dict[str, Any]],
                spec: dict[str, Any], tests: list[str], figures: tuple[str, ...],
                tuning: list[dict[str, Any]] = ()) -> str:
    """The board's leaderboard.md: claim, table, conventions, the notes on how its rows came to
    be (`_provenance`), the tests, the analysis sections and the figures."""
    grid = len(every_lr) > len(rows)
    tuned = bool(tune_seeds(spec))
    if tuned:
        grid_text = " ".join(f"{lr:g}" for lr in sorted(spec["tune"]["lr"]))
        rows = [{**r, "lr_grid": grid_text} for r in rows]
    lines = [f"# {title}", ""]
    if spec.get("claim"):
        lines += [f"**Claim.** {spec['claim']}", ""]
    lines += [*_table(with_null_rows(rows), grid or tuned), "", CONVENTIONS]
    if any(r.get("leaked") for r in rows):
        lines += ["", f"**{LEAKED_NOTE}**"]
    lines += _provenance(rows, every_lr, spec, tuning, grid, tuned)
    lines += ["", *tests]
    for section in (warmup_markdown(rows), mechanism_markdown(rows), circuits_markdown(rows)):
        if section:
            lines += [*([""] if lines[-1] else []), *section, ""]
    lines += [f"![{CAPTIONS[f]}]({f}.png)" for f in figures] + [""]
    return "\n".join(lines)


def _provenance(rows: list[dict[str, Any]], every_lr: list[dict[str, Any]],
                spec: dict[str, Any], tuning: list[dict[str, Any]], grid: bool,
                tuned: bool) -> list[str]:
    """The notes on how the rows came to be: refined steps, the learning-rate choice, seeds grown
    after a look, runs reused from another board, flagged instances (each led by a blank line)."""
    lines: list[str] = []
    emerged = [run for r in rows for run in r["runs"] if run.emerged]
    refined = sum(1 for run in emerged if run.refined_step)
    if refined:
        lines += ["", f"Steps-to-emergence were refined by replay (measure.refine) for "
                  f"{refined} of {len(emerged)} emerged runs: the first step, between the "
                  "bracketing evaluations, whose held-out metric passes the threshold, not a "
                  "multiple of eval_every."]
    if tuned:
        lines += ["", f"Learning rates were chosen per row on the tuning seeds "
                  f"{sorted(tune_seeds(spec))}, disjoint from the seeds above (lowest median "
                  "steps-to-emergence, then higher solve rate, then smaller lr). The tuning "
                  "runs:", "", *_table(tuning, True)]
    elif grid:
        lines += ["", "Each architecture is shown at its best learning rate (lowest median "
                  "steps-to-emergence, then higher solve rate, then smaller lr), chosen from the "
                  "rates in brackets on these same seeds. Every rate:", "",
                  *_table(every_lr, True)]
    for grew in spec.get("seed_history") or []:
        lines += ["", f"**Seeds grew after a first look**: from {grew['from']} to {grew['to']} "
                  f"per row ({grew['at']}, when {grew['finished_before']} runs had finished). "
                  "The tests below are computed on the grown sample, which was not fixed before "
                  "the results were seen; read their p-values as exploratory."]
    shown = {run.job_id for r in rows for run in r["runs"]}
    for source, ids in (spec.get("reused") or {}).items():
        among = len(shown.intersection(ids))
        which = "" if among == len(ids) else (
            f": {among} of the reported runs and {len(ids) - among} not reported (tuning runs, "
            "or seeds and rows the spec no longer lists)")
        lines += ["", f"**Reused runs**: {len(ids)} run(s) were copied from `{source}` (the "
                  "same job ids: the same resolved config, seed and budget) rather than trained "
                  f"for this board{which}."]
    flags = sorted({f for r in rows for run in r["runs"] for f in run.task_flags or []})
    if flags:
        lines += ["", "Flagged instances (degenerate but kept):",
                  *[f"- {f}" for f in flags[:10]]]
    return lines


def slope_markdown(rows: list[dict[str, Any]], axis: str) -> list[str]:
    """For a plot against a task's derived axis (a linear map's supports = C(S, s)): the
    fitted power law of KM median steps on it, with its bootstrap interval over seeds (nothing
    for other axes, or where the rows lack it)."""
    from ..sweeps.axes import derived_axis

    if derived_axis(axis) is None:
        return []
    groups = factor_groups(rows, [axis])  # one series per s, as in the figure
    cells = {name: [(v[0], *survival_sample(row["runs"])) for v, row in members]
             for name, members in groups.items()}
    everything = [c for series in cells.values() for c in series]
    if not everything:
        return []
    fit = loglog_slope(everything)
    name = derived_axis(axis)[1]
    if math.isnan(fit.slope):
        return ["", f"**Power law against {name}**: not fitted ({fit.cells} of {fit.of} rows "
                "have a Kaplan-Meier median; a fit needs two at different values)."]
    lines = ["", f"**Power law against {name}**: median steps-to-emergence grow as "
             f"{axis}^b with b = {_slope_text(fit)}, the least-squares slope of log KM median "
             f"on log {axis} over the {fit.cells} of {fit.of} rows whose median is defined (a "
             "row with no median, most seeds censored, is left out: the slope describes the "
             "rows that emerged); interval: "
             f"{SLOPE_RESAMPLES:,} resamples of each row's seeds with replacement, a row whose "
             "resampled median is undefined leaving that fit."]
    if len(cells) > 1:  # pooled over series that may not share one law: each on its own
        lines += ["", "Per series (the figure's lines), the same fit over that series' rows:", ""]
        for series, series_cells in cells.items():
            f = loglog_slope(series_cells)
            lines.append(f"- {series}: b = {_slope_text(f)} over {f.cells} of {f.of} rows"
                         if math.isfinite(f.slope) else
                         f"- {series}: not fitted ({f.cells} of {f.of} rows have a median)")
    return lines


def _slope_text(fit) -> str:
    return f"{fit.slope:.2f} [95% bootstrap interval {fit.low:.2f}, {fit.high:.2f}]"


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=csv_fields(), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def write_leaderboard(out: Path, title: str, results: list[RunRecord | dict[str, Any]],
                      spec: dict[str, Any] | None = None) -> list[dict]:
    """Write the table (md, csv) and figures for `results` (run records, or result.json dicts)
    into `out`; return the rows. `spec` (the sweep spec as a dict) gives the claim, the tests,
    the factor plots and the tuning seeds (whose runs only chose learning rates)."""
    from . import plots

    results, spec = as_records(results), spec or {}
    recorded = spec.get("arch_defaults") or {}
    tuning = tune_seeds(spec)
    shown = reported(results, spec)
    if not shown:  # a sweep still tuning, or whose reported jobs all failed
        raise ConfigError(f"{out}: no reported run has finished yet ({len(results)} tuning "
                          f"run(s) have); `bench status {out}` shows where the sweep stands")
    every_lr = summarise(shown, recorded)
    summaries = best_lr(every_lr)
    rows = [row for row, _ in summaries]
    tests = tests_markdown(run_tests(spec.get("tests") or [], rows))
    for axes in spec.get("plots") or []:
        if len(axes) == 1:
            tests += slope_markdown(rows, axes[0])
    plots.emergence_curves(out / "emergence.png", title, summaries)
    figures = ["emergence"]
    if spec.get("plots"):
        plots.factors(out / "factors.png", rows, spec["plots"])
        figures.append("factors")
    for name, draw in (("dynamics", plots.dynamics), ("attention", plots.attention_maps),
                       ("influence", influence_figure), ("circuits", circuits_figure)):
        if draw(out / f"{name}.png", rows):
            figures.append(name)
    tuning_rows = [r for r, _ in summarise([r for r in results if r.seed in tuning], recorded)]
    (out / "leaderboard.md").write_text(to_markdown(
        title, rows, [r for r, _ in every_lr], spec, tests, tuple(figures), tuning_rows))
    if tuning:
        grid_text = " ".join(f"{lr:g}" for lr in sorted(spec["tune"]["lr"]))
        for row in rows:
            row["lr_grid"] = grid_text
    write_csv(out / "leaderboard.csv", rows)
    return rows
