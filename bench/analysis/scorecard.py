"""The scorecard of a suite: how each mixer stands against attention across the suite's cells.

Per cell and mixer: the solve rate, the Kaplan-Meier median with its interval, the restricted
mean steps-to-emergence up to the budget (RMST: the area under the "not emerged yet" curve, so a
seed that never emerges counts its whole budget and the mean is defined whatever the solve
rate) and its ratio to attention's with a bootstrap interval over seeds, the exact log-rank p
against attention (Holm over every comparison of the suite), and the held-out / training gap
(the median over seeds of the largest excess of the training probe over the held-out set).

Per mixer: the geometric mean of its RMST ratios over the cells it ran (a bootstrap interval
that resamples every arm's seeds at once), a ranking by it, and one sentence: on how many cells
it emerged sooner than attention, later, or with no detectable difference, and the smallest
slowdown the cells' seeds detect. Attention is each cell's reference row (the suite's own
`transformer` row); a mixer is a row label, the same in every cell it ran.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.record import RunRecord
from ..core.rows import survival_sample
from ..core.stats import (
    Ratio,
    geometric_mean_ratio,
    holm,
    logrank_test,
    rmst,
    rmst_ratio,
    smallest_detectable,
)

ALPHA = 0.05


@dataclass
class CellScore:
    cell: str
    mixer: str
    seeds: int
    solve_rate: float
    median: float
    median_low: float
    median_high: float
    budget: float
    rmst: float
    ratio: Ratio | None
    """RMST against attention's in this cell (None for attention itself)"""
    p: float
    p_holm: float
    gap: float
    detectable: float
    """the smallest slowdown of attention's steps these seed counts detect (80% power)"""

    @property
    def verdict(self) -> str:
        if self.ratio is None:
            return "reference"
        if not self.p_holm < ALPHA:
            return "no detectable difference"
        return "sooner" if self.ratio.value < 1 else "later"


@dataclass
class MixerScore:
    mixer: str
    cells: int
    sooner: int
    later: int
    undetected: int
    ratio: Ratio
    """the geometric mean over cells of the RMST ratio to attention"""
    detectable: float
    """the median over cells of the smallest slowdown detectable there"""

    def sentence(self, comparisons: int) -> str:
        parts = [f"sooner than attention on {self.sooner} of {self.cells} cells"]
        if self.later:
            parts.append(f"later on {self.later}")
        parts.append(f"no detectable difference on {self.undetected}")
        detect = (f"{self.detectable:g}x" if math.isfinite(self.detectable)
                  else "no slowdown up to 8x")
        return (f"**{self.mixer}**: {', '.join(parts)} (exact log-rank, Holm over the suite's "
                f"{comparisons} comparisons); restricted mean steps-to-emergence "
                f"{self.ratio.value:.2g}x attention's (geometric mean, 95% interval "
                f"{self.ratio.low:.2g}-{self.ratio.high:.2g}); these seeds detect ~{detect}")


@dataclass
class Scorecard:
    cells: list[CellScore]
    mixers: list[MixerScore]
    """ranked: the lowest geometric-mean ratio first"""
    missing: list[str]
    """cells left out: no attention row to score against"""

    @property
    def comparisons(self) -> int:
        return sum(c.ratio is not None for c in self.cells)


Cells = dict[str, dict[str, list[RunRecord]]]
"""cell name -> row label -> the row's runs (one architecture at its reported rate)"""


def score(cells: Cells, reference: dict[str, str]) -> Scorecard:
    """The scorecard of `cells`, each scored against its `reference` row (attention's label; a
    cell without one is left out, said so)."""
    scores, missing = [], []
    for cell, rows in cells.items():
        ref = reference.get(cell)
        if ref not in rows:
            missing.append(cell)
            continue
        ref_t, ref_e = survival_sample(rows[ref])
        budget = max(r.budget_steps for runs in rows.values() for r in runs)
        for mixer, runs in rows.items():
            t, e = survival_sample(runs)
            scores.append(_cell_score(cell, mixer, mixer == ref, runs, t, e, ref_t, ref_e,
                                      budget))
    adjusted = iter(holm([s.p for s in scores if s.ratio is not None]))
    for s in scores:
        if s.ratio is not None:
            s.p_holm = next(adjusted)
    return Scorecard(scores, _mixer_scores(scores, cells, reference), missing)


def _cell_score(cell, mixer, own, runs, t, e, ref_t, ref_e, budget) -> CellScore:
    from ..core.stats import kaplan_meier

    km = kaplan_meier(t, e)
    gaps = [r.accuracy.gap for r in runs if r.accuracy and math.isfinite(r.accuracy.gap)]
    return CellScore(
        cell=cell, mixer=mixer, seeds=len(runs), solve_rate=sum(e) / len(e),
        median=km.median, median_low=km.ci_low, median_high=km.ci_high, budget=budget,
        rmst=rmst(t, e, budget),
        ratio=None if own else rmst_ratio(t, e, ref_t, ref_e, budget),
        p=math.nan if own else logrank_test(t, e, ref_t, ref_e).p, p_holm=math.nan,
        gap=statistics.median(gaps) if gaps else math.nan,
        detectable=smallest_detectable(ref_t, ref_e, budget, len(runs)))


