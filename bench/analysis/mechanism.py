"""Does emergence coincide with learning the sparse pattern? The leaderboard's mechanism section.

For every run that recorded a pattern curve (the intervention map's mass on the parents,
`val/intervention_mass`, and the gradient map's, `val/influence_mass`, for every mixer; the
attention mass, `val/parent_mass`, for attention), the **alignment rise** is the first evaluation
at which the curve has covered half of its rise from step 0 to its maximum; a curve that never
rises by 0.02 has none. A map's curve rises from the mass of a map with no preference (rows
spread evenly over the earlier positions) where its start is lower: a mixer whose output
projections start at zero has no influence at step 0. The verdicts read the intervention map
(bench.measures.influence: it sees dependences a gradient misses); the gradient map stays
beside it.

Per row: the lag of the rise behind the emergence step over the emerged seeds (negative: the
pattern led), its median with a distribution-free interval (order statistics of the binomial, at
least 95% coverage), the share of seeds whose rise falls within one evaluation of emergence, and
Spearman's rank correlation of rise and emergence steps across seeds with its permutation
p-value, exact up to 9 seeds, else from 9,999 random pairings (do seeds that find the pattern
later emerge later?). Emergence is a threshold near the top of the metric's rise, so the lag is
also given against the metric's own half-rise (the same definition on the metric's curve, over
every seed where both rose, emerged or not): like against like. Over every seed, emerged or not:
the curve's start and end (medians), the no-preference mass, each map's AUROC of the
parents against the other candidate positions at start and end (does it rank the parents first,
whatever its mass?), and how many seeds that never emerged rose all the same, so a mixer that
never emerges still says whether it learned the pattern.

Rows whose runs were patched (`measure.patch`) add, over the runs whose pre checkpoint is on the
plateau, p(correct) pre and post, the fraction of the gap restored by the best head, by the
greedy set of a quarter of the heads, by all heads, and by the ground-truth pattern in every
head, and the accuracy the ground truth gives in every layer and in the best single layer (does
it reach the emergence threshold?).
"""

from __future__ import annotations

import math
from typing import Any

from ..core import markdown
from ..core.emergence import EmergenceCriterion, higher_is_better, on_plateau
from ..core.stats import finite_median, median_interval, spearman

MIN_RISE = 0.02
AUROC_BAR = 0.9  # issue 38: a map that sees the pattern ranks the parents this high at emergence
CURVES = (("val/intervention_mass", "intervention"), ("val/influence_mass", "influence"),
          ("val/parent_mass", "attention"))
MAPS = ("intervention", "influence")  # the curves of a map of any mixer: rise from the
# no-preference mass, with the parents' AUROC beside (bench.measures.influence); the verdicts
# read the intervention map, the gradient (influence) map stays beside it


def rise_step(curves: dict[str, list[float]], key: str, falls: bool = False,
              floor: float = -math.inf) -> int | None:
    """The first evaluation at which `key` has covered half its rise from step 0 (or from
    `floor`, where that is higher) to its max (with `falls`, half its fall to its min: a
    loss)."""
    values, steps = curves.get(key), curves.get("step")
    if values and falls:
        values = [-v for v in values]
    if not values or not steps or not math.isfinite(values[0]):
        return None
    finite = [v for v in values if math.isfinite(v)]
    top, start = max(finite), max(values[0], floor)
    if top - start < MIN_RISE:
        return None
    half = start + (top - start) / 2
    return next(s for s, v in zip(steps, values) if math.isfinite(v) and v >= half - 1e-9)


def even_mass(target: list[list[float]] | None) -> float:
    """The influence mass on the parents of a map with no preference: each scored row (a row of
    the ground truth `target` (L, L) with parents before it) spreading its influence evenly over
    the earlier positions, (parents before p) / p, averaged over the rows. NaN without a target,
    or for a per-sequence pattern (an in-context task's recorded target is a mean over sequences,
    fractional, from which the level cannot be read). A mixer whose output projections start at
    zero has no influence on earlier positions at step 0 (mass 0), so its curve's rise is
    measured from this level."""
    if any(v not in (0, 1) for row in target or [] for v in row):
        return math.nan
    shares = []
    for p, row in enumerate(target or []):
        parents = sum(1 for q in range(p) if row[q] > 0)
        if parents:
            shares.append(parents / p)
    return sum(shares) / len(shares) if shares else math.nan


def _ends(curve: list[float]) -> tuple[float, float]:
    """(first, last) finite values of a pattern curve."""
    finite = [v for v in curve if math.isfinite(v)]
    return (finite[0], finite[-1]) if finite else (math.nan, math.nan)


def _at(curves: dict[str, list[float]], key: str, step: int) -> float:
    """The curve's last finite value at or before `step` (a map measured every k-th
    evaluation is NaN between); NaN where it has none."""
    found = math.nan
    for s, v in zip(curves.get("step", []), curves.get(key, [])):
        if s > step:
            break
        if math.isfinite(v):
            found = v
    return found


