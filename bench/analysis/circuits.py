"""When do circuits form? The leaderboard's head-screen section, from runs with `measure.circuits`.

Per row (one architecture on `induction`), over its screened runs, the second paper's findings:

- **F1** layers 0 and 1 never hold a first-token (sink) head: the runs with one there at any
  checkpoint.
- **F2** the sink fraction's shape over training: `jump` (one interval adds half the final
  fraction), `gradual`, or `none` (no sink head at the end), counted over runs.
- **F3** induction forms an order of magnitude earlier than sinks reach half their final
  fraction: per run the ratio of the sink half step to the induction formation step; its median
  with an order-statistic interval, the runs at >= 10, and the exact sign test of "induction
  first" (ratio > 1) over the runs where both formed.
- **F4** most of the final induction circuit is identified early: per run the fraction of the
  last checkpoint's induction heads already classified at the last checkpoint within 2% of
  training; median over runs with an induction circuit. Since "training" here is the spec's
  step budget, not a natural length, the section also gives the step where two thirds of the
  final circuit (the paper's 67%) is first identified: median with its order-statistic interval,
  and as a share of the budget.
- **F5** an induction head's participation ratio rises at or before its selectivity crosses the
  threshold: the heads where it does over all final induction heads (descriptive); the test is
  per run, since the heads of one run are not independent: the runs where most of their
  induction heads do against the runs where most do not (ties dropped), exact two-sided sign
  test.

The sign tests' p-values are Holm-adjusted across the rows of the section (one family per
finding); a verdict reads the adjusted p at the seed count the spec fixed.
- Group ablation at the last checkpoint: median loss change with the induction heads' attention
  zeroed against as many other heads, and the runs where the induction heads cost more.

The screen assigns each head one class (the one it exceeds by the largest factor), so an
induction head that also parks on the first token is not counted as a sink. Where the runs kept
their selectivity ratios (result.json's circuits steps), a second table counts sinks whatever
else a head is (`sink_course`: first-token ratio at or above the run's own first-token
threshold, 30x by default) and gives F1-F3 on that count. The prose states the screen batch and
thresholds the runs were screened with, read from their summaries.
"""

from __future__ import annotations

import math
from typing import Any

from ..core import markdown
from ..core.heads import THRESHOLDS, sink_course
from ..core.stats import finite_median, holm, median_interval
from .labels import natural_key

EARLY = 0.02  # F4: "identified at 0.3-2% of training"
MAGNITUDE = 10  # F3: "an order of magnitude earlier"
TWO_THIRDS = 2 / 3  # F4: "most of the final induction circuit (67%)"


