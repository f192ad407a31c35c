"""Leaderboards: group finished jobs by (task, architecture) config and summarise their seeds.

Rows are built from the emergence records of each finished job; nothing is re-derived from the
curves. With a learning-rate grid, each configuration is shown at its best rate. Each task also
gets a chance row (a model that guesses uniformly: solves nothing, token accuracy 1/V). Written
as `leaderboard.md` (the spec's claim, the table, links to the figures), `leaderboard.csv`, and
the figures of `bench.plots`.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import fields
from pathlib import Path
from typing import Any

from architectures import ContractError, resolve
from datamodules import TASKS

from .config import content_hash, experiment
from .stats import SurvivalSummary, kaplan_meier

# The task fields every leaderboard row shows, default or not.
TASK_FIELDS = ("state_size", "sparsity", "n_cells", "n_colors", "n_rules", "n_states")
COLUMNS = [
    "task", "architecture", "seeds", "emerged", "diverged", "solve_rate", "median_steps",
    "median_ci_low", "median_ci_high", "q1_steps", "q3_steps", "median_width", "params",
    "state_per_layer", "steps_per_s", "final_token_acc", "config", "lr", "lr_grid",
]


def label(section: dict[str, Any], schema: type | None, always: tuple[str, ...] = ()) -> str:
    """`name(field=value, ...)`: the fields in `always`, then those that differ from defaults."""
    defaults = {f.name: f.default for f in fields(schema)} if schema else {}
    keys = [k for k in always if k in section]
    keys += [k for k in section if k not in keys and k != "name" and defaults.get(k) != section[k]]
    shown = ", ".join(f"{k}={section[k]}" for k in keys)
    return f"{section['name']}({shown})" if shown else section["name"]


def _arch_schema(name: str) -> type | None:
    try:
        return resolve(name)
    except ContractError:  # a plug-in that is not importable here: show every field
        return None


def vocab_size(task: dict[str, Any]) -> int:
    """Tokens a task's config draws from: n_colors of an automaton, the modulus of a map."""
    return task.get("n_colors") or task.get("modulus") or 2


def row_labels(config: dict[str, Any]) -> tuple[str, str]:
    """(task, architecture) as the leaderboard shows them."""
    return (label(config["task"], TASKS[config["task"]["name"]][0], TASK_FIELDS),
            label(config["arch"], _arch_schema(config["arch"]["name"])))


def group_key(config: dict[str, Any], without: tuple[str, ...] = ("seed",)) -> str:
    """Hash of a job's config less the seed: one leaderboard row per value."""
    config = {k: v for k, v in experiment(config).items() if k not in without}
    if "lr" in without:
        config["train"] = {k: v for k, v in config["train"].items() if k != "lr"}
    return content_hash(config, 10)