def _mixer_scores(scores: list[CellScore], cells: Cells,
                  reference: dict[str, str]) -> list[MixerScore]:
    out = []
    for mixer in sorted({s.mixer for s in scores if s.ratio is not None}):
        mine = [s for s in scores if s.mixer == mixer and s.ratio is not None]
        samples = [(survival_sample(cells[s.cell][mixer]),
                    survival_sample(cells[s.cell][reference[s.cell]]), s.budget) for s in mine]
        verdicts = [s.verdict for s in mine]
        out.append(MixerScore(
            mixer, len(mine), verdicts.count("sooner"), verdicts.count("later"),
            verdicts.count("no detectable difference"), geometric_mean_ratio(samples),
            statistics.median(s.detectable for s in mine)))
    return sorted(out, key=lambda m: m.ratio.value)


# --- the scorecard's files ---------------------------------------------------------------------
def _steps(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:,.0f}"


def to_markdown(card: Scorecard, title: str) -> str:
    lines = [f"# {title}", ""]
    lines += [f"- {m.sentence(card.comparisons)}" for m in card.mixers]
    if card.missing:
        lines += [f"- left out (no attention row to score against): {', '.join(card.missing)}"]
    lines += ["", "![RMST ratio to attention per cell](scorecard.png)", "",
              "## Mixers, ranked", "",
              "| rank | mixer | cells | sooner | later | no detectable difference | RMST ratio "
              "(geometric mean) | 95% interval |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {i} | {m.mixer} | {m.cells} | {m.sooner} | {m.later} | {m.undetected} | "
              f"{m.ratio.value:.3g} | {m.ratio.low:.3g}-{m.ratio.high:.3g} |"
              for i, m in enumerate(card.mixers, 1)]
    lines += ["", "## Per cell", "",
              "| cell | mixer | seeds | solve rate | median steps (95% CI) | RMST (budget) | "
              "RMST ratio (95% CI) | log-rank p | Holm p | verdict | held-out gap |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in card.cells:
        ratio = "1 (reference)" if s.ratio is None else (
            f"{s.ratio.value:.3g} ({s.ratio.low:.3g}-{s.ratio.high:.3g})")
        p = "" if s.ratio is None else f"{s.p:.3g}"
        ph = "" if s.ratio is None else f"{s.p_holm:.3g}"
        lines.append(f"| {s.cell} | {s.mixer} | {s.seeds} | {s.solve_rate:.0%} | "
                     f"{_steps(s.median)} ({_steps(s.median_low)}-{_steps(s.median_high)}) | "
                     f"{_steps(s.rmst)} ({_steps(s.budget)}) | {ratio} | {p} | {ph} | "
                     f"{s.verdict} | {s.gap:.3f} |")
    lines += ["", "RMST: restricted mean steps-to-emergence up to the budget (a seed that never "
              "emerges counts the whole budget); its ratio's interval is a percentile bootstrap "
              "over seeds. The verdict is the exact permutation log-rank test against attention "
              f"in the same cell, Holm-adjusted over every comparison of the suite, at p < "
              f"{ALPHA}. Held-out gap: the median over seeds of the largest excess of the "
              "training probe's token accuracy over the held-out set's at one evaluation."]
    return "\n".join(lines) + "\n"


def write_scorecard(card: Scorecard, out: Path, title: str) -> Path:
    """scorecard.md, scorecard.json and scorecard.png in `out`; returns the markdown's path."""
    from ..core.reports import write_report

    report = {"cells": [asdict(c) | {"verdict": c.verdict} for c in card.cells],
              "mixers": [asdict(m) for m in card.mixers], "missing": card.missing}
    write_report(out, "scorecard", figure(card), report, to_markdown(card, title))
    return out / "scorecard.md"


def figure(card: Scorecard):
    """One row per mixer: its RMST ratio to attention in each cell with the interval, on a log
    axis, a line at 1."""
    from ..core.reports import pyplot

    plt = pyplot()
    mixers = [m.mixer for m in card.mixers]
    cells = list(dict.fromkeys(s.cell for s in card.cells))
    rows = max(len(mixers), 1)
    fig, axes = plt.subplots(rows, 1, figsize=(7, 1.0 + rows * (0.6 + 0.3 * len(cells))),
                             squeeze=False, sharex=True)
    for ax, mixer in zip(axes[:, 0], mixers):
        mine = {s.cell: s for s in card.cells if s.mixer == mixer and s.ratio is not None}
        for y, cell in enumerate(cells):
            s = mine.get(cell)
            if s is None:
                continue
            color = {"sooner": "tab:green", "later": "tab:red"}.get(s.verdict, "tab:gray")
            ax.errorbar([s.ratio.value], [y], xerr=[[s.ratio.value - s.ratio.low],
                                                    [s.ratio.high - s.ratio.value]],
                        fmt="o", color=color, capsize=3)
        ax.axvline(1, color="black", lw=0.8)
        ax.set_yticks(range(len(cells)), cells, fontsize=8)
        ax.set_ylim(-0.5, len(cells) - 0.5)
        ax.set_xscale("log")
        ax.set_title(mixer, fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("restricted mean steps-to-emergence / attention's (log; < 1: sooner)")
    return fig