def _screened(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [r.circuits | {"max_steps": r.config["train"]["max_steps"]}
            for r in row["runs"] if isinstance(r.circuits, dict)]


def _first(c: dict[str, Any]) -> float:
    """The first-token threshold a run was screened with."""
    return c.get("thresholds", THRESHOLDS)["first"]


def _screen_setup(rows: list[dict[str, Any]]) -> str:
    """The screen batch and the induction and first-token thresholds of the rows' screened runs,
    as prose (each distinct setting, where runs differ)."""
    seen = []
    for c in (c for row in rows for c in _screened(row)):
        t = c.get("thresholds", THRESHOLDS)
        n = c.get("sequences")
        text = (f"{f'{n:,}' if n else 'an unrecorded number of'} induction sequences per "
                f"checkpoint; thresholds "
                f"induction {t['induction']:g}x, first token {t['first']:g}x"
                + (", as in the paper" if (t["induction"], t["first"]) ==
                   (THRESHOLDS["induction"], THRESHOLDS["first"]) else ""))
        if text not in seen:
            seen.append(text)
    return seen[0] if len(seen) == 1 else "runs differ: " + " | ".join(seen)


def induction_first(pairs: list[tuple[int | None, int | None]]) -> dict[str, Any]:
    """F3 from (induction formation step, sink half step) per run: the ratio's median with an
    order-statistic interval over the runs where both formed, the runs at >= `MAGNITUDE`, and
    the exact one-sided sign test of "induction first"."""
    from scipy.stats import binomtest

    ratios = [math.inf if ind == 0 else half / ind for ind, half in pairs
              if ind is not None and half is not None]
    finite = [r for r in ratios if math.isfinite(r)]
    med, low, high = median_interval(finite) if finite else (math.nan,) * 3
    first = sum(r > 1 for r in ratios)
    return {"f3_both": len(ratios), "f3_median": med, "f3_low": low, "f3_high": high,
            "f3_magnitude": sum(r >= MAGNITUDE for r in ratios), "f3_first": first,
            "f3_p": binomtest(first, len(ratios), 0.5, alternative="greater").pvalue
            if ratios else math.nan}


def row_sinks_any_class(row: dict[str, Any]) -> dict[str, Any] | None:
    """F1-F3 with sinks counted whatever else a head is (`sink_course`: first-token ratio >=
    the run's first-token threshold), over the row's screened runs that kept their ratios (None
    when none did). The
    single-class rule assigns an induction head that also parks on the first token to
    induction, so under it sinks can be missed altogether."""
    runs = [c for c in _screened(row) if all("ratios" in s for s in c["steps"])]
    if not runs:
        return None
    courses = [sink_course(c["steps"], _first(c)) for c in runs]
    return {"runs": len(runs), "with_sinks": sum(k["shape"] != "none" for k in courses),
            "f1_runs_with_early_sinks": sum(bool(k["in_layers_0_1_at"]) for k in courses),
            "f2_shapes": {s: sum(k["shape"] == s for k in courses)
                          for s in ("jump", "gradual", "none")},
            "sink_layers": sorted({i for k in courses for i in k["layers_at_end"]}),
            **induction_first([(c["induction_formation_step"], k["half_step"])
                   for c, k in zip(runs, courses)])}


def row_circuits(row: dict[str, Any]) -> dict[str, Any] | None:
    """The findings' numbers over the row's screened runs (None when none was screened)."""
    from scipy.stats import binomtest

    runs = _screened(row)
    if not runs:
        return None
    early = []
    for c in runs:
        steps = [s["step"] for s in c["steps"]]
        within = [i for i, s in enumerate(steps) if 0 < s <= EARLY * c["max_steps"]]
        ident = c["early_identification"]
        if within and ident[-1] is not None:
            early.append(ident[within[-1]])
    two_thirds = [next(s["step"] for s, v in zip(c["steps"], c["early_identification"])
                       if v >= TWO_THIRDS) for c in runs if c["early_identification"][-1]]
    budget = runs[0]["max_steps"]
    tt_med, tt_low, tt_high = median_interval(two_thirds) if two_thirds else (math.nan,) * 3
    heads = [h for c in runs for h in c["induction_heads"]]
    ahead = sum(h["pr_at_or_before"] for h in heads)
    shares = [sum(h["pr_at_or_before"] for h in c["induction_heads"]) / len(c["induction_heads"])
              for c in runs if c["induction_heads"]]
    more, fewer = sum(x > 0.5 for x in shares), sum(x < 0.5 for x in shares)
    ablated = _ablated(runs, "")
    ablated_mean = _ablated(runs, "_mean")
    return {
        "runs": len(runs),
        "f1_runs_with_early_sinks": sum(bool(c["sinks_in_layers_0_1_at"]) for c in runs),
        "f2_shapes": {s: sum(c["sink_shape"] == s for c in runs)
                      for s in ("jump", "gradual", "none")},
        **induction_first([(c["induction_formation_step"], c["sink_half_step"]) for c in runs]),
        "f4_runs": len(early), "f4_median": finite_median(early),
        "f4_two_thirds": tt_med, "f4_two_thirds_low": tt_low, "f4_two_thirds_high": tt_high,
        "f4_two_thirds_share": tt_med / budget,
        "f5_heads": len(heads), "f5_ahead": ahead, "f5_runs_more": more, "f5_runs_fewer": fewer,
        "f5_p": binomtest(more, more + fewer, 0.5).pvalue if more + fewer else math.nan,
        "induction_runs": sum(bool(c["induction_heads"]) for c in runs),
        "ablation_runs": len(ablated),
        "dloss_induction": finite_median([a["dloss_induction"] for a in ablated]),
        "dloss_control": finite_median([a["dloss_control"] for a in ablated]),
        "ablation_wins": sum(a["dloss_induction"] > a["dloss_control"] for a in ablated),
        "ablation_mean_runs": len(ablated_mean),
        "dloss_induction_mean": finite_median([a["dloss_induction_mean"] for a in ablated_mean]),
        "dloss_control_mean": finite_median([a["dloss_control_mean"] for a in ablated_mean]),
        "ablation_mean_wins": sum(a["dloss_induction_mean"] > a["dloss_control_mean"]
                                  for a in ablated_mean),
    }


def _ablated(runs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The ablations of the runs that measured both the induction and the control heads (kind
    "" zeroed, "_mean" mean pattern; runs screened before mean-pattern ablation have none)."""
    return [c["ablation"] for c in runs
            if c["ablation"].get(f"dloss_induction{kind}") is not None
            and c["ablation"].get(f"dloss_control{kind}") is not None]


def fixed(x: float, digits: int = 2) -> str:
    """x with `digits` decimals, or '-' where it is missing or not finite."""
    return "-" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def induction_first_cells(c: dict[str, Any]) -> list[str]:
    """The table cells of claim F3 (induction forms before sinks, by how much) for one row."""
    return [f"{fixed(c['f3_median'], 1)} [{fixed(c['f3_low'], 1)}, {fixed(c['f3_high'], 1)}]",
            f"{c['f3_magnitude']}/{c['f3_both']}", f"{c['f3_first']}/{c['f3_both']}",
            f"{fixed(c['f3_p'], 3)} ({fixed(c.get('f3_p_holm', math.nan), 3)})"]


F3_COLUMNS = ["F3 ratio", f"F3 >= {MAGNITUDE}x", "F3 induction first", "F3 p (Holm)"]


def _holm_rows(found: list[dict[str, Any]], key: str) -> None:
    """Adds `key`_holm to each row's numbers: Holm across the rows that have a test."""
    tested = [c for c in found if math.isfinite(c[key])]
    for c, adjusted in zip(tested, holm([c[key] for c in tested])):
        c[f"{key}_holm"] = adjusted


def circuits_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The section, or nothing when no run was screened."""
    found = [(row, c) for row in rows if (c := row_circuits(row)) is not None]
    if not found:
        return []
    for key in ("f3_p", "f5_p"):
        _holm_rows([c for _, c in found], key)
    mean = any(c["ablation_mean_runs"] for _, c in found)
    table = [[row["task"], f"`{row['architecture']}`", c["runs"], c["induction_runs"],
              f"{c['f1_runs_with_early_sinks']}/{c['runs']}", _shapes(c), *induction_first_cells(c),
              f"{fixed(c['f4_median'])} ({c['f4_runs']})",
              f"{fixed(c['f4_two_thirds'], 0)} [{fixed(c['f4_two_thirds_low'], 0)}, "
              f"{fixed(c['f4_two_thirds_high'], 0)}] ({fixed(100 * c['f4_two_thirds_share'], 1)}%)",
              f"{c['f5_ahead']}/{c['f5_heads']}", f"{c['f5_runs_more']} vs {c['f5_runs_fewer']}",
              f"{fixed(c['f5_p'], 3)} ({fixed(c.get('f5_p_holm', math.nan), 3)})",
              f"{fixed(c['dloss_induction'], 3)} vs {fixed(c['dloss_control'], 3)} "
              f"({c['ablation_wins']}/{c['ablation_runs']})"]
             + ([f"{fixed(c['dloss_induction_mean'], 3)} vs {fixed(c['dloss_control_mean'], 3)} "
                 f"({c['ablation_mean_wins']}/{c['ablation_mean_runs']})"] if mean else [])
             for row, c in found]
    return ["## Circuits: the head screen over checkpoints", "",
            f"Every screened run (`bench circuits`: {_screen_setup(rows)}; each head is assigned "
            "the one class it exceeds by the largest factor). F1: runs with a sink "
            "(first-token) head in layer 0 or 1 at any checkpoint. F2: shape of the sink "
            "fraction over training. F3: sink half step / induction formation step, median "
            f"[order-statistic interval]; runs at >= {MAGNITUDE}x; runs where induction came "
            "first, with the exact one-sided sign test. F4: median share of the final induction "
            f"heads identified within {EARLY:.0%} of training (runs); the step where two thirds of "
            "it is first identified, median [order-statistic interval] (share of the step "
            "budget). F5: induction heads whose "
            "participation ratio rises at or before their ratio crosses the threshold (pooled, "
            "descriptive); runs where most of their induction heads do vs most do not, exact "
            "two-sided sign test. p (Holm across the rows in brackets). Ablation: median loss "
            "change zeroing the induction heads vs as many other heads (runs where the "
            "induction heads cost more)"
            + ("; mean-pattern ablation: the same with the heads' attention replaced by its "
               "average pattern over the batch, which keeps a head's positional role (zeroing "
               "a few heads can break a small model whichever heads they are)." if mean else
               "."), "",
            *markdown.table(["task", "architecture", "screened", "with induction heads",
                             "F1 early sinks", "F2 shape", *F3_COLUMNS, "F4 early share",
                             "F4 two thirds at step",
                             "F5 PR first (heads)", "F5 runs", "F5 p (Holm)", "ablation dloss",
                             *(["mean-pattern ablation dloss"] if mean else [])],
                            table), *_any_class_markdown(rows)]


def _shapes(c: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in c["f2_shapes"].items() if v)


def _any_class_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The multi-label sink table, for rows whose runs kept their ratios."""
    found = [(row, c) for row in rows if (c := row_sinks_any_class(row)) is not None]
    if not found:
        return []
    _holm_rows([c for _, c in found], "f3_p")
    table = [[row["task"], f"`{row['architecture']}`", c["runs"],
              f"{c['with_sinks']}/{c['runs']}",
              ", ".join(map(str, c["sink_layers"])) or "-",
              f"{c['f1_runs_with_early_sinks']}/{c['runs']}", _shapes(c), *induction_first_cells(c)]
             for row, c in found]
    return ["", "Sinks counted whatever else a head is: a head is a sink at a checkpoint when its "
            "first-token ratio reaches the first-token threshold, even where it exceeds another "
            "class's threshold by "
            "more (the table above assigns one class, so an induction head that also parks on "
            "the first token counts as induction only). Screened runs that kept their ratios; "
            "runs with a sink at the last checkpoint and the layers holding them; then F1-F3 as "
            "above on this count (F3 p Holm across these rows).", "",
            *markdown.table(["task", "architecture", "screened", "with sinks", "sink layers",
                             "F1 early sinks", "F2 shape", *F3_COLUMNS], table)]


def _sinks_any_class(c: dict[str, Any]) -> list[float | None]:
    """The multi-label sink fraction per checkpoint; None throughout for a run that kept no
    ratios."""
    if all("ratios" in s for s in c["steps"]):
        return sink_course(c["steps"], _first(c))["fraction"]
    return [None] * len(c["steps"])


CURVES = {"induction": lambda c: c["overall"]["induction"],
          "first": lambda c: c["overall"]["first"],
          "first_any": _sinks_any_class,
          "identified": lambda c: c["early_identification"]}


def row_curves(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Over a row's screened runs, at the checkpoints every run kept (the log-spaced ones; a
    run's extra bracketing checkpoints are left out): per curve of `CURVES` the 25th, 50th and
    75th percentile over runs (NaN where no run has a value: a run without an induction circuit
    has no identified share, a run that kept no ratios no multi-label sink fraction)."""
    import numpy as np

    common = set.intersection(*({s["step"] for s in c["steps"]} for c in runs))
    out: dict[str, Any] = {"step": sorted(common)}
    for name, values in CURVES.items():
        per_run = [[v for s, v in zip(c["steps"], values(c)) if s["step"] in common]
                   for c in runs]
        columns = [[v for v in column if v is not None] for column in zip(*per_run)]
        out[name] = [[float(np.percentile(col, q)) if col else math.nan for col in columns]
                     for q in (25, 50, 75)]
    return out


def circuits_figure(path: Any, rows: list[dict[str, Any]]) -> bool:
    """Per row, the median over its screened runs (and the interquartile band) of the
    induction-head fraction, the sink-head fraction (single class, solid; whatever else a head
    is, dashed, where the runs kept their ratios) and the share of the final induction circuit
    identified, against the checkpoint step; False when no run was screened."""
    from ..core.reports import pyplot
    from .plots import _save

    shown = [(row, row_curves(runs)) for row in rows if (runs := _screened(row))]
    if not shown:
        return False
    # the legend in the rows' natural order (2, 4, 6 layers, not as the board lists them)
    shown.sort(key=lambda item: natural_key(item[0]["architecture"]))
    markers = "o^sDvP*X"
    plt = pyplot()
    titles = {"induction": "induction heads (fraction of all heads)",
              "first": "sink (first-token) heads (fraction of all heads)",
              "identified": "final induction circuit identified (share)"}
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    any_class = False
    for k, (row, curves) in enumerate(shown):
        x = [max(s, 1) for s in curves["step"]]
        for ax, name in zip(axes, titles):
            low, mid, high = curves[name]
            # distinct markers, hollow, later rows thinner: coinciding medians stay visible
            ax.plot(x, mid, marker=markers[k % len(markers)], markersize=4, fillstyle="none",
                    linewidth=2.2 - 0.3 * min(k, 4), color=f"C{k}", label=row["architecture"])
            ax.fill_between(x, low, high, color=f"C{k}", alpha=0.15)
        low, mid, high = curves["first_any"]
        if any(math.isfinite(v) for v in mid):
            axes[1].plot(x, mid, linestyle="--", color=f"C{k}")
            axes[1].fill_between(x, low, high, color=f"C{k}", alpha=0.08)
            any_class = True
    if any_class:
        dashed = axes[1].plot([], [], linestyle="--", color="grey",
                              label="dashed: sinks whatever else a head is")
        axes[1].legend(handles=dashed, fontsize=7)
    for ax, title in zip(axes, titles.values()):
        ax.set_title(title, fontsize=9)
        ax.set_xscale("log")
        ax.set_xlabel("step (checkpoint; 0 drawn at 1)")
        ax.set_ylim(-0.02, 1.02)
    axes[0].legend(fontsize=7)
    fig.suptitle("head screen over training: median over seeds, interquartile band", fontsize=9)
    _save(fig, path)
    return True