def by_row(results: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Finished runs grouped by leaderboard row (their config hash less the seed)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault(group_key(r["config"]), []).append(r)
    return groups


def survival_sample(runs: list[dict[str, Any]]) -> tuple[list[float], list[bool]]:
    """(steps-to-emergence, or the budget for a seed that never emerged; emerged or not)."""
    times = [r["steps_to_emergence"] if r["status"] == "emerged" else r["budget_steps"]
             for r in runs]
    return times, [r["status"] == "emerged" for r in runs]


def summarise(results: list[dict[str, Any]]) -> list[tuple[dict[str, Any], SurvivalSummary]]:
    """One (row, KM summary) per configuration and learning rate, ranked."""
    rows = []
    for key, runs in by_row(results).items():
        config = runs[0]["config"]
        task, arch = row_labels(config)
        km = kaplan_meier(*survival_sample(runs))
        widths = [r["transition_width"] for r in runs if r["transition_width"] is not None]
        rows.append(({
            "task": task,
            "architecture": arch,
            "seeds": len(runs),
            "emerged": km.events,
            "diverged": sum(r["status"] == "diverged" for r in runs),
            "solve_rate": km.events / len(runs),
            "median_steps": km.median,
            "median_ci_low": km.ci_low,
            "median_ci_high": km.ci_high,
            "q1_steps": km.q1,
            "q3_steps": km.q3,
            "median_width": statistics.median(widths) if widths else math.nan,
            "params": runs[0]["n_params"],
            "state_per_layer": runs[0].get("state_per_layer"),
            "steps_per_s": statistics.median(r["steps_per_s"] for r in runs),
            "final_token_acc": statistics.median(
                r["final_metrics"].get("val/token_acc", math.nan) for r in runs),
            "config": key,
            "lr": config["train"]["lr"],
            "lr_grid": "",
            "family": group_key(config, ("seed", "lr")),
            "budget": max(r["budget_steps"] for r in runs),
            "job_config": config,
            "runs": runs,
        }, km))
    # ranked: within a task, higher solve rate first, then lower median steps
    return sorted(rows, key=lambda rk: (rk[0]["task"], -rk[0]["solve_rate"], rk[0]["median_steps"]))


def best_lr(summaries: list[tuple[dict[str, Any], SurvivalSummary]]):
    """Each configuration at its best learning rate: the lowest KM median steps-to-emergence,
    then the higher solve rate, then the smaller lr. `lr_grid` lists the rates tried."""
    families: dict[str, list[tuple[dict[str, Any], SurvivalSummary]]] = {}
    for row, km in summaries:
        families.setdefault(row["family"], []).append((row, km))
    chosen = []
    for members in families.values():
        row, km = min(members, key=lambda rk: (rk[0]["median_steps"], -rk[0]["solve_rate"],
                                               rk[0]["lr"]))
        if len(members) > 1:
            row["lr_grid"] = " ".join(f"{m['lr']:g}" for m, _ in
                                      sorted(members, key=lambda rk: rk[0]["lr"]))
        chosen.append((row, km))
    return [rk for rk in summaries if any(rk[0] is c[0] for c in chosen)]


def steps_text(x: float) -> str:
    if math.isnan(x):
        return "-"
    return "never" if math.isinf(x) else f"{x:.0f}"


def chance_row(task_row: dict[str, Any]) -> dict[str, Any]:
    """The null row of a task: uniform guessing solves nothing and scores 1/V per token."""
    return {"task": task_row["task"], "architecture": "chance", "seeds": 0, "emerged": 0,
            "diverged": 0, "solve_rate": 0.0, "median_steps": math.inf,
            "final_token_acc": 1 / vocab_size(task_row["job_config"]["task"]),
            "config": content_hash(task_row["job_config"]["task"], 10)}


def ceiling_row(task_row: dict[str, Any]) -> dict[str, Any] | None:
    """The Bayes-optimal predictor's row where it is short of perfect (a rule inferred in
    context): the best final token accuracy any architecture can reach on this held-out set."""
    from datamodules import build_task

    from .config import load_task_config

    config = task_row["job_config"]
    task = build_task(load_task_config(config["task"]), eval_size=config["train"]["eval_size"])
    accuracy, _ = task.ceiling()
    if accuracy > 1 - 1e-9:
        return None
    return {**chance_row(task_row), "architecture": "Bayes-optimal",
            "final_token_acc": accuracy}


def with_chance_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with each task's null rows after its last: chance, and the Bayes-optimal
    ceiling where a perfect score is out of reach."""
    out = []
    for i, row in enumerate(rows):
        out.append(row)
        if i + 1 == len(rows) or rows[i + 1]["task"] != row["task"]:
            out += [r for r in (ceiling_row(row), chance_row(row)) if r is not None]
    return out


def _table(rows: list[dict[str, Any]], lr_column: bool) -> list[str]:
    header = ["task", "architecture", *(["lr"] if lr_column else []), "solved",
              "median steps [95% CI]", "quartiles", "width", "final token acc", "params",
              "state/layer", "steps/s", "config"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        if r["architecture"] in ("chance", "Bayes-optimal"):
            cells = [r["task"], f"*{r['architecture']}*", *(["-"] if lr_column else []), "-",
                     "-", "-", "-", f"{r['final_token_acc']:.3f}", "-", "-", "-",
                     f"`{r['config']}`"]
            lines.append("| " + " | ".join(cells) + " |")
            continue
        ci = f"[{steps_text(r['median_ci_low'])}, {steps_text(r['median_ci_high'])}]"
        lr = f"{r['lr']:g}" + (f" (of {r['lr_grid']})" if r["lr_grid"] else "")
        cells = [
            r["task"], f"`{r['architecture']}`", *([lr] if lr_column else []),
            f"{r['emerged']}/{r['seeds']} ({r['solve_rate']:.0%})",
            f"{steps_text(r['median_steps'])} {ci}",
            f"{steps_text(r['q1_steps'])}-{steps_text(r['q3_steps'])}",
            steps_text(r["median_width"]), f"{r['final_token_acc']:.3f}", f"{r['params']:,}",
            "-" if r["state_per_layer"] is None else f"{r['state_per_layer']:,}",
            f"{r['steps_per_s']:.1f}",
            f"`{r['config']}`",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def to_markdown(title: str, rows: list[dict[str, Any]], every_lr: list[dict[str, Any]],
                claim: str = "", figures: tuple[str, ...] = ("emergence",)) -> str:
    grid = len(every_lr) > len(rows)
    lines = [f"# {title}", ""]
    if claim:
        lines += [f"**Claim.** {claim}", ""]
    lines += [*_table(with_chance_rows(rows), grid), "",
              "Steps-to-emergence are Kaplan-Meier estimates over seeds: a seed that never "
              "emerges is censored at its budget (\"never\": fewer than half/quarter of the "
              "seeds emerged). Width: median steps from the end of the plateau to the rise. "
              "Final token acc: median over seeds of the held-out token accuracy at the end; "
              "the chance row guesses uniformly; a Bayes-optimal row (where a perfect score is "
              "out of reach) knows the rule pool and infers the active rule from the prefix. "
              "Config: hash of the row's config less the seed."]
    if grid:
        lines += ["", "Each architecture is shown at its best learning rate (lowest median "
                  "steps-to-emergence, then higher solve rate, then smaller lr), chosen from the "
                  "rates in brackets. Every rate:", "", *_table(every_lr, True)]
    captions = {"emergence": "fraction of seeds emerged vs step (95% band)",
                "factors": "solve rate and median steps against the swept factors",
                "dynamics": "one seed per row: loss, exact accuracy and attention on the parents",
                "attention": "learned attention beside the ground-truth pattern"}
    lines += [""] + [f"![{captions[f]}]({f}.png)" for f in figures] + [""]
    return "\n".join(lines)


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def write_leaderboard(out: Path, title: str, results: list[dict[str, Any]],
                      spec: dict[str, Any] | None = None) -> list[dict]:
    """Write the table (md, csv) and figures for `results` into `out`; return the rows.
    `spec` (the sweep spec as a dict) gives the claim and the factor plots."""
    from . import plots

    spec = spec or {}
    every_lr = summarise(results)
    summaries = best_lr(every_lr)
    rows = [row for row, _ in summaries]
    plots.emergence_curves(out / "emergence.png", title, summaries)
    figures = ["emergence"]
    if spec.get("plots"):
        plots.factors(out / "factors.png", rows, spec["plots"])
        figures.append("factors")
    for name, draw in (("dynamics", plots.dynamics), ("attention", plots.attention_maps)):
        if draw(out / f"{name}.png", rows):
            figures.append(name)
    (out / "leaderboard.md").write_text(
        to_markdown(title, rows, [r for r, _ in every_lr], spec.get("claim", ""), tuple(figures)))
    write_csv(out / "leaderboard.csv", rows)
    return rows