def _lags(lags: list[float], eval_every: int) -> tuple[float, float, float, float]:
    """(median, interval low, interval high, share within one evaluation) of step lags."""
    if not lags:
        return (math.nan,) * 4
    return (*median_interval(lags), sum(abs(x) <= eval_every for x in lags) / len(lags))


def criterion(row: dict[str, Any]) -> EmergenceCriterion:
    """The row's emergence criterion, its unset fields at the criterion's own defaults."""
    return EmergenceCriterion(**row["job_config"].get("emergence", {}))


def row_mechanism(row: dict[str, Any]) -> list[dict[str, Any]]:
    """Per pattern curve the row recorded: the lag summary over its emerged seeds, the lag to
    the emergence metric's own half-rise, and over every seed the curve's start and end
    (medians), the no-preference mass and how many seeds that never emerged rose anyway (a
    pattern learned without the capability)."""
    eval_every = row["job_config"]["train"]["eval_every"]
    metric = criterion(row).metric
    falls = not higher_is_better(metric)
    out = []
    for key, label in CURVES:
        runs = [r for r in row["runs"] if key in (r.curves or {})]
        if not runs:
            continue
        # an influence curve rises from the no-preference mass where its start is lower
        evens = [even_mass(r.attention_target) if label in MAPS else math.nan
                 for r in runs]
        rises = [rise_step(r.curves, key, floor=e if math.isfinite(e) else -math.inf)
                 for r, e in zip(runs, evens)]
        emerged = [(rise, r.emergence_step) for rise, r in zip(rises, runs) if r.emerged]
        risen = [(rise, em) for rise, em in emerged if rise is not None]
        lag = _lags([rise - em for rise, em in risen], eval_every)
        rho, p = spearman([r for r, _ in risen], [e for _, e in risen])
        # the same half-rise definition on the emergence metric itself, over every seed whose
        # metric and pattern both rose (emerged or not): a lead here is not the rest of the
        # metric's own rise (emergence is a threshold near its top)
        halves = [(rise, rise_step(r.curves, metric, falls)) for rise, r in zip(rises, runs)]
        to_half = [a - b for a, b in halves if a is not None and b is not None]
        half = _lags(to_half, eval_every)
        ends = [_ends(r.curves[key]) for r in runs]
        aurocs = ([_ends(r.curves.get(f"val/{label}_auroc", [])) for r in runs]
                  if label in MAPS else [])
        # the parents' AUROC where each emerged seed emerged (issue 38's bar: >= 0.9 there)
        at_em = ([_at(r.curves, f"val/{label}_auroc", r.emergence_step)
                  for r in runs if r.emerged] if label in MAPS else [])
        at_em = [v for v in at_em if math.isfinite(v)]
        censored = [rise for rise, r in zip(rises, runs) if not r.emerged]
        out.append({"curve": label, "seeds": len(runs), "emerged": len(emerged),
                    "risen": len(risen), "median_lag": lag[0], "lag_low": lag[1],
                    "lag_high": lag[2], "coincide": lag[3], "rho": rho, "p": p,
                    "half_lag": half[0], "half_low": half[1], "half_high": half[2],
                    "half_coincide": half[3], "half_n": len(to_half),
                    "start": finite_median([a for a, _ in ends]),
                    "end": finite_median([b for _, b in ends]),
                    "even": finite_median(evens),
                    "auroc_start": finite_median([a for a, _ in aurocs]),
                    "auroc_end": finite_median([b for _, b in aurocs]),
                    "auroc_at": at_em,
                    "censored": len(censored),
                    "censored_risen": sum(rise is not None for rise in censored)})
    return out


