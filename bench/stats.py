"""Survival statistics for steps-to-emergence: censored seeds are kept, not dropped.

Kaplan-Meier via scipy.stats.ecdf on right-censored data; the median's 95% confidence interval is
read off the log-log pointwise band of the survival function (Brookmeyer-Crowley style).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass
class SurvivalSummary:
    n: int
    events: int
    median: float
    """KM median steps-to-emergence (inf where fewer than half the seeds emerge)"""
    ci_low: float
    ci_high: float
    q1: float
    q3: float
    steps: np.ndarray
    """step grid of the curve"""
    emerged: np.ndarray
    """fraction of seeds emerged by each step of `steps` (1 - KM survival)"""
    emerged_low: np.ndarray
    emerged_high: np.ndarray
    """pointwise confidence band of `emerged` (log-log)"""


def _first_below(times: np.ndarray, surv: np.ndarray, level: float) -> float:
    """Smallest time t with S(t) <= level, or inf."""
    hit = np.nonzero(surv <= level + 1e-12)[0]
    return float(times[hit[0]]) if len(hit) else math.inf


def kaplan_meier(times: list[float], emerged: list[bool], confidence: float = 0.95):
    """Summarise steps-to-emergence; `times` are the emergence step or the censoring step."""
    t = np.asarray(times, dtype=float)
    e = np.asarray(emerged, dtype=bool)
    if not e.any():
        inf = math.inf
        zero = np.array([0.0])
        return SurvivalSummary(len(t), 0, inf, inf, inf, inf, inf, zero, zero, zero, zero)
    res = stats.ecdf(stats.CensoredData(uncensored=t[e], right=t[~e]))
    sf = res.sf
    grid, surv = sf.quantiles, sf.probabilities
    with warnings.catch_warnings():  # the band is undefined where S is 0 or 1: use S there
        warnings.simplefilter("ignore", RuntimeWarning)
        band = sf.confidence_interval(confidence, method="log-log")
    low = np.where(np.isnan(band.low.probabilities), surv, band.low.probabilities)
    high = np.where(np.isnan(band.high.probabilities), surv, band.high.probabilities)
    return SurvivalSummary(
        n=len(t),
        events=int(e.sum()),
        median=_first_below(grid, surv, 0.5),
        ci_low=_first_below(grid, low, 0.5),
        ci_high=_first_below(grid, high, 0.5),
        q1=_first_below(grid, surv, 0.75),
        q3=_first_below(grid, surv, 0.25),
        steps=np.concatenate([[0.0], grid]),
        emerged=np.concatenate([[0.0], 1.0 - surv]),
        emerged_low=np.concatenate([[0.0], 1.0 - high]),
        emerged_high=np.concatenate([[0.0], 1.0 - low]),
    )


def _censored(times: list[float], emerged: list[bool]) -> stats.CensoredData:
    t, e = np.asarray(times, dtype=float), np.asarray(emerged, dtype=bool)
    return stats.CensoredData(uncensored=t[e], right=t[~e])


def logrank_p(times_a: list[float], emerged_a: list[bool], times_b: list[float],
              emerged_b: list[bool]) -> float:
    """Two-sided log-rank p-value that two steps-to-emergence samples (censored at their budget)
    come from one distribution; 1 where the test has no variance (e.g. no seed emerged)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        p = stats.logrank(_censored(times_a, emerged_a), _censored(times_b, emerged_b)).pvalue
    return 1.0 if math.isnan(p) else float(p)


def solve_rate_p(emerged_a: int, n_a: int, emerged_b: int, n_b: int) -> float:
    """Two-sided Fisher exact p-value that two solve rates are equal."""
    return float(stats.fisher_exact([[emerged_a, n_a - emerged_a],
                                     [emerged_b, n_b - emerged_b]]).pvalue)


def adjust(pvalues: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (a table of many rows tests many hypotheses)."""
    if not pvalues:
        return []
    return [float(p) for p in stats.false_discovery_control(np.asarray(pvalues), method="bh")]
