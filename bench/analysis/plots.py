"""The leaderboard's figures (matplotlib, PNG), each drawn from the rows and their seeds' results.

- `emergence.png`: fraction of seeds emerged vs step per row, with the Kaplan-Meier pointwise
  95% band, one panel per task;
- `factors.png`: solve rate and median steps-to-emergence against the spec's plot axes (a line
  per series for one axis, heatmaps for two);
- `dynamics.png`: for one seed per row (the median emerger), held-out and training-probe token
  accuracy vs step with the no-context baseline, the plateau's end and the emergence step marked
  (as the run recorded them), beside the attention mass on the ground-truth parents per layer;
- `attention.png`: for attention rows, that seed's learned attention map (the head with the most
  parent mass) beside the ground-truth pattern.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..core.emergence import higher_is_better
from ..core.record import RunRecord
from ..core.reports import pyplot
from ..sweeps.axes import derived_axis
from .labels import factor_groups

Row = dict[str, Any]


def _save(fig, path: Path, title_inches: float = 0.0) -> None:
    """Lay out and write `fig`, keeping `title_inches` at the top for its suptitle."""
    fig.tight_layout(rect=(0, 0, 1, 1 - title_inches / fig.get_figheight()))
    fig.savefig(path, dpi=110)
    pyplot().close(fig)


def emergence_curves(path: Path, title: str, summaries: list[tuple[Row, Any]]) -> None:
    plt = pyplot()
    tasks = list(dict.fromkeys(row["task"] for row, _ in summaries))  # one panel per task
    archs = sorted({row["architecture"] for row, _ in summaries})
    colour = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(archs)}  # same in each panel
    cols = min(len(tasks), 3)
    rows = math.ceil(len(tasks) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 5 * rows), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        for row, km in summaries:
            if row["task"] != task:
                continue
            steps = [*km.steps, row["budget"]]
            c = colour[row["architecture"]]
            ax.step(steps, [*km.emerged, km.emerged[-1]], where="post", color=c,
                    label=f"{row['architecture']} (n={row['seeds']})")
            ax.fill_between(steps, [*km.emerged_low, km.emerged_low[-1]],
                            [*km.emerged_high, km.emerged_high[-1]], step="post", color=c,
                            alpha=0.12, linewidth=0)
        ax.set(xlabel="training step", ylabel="fraction of seeds emerged", ylim=(-0.02, 1.02),
               title=task if len(tasks) > 1 else title)
        ax.grid(alpha=0.3)
        # below the panel: inside it, the legend covered the curves of a many-row board
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2,
                  frameon=False)
    for ax in axes.flat[len(tasks):]:
        ax.set_visible(False)
    if len(tasks) > 1:
        fig.suptitle(f"{title}: fraction of seeds emerged (95% band)")
    _save(fig, path)


# --- factors -----------------------------------------------------------------------------------
def factors(path: Path, rows: list[Row], plots: list[list[str]]) -> None:
    plt = pyplot()
    panels = []  # (axes, {series label: [(values, row)]})
    for axes in plots:
        groups = factor_groups(rows, axes)  # supports = C(S, s): one series per s
        if len(axes) == 1:
            panels.append((axes, groups))
        else:
            panels += [(axes, {name: members}) for name, members in groups.items()]
    fig, grid = plt.subplots(len(panels), 2, figsize=(12, 4 * len(panels)), squeeze=False)
    for (axes, groups), (left, right) in zip(panels, grid):
        if len(axes) == 1:
            _factor_lines(left, right, axes[0], groups)
        else:
            (name, members), = groups.items()
            _factor_heatmaps(fig, left, right, axes, name, members)
    _save(fig, path)


def _median_or_budget(row: Row) -> tuple[float, bool]:
    m = row["median_steps"]
    return (row["budget"], True) if math.isinf(m) else (m, False)


def _factor_lines(left, right, axis: str, groups) -> None:
    derived = derived_axis(axis)  # e.g. supports = C(S, s): one series per s, rising with S
    style = {"marker": "o", "ls": "-"}
    for name, members in groups.items():
        members = sorted(members, key=lambda m: m[0])
        xs = [v[0] for v, _ in members]
        left.plot(xs, [r["solve_rate"] for _, r in members], label=name, **style)
        ys, never = zip(*(_median_or_budget(r) for _, r in members))
        low = [min(r["median_ci_low"], r["budget"]) for _, r in members]
        high = [min(r["median_ci_high"], r["budget"]) for _, r in members]
        line, = right.plot(xs, ys, label=name, **style)
        right.errorbar(xs, ys, yerr=[np.subtract(ys, low), np.subtract(high, ys)], fmt="none",
                       ecolor=line.get_color(), alpha=0.5, capsize=3)
        if any(never):
            right.scatter(*zip(*((x, y) for x, y, n in zip(xs, ys, never) if n)), marker="x",
                          s=60, color=line.get_color(), zorder=3)
    values = sorted({v[0] for g in groups.values() for v, _ in g})
    # a log axis where the values are positive numbers and span a factor of 8 or more (a named
    # axis such as arch.init is categorical)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    log = derived is not None or (numeric and len(values) > 2 and values[0] > 0
                                  and values[-1] / values[0] >= 8)
    for ax in (left, right):
        ax.set_xlabel(derived[1] if derived else axis)
        if log:
            ax.set_xscale("log", base=2)
            if not derived:  # the swept values themselves; a derived axis's are irregular
                ax.set_xticks(values, [f"{v:g}" for v in values])
                ax.minorticks_off()
        ax.grid(alpha=0.3)
    if derived:  # a power law reads as a line: log steps on log x
        right.set_yscale("log")
    left.set(ylabel="solve rate", ylim=(-0.03, 1.03), title=f"solve rate vs {axis}")
    right.set(ylabel="median steps to emergence (x: never)",
              title=f"median steps (95% CI) vs {axis}")
    left.legend(fontsize=7)


def _factor_heatmaps(fig, left, right, axes: list[str], name: str, members) -> None:
    from matplotlib import patheffects

    xs = sorted({v[0] for v, _ in members})
    ys = sorted({v[1] for v, _ in members})
    solve = np.full((len(ys), len(xs)), np.nan)
    steps = np.full((len(ys), len(xs)), np.nan)
    never = np.zeros((len(ys), len(xs)), dtype=bool)
    for (x, y), row in members:
        i, j = ys.index(y), xs.index(x)
        solve[i, j] = row["solve_rate"]
        steps[i, j], never[i, j] = _median_or_budget(row)
    for ax, data, title, cmap in ((left, solve, "solve rate", "viridis"),
                                  (right, steps, "median steps to emergence", "magma_r")):
        im = ax.imshow(data, origin="lower", cmap=cmap, aspect="auto")
        fig.colorbar(im, ax=ax)
        for i in range(len(ys)):
            for j in range(len(xs)):
                if not np.isnan(data[i, j]):
                    text = ("never" if never[i, j] and data is steps
                            else f"{data[i, j]:.2f}" if data is solve else f"{data[i, j]:.0f}")
                    ax.text(j, i, text, ha="center", va="center", fontsize=8,
                            path_effects=[patheffects.withStroke(linewidth=2.5, foreground="w")])
        ax.set_xticks(range(len(xs)), [f"{x:g}" for x in xs])
        ax.set_yticks(range(len(ys)), [f"{y:g}" for y in ys])
        ax.set(xlabel=axes[0], ylabel=axes[1],
               title=f"{title}\n{name.replace(' / ', chr(10))}")  # task, arch: a line each


# --- one seed per row ----------------------------------------------------------------------------
def representative(runs: list[RunRecord]) -> RunRecord:
    """The median emerger (by steps-to-emergence), or the seed that got closest when none did."""
    emerged = sorted((r for r in runs if r.emerged), key=lambda r: (r.steps_to_emergence, r.seed))
    if emerged:
        return emerged[(len(emerged) - 1) // 2]
    metric = runs[0].criterion.metric
    sign = -1 if higher_is_better(metric) else 1
    return min(runs, key=lambda r: sign * r.final_metrics.get(metric, math.inf))


def dynamics(path: Path, rows: list[Row]) -> bool:
    """Draw `dynamics.png`; False (nothing written) when no row has recorded curves."""
    shown = [(row, representative(row["runs"])) for row in rows]
    shown = [(row, run) for row, run in shown if run.curves]
    if not shown:
        return False
    plt = pyplot()
    fig, grid = plt.subplots(len(shown), 2, figsize=(12, 2.9 * len(shown)), squeeze=False)
    for (row, run), (left, right) in zip(shown, grid):
        curves = run.curves
        steps = curves["step"]
        left.plot(steps, curves["val/token_acc"], color="C0", label="held-out")
        if "train/token_acc" in curves:
            left.plot(steps, curves["train/token_acc"], color="C1", ls="--", label="training probe")
        if run.references:
            left.axhline(run.references["no_context"]["token_acc"], color="grey", ls=":",
                         lw=0.9, label="no context")
        left.set(ylim=(-0.03, 1.03), ylabel="token accuracy")
        left.legend(fontsize=7, loc="lower right")
        layers = sorted(k for k in curves if k.startswith("val/parent_mass_l"))
        for k in layers:
            right.plot(steps, curves[k], label=f"layer {k.rsplit('_l', 1)[1]}")
        if layers:
            right.set(ylim=(-0.03, 1.03), ylabel="mass on parents")
            right.legend(fontsize=7, loc="lower right")
        else:
            right.text(0.5, 0.5, "no attention to read", ha="center", va="center",
                       transform=right.transAxes, color="grey")
            right.set_xlim(left.get_xlim())
        end, emerged = run.plateau_end, run.steps_to_emergence
        for ax in (left, right):
            if end is not None:
                ax.axvline(end, color="grey", ls="--", lw=0.9)
            if emerged is not None:
                ax.axvline(emerged, color="k", lw=1.1)
            ax.grid(alpha=0.3)
        seed = run.seed
        outcome = run.status
        if emerged is not None:
            outcome = f"emerged at step {emerged} (solid)" + (
                f", plateau ends at {end} (dashed)" if end is not None else
                f"; {run.width_note or 'no plateau recorded'}")
        left.set_title(f"{row['task']}\n{row['architecture']}, seed {seed}: {outcome}",
                       fontsize=8)
        right.set_title("attention mass on the ground-truth parents (max over heads)", fontsize=8)
    grid[-1][0].set_xlabel("training step")
    grid[-1][1].set_xlabel("training step")
    _save(fig, path)
    return True


def ground_truth(run: RunRecord) -> Any:
    """The run's ground-truth attention pattern (L, L): as the run recorded it, or rebuilt from
    its task for a run recorded before runs kept it (this imports torch and Lightning)."""
    if run.attention_target is not None:
        return run.attention_target
    from datamodules import build_task

    from ..training.sections import load_task_config

    task = build_task(load_task_config(run.config["task"]), seed=run.seed)
    return task.attention_target().numpy()


def attention_maps(path: Path, rows: list[Row], limit: int = 8) -> bool:
    """Draw `attention.png` for up to `limit` attention rows; False when there is none."""
    shown = []
    for row in rows:
        run = representative(row["runs"])
        if run.learned_patterns:
            best = max(run.learned_patterns, key=lambda p: p["parent_mass"])
            shown.append((row, run, best))
    if not shown:
        return False
    shown = shown[:limit]
    plt = pyplot()
    fig, grid = plt.subplots(len(shown), 2, figsize=(9, 4.2 * len(shown)), squeeze=False)
    for (row, run, best), (left, right) in zip(shown, grid):
        left.imshow(np.asarray(ground_truth(run)), cmap="Greys", vmin=0, vmax=1)
        left.set_title(f"ground truth\n{row['task']}", fontsize=8)
        right.imshow(np.asarray(best["map"]), cmap="viridis", vmin=0, vmax=1)
        right.set_title(f"{row['architecture']}, seed {run.seed} ({run.status})\n"
                        f"layer {best['layer']} head {best['head']}: "
                        f"mass on parents {best['parent_mass']:.2f}", fontsize=8)
        for ax in (left, right):
            ax.set(xlabel="input position read", ylabel="output position")
    _save(fig, path)
    return True