def patch_summary(row: dict[str, Any]) -> dict[str, Any] | None:
    """Medians over the row's patched runs whose pre checkpoint is on the plateau (elsewhere the
    gap is between two nearby checkpoints and its fractions are unstable): p(correct) pre and
    post, the fraction of the gap restored, and the accuracy with the ground truth patched into
    every layer and into the best single layer, with how many runs each brings to the emergence
    threshold (token accuracy criteria)."""
    runs = [r for r in row["runs"] if isinstance(r.patch, dict)]
    if not runs:
        return None
    # decided from result.json's plateau end, so runs patched before patch.json said it count
    used = [r.patch for r in runs if on_plateau(r.patch["pre"]["step"], r.plateau_end)]
    med = finite_median

    def greedy_at(p, k):
        return p["greedy"][min(k, len(p["greedy"])) - 1]["restored"]

    def best_layer(p):  # the ground truth in one layer only, the best of them
        return max(t["acc"] for t in p["ground_truth"][:-1]) if len(p["ground_truth"]) > 1 \
            else p["ground_truth"][-1]["acc"]

    solves, rule = None, criterion(row)
    if rule.metric == "val/token_acc" and used:
        threshold = rule.threshold
        solves = (sum(p["ground_truth"][-1]["acc"] >= threshold for p in used),
                  sum(best_layer(p) >= threshold for p in used))
    return {"runs": len(runs), "used": len(used),
            "pre": med([p["pre"]["p"] for p in used]), "post": med([p["post"]["p"] for p in used]),
            "top1": med([greedy_at(p, 1) for p in used]),
            "quarter": med([greedy_at(p, max(1, len(p["greedy"]) // 4)) for p in used]),
            "all": med([greedy_at(p, len(p["greedy"])) for p in used]),
            "truth": med([p["ground_truth"][-1]["restored"] for p in used]),
            "truth_acc": med([p["ground_truth"][-1]["acc"] for p in used]),
            "truth_layer_acc": med([best_layer(p) for p in used]),
            "solves": solves, "heads": len(runs[0].patch["greedy"])}


def _steps(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:+,.0f}"


def _num(x: float, digits: int = 2) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _at_emergence(values: list[float]) -> str:
    """Median (min-max) of the emerged seeds' AUROC at emergence, and how many reach 0.9."""
    if not values:
        return "-"
    ranged = "" if len(values) == 1 else f" ({min(values):.2f}-{max(values):.2f})"
    return (f"{finite_median(values):.2f}{ranged}, "
            f"{sum(v >= AUROC_BAR for v in values)}/{len(values)} >= {AUROC_BAR}")


LAG_NOTE = (
    "Alignment rise: the first evaluation at which the pattern curve (intervention: the "
    "intervention map's mass on the parents, any mixer, what the verdicts read; influence: "
    "the gradient map's, any mixer; attention: the attention mass on "
    "the parents) has covered half its rise from step 0 to its maximum (none below a "
    f"rise of {MIN_RISE}). Lag = rise - emergence step over the emerged seeds "
    "(negative: the pattern led); interval: order statistics, >= 95% coverage; "
    "coincide: share of seeds within one evaluation; rho: Spearman's rank correlation "
    "of rise and emergence steps across seeds, permutation p (exact up to 9 seeds, "
    "else 9,999 random pairings), per row, not adjusted across rows. Emergence is a "
    "threshold near the top of the metric's rise, so a pattern that rises with the "
    "metric still leads it by part of the rise: lag to the metric's half-rise compares "
    "like with like (the same half-rise definition on the emergence metric's curve, "
    "over every seed, emerged or not, where both rose: median [interval] (seeds), and "
    "the share within one evaluation). Over every "
    "seed, emerged or not: the curve at step 0 -> at the last evaluation (medians), the "
    "mass of a map with no preference (every row spread evenly over the "
    "earlier positions; a map's curve rises from this level where its "
    "start is lower: a mixer whose output projections start at zero has no influence on "
    "earlier positions at step 0), and how many seeds that never emerged rose all the "
    "same (a pattern learned without the capability). Parents' AUROC (the maps "
    "only): the AUROC of the parents against the other candidates (the positions a "
    "parent could be at: on a state task, the previous state's tokens) by the "
    "map, step 0 -> last evaluation (medians over every seed): 0.5 ranks the parents no "
    "higher than the rest, 1 puts them above every other candidate; a map can rank them "
    "first while spreading most of its mass elsewhere. AUROC at emergence: each emerged "
    "seed's at its emergence step (the last measured at or before it), median (min-max) "
    f"over the emerged seeds, and how many reach {AUROC_BAR}.")
PATCH_NOTE = (
    "Attention patching (bench patch, pre = the last kept checkpoint on "
    "the plateau: its end in runs that kept it, post = the first at or after "
    "emergence), medians over the patched runs "
    "whose pre checkpoint is on the plateau (runs without an observed plateau are "
    "left out: their gap is between two nearby checkpoints): p(correct) pre -> "
    "post; the fraction of that gap restored by the best single head, the greedy "
    "set of a quarter of the heads, all heads, and the ground-truth pattern in "
    "every head; the token accuracy with the ground truth patched into every "
    "layer / into the best single layer (a maximum over the layers, per run), and "
    "in how many runs each reaches the emergence threshold.")


def mechanism_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The section, or nothing when no run recorded a pattern curve."""
    lag_rows, patch_rows = [], []
    for row in rows:
        for m in row_mechanism(row):
            lag_rows.append([row["task"], f"`{row['architecture']}`", m["curve"],
                             f"{m['risen']}/{m['emerged']}", _steps(m["median_lag"]),
                             f"[{_steps(m['lag_low'])}, {_steps(m['lag_high'])}]",
                             _num(m["coincide"]), _num(m["rho"]), _num(m["p"], 3),
                             f"{_steps(m['half_lag'])} [{_steps(m['half_low'])}, "
                             f"{_steps(m['half_high'])}] ({m['half_n']})",
                             _num(m["half_coincide"]),
                             f"{_num(m['start'])} -> {_num(m['end'])}", _num(m["even"]),
                             f"{_num(m['auroc_start'])} -> {_num(m['auroc_end'])}"
                             if m["curve"] in MAPS else "-", _at_emergence(m["auroc_at"]),
                             f"{m['censored_risen']}/{m['censored']}"])
        p = patch_summary(row)
        if p:
            patch_rows.append([row["task"], f"`{row['architecture']}`",
                               f"{p['used']}/{p['runs']}", p["heads"],
                               f"{_num(p['pre'])} -> {_num(p['post'])}", _num(p["top1"]),
                               _num(p["quarter"]), _num(p["all"]), _num(p["truth"]),
                               f"{_num(p['truth_acc'])} / {_num(p['truth_layer_acc'])}",
                               "-" if p["solves"] is None else
                               f"{p['solves'][0]} / {p['solves'][1]} of {p['used']}"])
    if not lag_rows:
        return []
    lines = ["## Mechanism: the pattern against emergence", "", LAG_NOTE, "",
             *markdown.table(["task", "architecture", "curve", "risen/emerged", "median lag",
                              "lag interval", "coincide", "rho", "p",
                              "lag to the metric's half-rise", "coincide (half-rise)",
                              "start -> end (all seeds)", "no preference",
                              "parents' AUROC start -> end", "AUROC at emergence",
                              "risen/not emerged"], lag_rows)]
    if patch_rows:
        lines += ["", PATCH_NOTE, "",
                  *markdown.table(["task", "architecture", "on plateau/patched", "heads",
                                   "p pre -> post", "best head", "quarter of heads", "all heads",
                                   "ground truth", "ground-truth accuracy (all / best layer)",
                                   "reaches threshold (all / best layer)"], patch_rows)]
    return lines


def influence_figure(path: Any, rows: list[dict[str, Any]]) -> bool:
    """Per row, the median emerger's maps before and at emergence (the gradient map and the
    intervention map, where the run kept it) beside the ground truth (scored rows only; a row
    where no seed emerged: its closest seed's first and last maps), each panel with its
    colour scale; False when no run kept maps."""
    from ..core.reports import pyplot
    from .plots import _save, representative

    shown = [(row, representative(row["runs"])) for row in rows]
    shown = [(row, run) for row, run in shown
             if run.influence and run.influence.maps and run.attention_target]
    if not shown:
        return False
    many_tasks = len({row.get("task") for row, _ in shown}) > 1
    plt = pyplot()
    fig, grid = plt.subplots(len(shown), 5, figsize=(16, 2.9 * len(shown)), squeeze=False)
    for (row, run), axes in zip(shown, grid):
        em = run.steps_to_emergence if run.emerged else None
        truth = run.attention_target
        panels = []
        for key, name in (("influence", "gradient"), ("intervention", "intervention")):
            kept = getattr(run, key)
            if not (kept and kept.maps):
                panels += [(None, f"{name}: not recorded")] * 2
                continue
            steps, maps = kept.steps, kept.maps
            if em is None:  # never emerged: the first map against the last
                before, at = 0, len(steps) - 1
            else:
                at = next((i for i, s in enumerate(steps) if s >= em), len(steps) - 1)
                before = max(at - 1, 0)
            last = "" if em is not None else " (last; never emerged)"
            panels += [(maps[before], f"{name}, step {steps[before]}"),
                       (maps[at], f"{name}, step {steps[at]}{last}")]
        P = len(run.influence.maps[0])
        scored = run.influence.rows or (  # runs before the row sample measured every scored row
            [i for i, r in enumerate(truth) if any(r)][:P] or list(range(len(truth) - P,
                                                                         len(truth))))
        panels.append(([truth[i] for i in scored], "ground truth (parents)"))
        for ax, (m, title) in zip(axes, panels):
            ax.set_title(title, fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
            if m is None:
                ax.axis("off")
                continue
            image = ax.imshow(m, cmap="viridis", aspect="auto", vmin=0)
            fig.colorbar(image, ax=ax, fraction=0.046, pad=0.02).ax.tick_params(labelsize=6)
        task = f"{row['task'].split('(')[0]}\n" if many_tasks else ""  # which task's row
        axes[0].set_ylabel(f"{task}{row['architecture']}\nseed {run.seed}\n"
                           "scored position", fontsize=7)
        for ax in axes:
            ax.set_xlabel("input position", fontsize=7)
    fig.suptitle("mixing patterns before and at emergence: each row of a map is a scored "
                 "position's share of influence over the input positions (rows sum to 1)",
                 fontsize=9)
    _save(fig, path, title_inches=0.35)
    return True
