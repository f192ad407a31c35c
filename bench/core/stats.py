"""Survival statistics for steps-to-emergence that hold at a handful of seeds.

- Kaplan-Meier (scipy.stats.ecdf on right-censored data). Quantiles follow the R survival
  package (`quantile.survfit`): the first step where S(t) <= 1 - q, the midpoint of a flat that
  sits exactly at 1 - q, and *undefined* where the curve never falls that far. The median's 95%
  interval is read off the log-log pointwise band the same way (Brookmeyer-Crowley, as survfit
  with conf.type = "log-log"); an end whose band never crosses 0.5 at a defined point is
  undefined (NaN), never replaced by the last observed step.
- Log-rank tests as permutation tests of the log-rank scores (w_i = event_i - pooled
  Nelson-Aalen hazard at t_i; the two-sample statistic is the sum of one group's scores): exact
  over every relabelling when there are at most `EXACT_LIMIT`, Monte Carlo otherwise, and the
  asymptotic chi-square only when every group has `ASYMPTOTIC_FROM` seeds or more. The same
  scores weighted by an ordered factor give the trend test for monotone claims.
- Holm's step-down correction for claims that rest on several comparisons.
- Distribution-free summaries of per-seed quantities (lags, ratios): the median with its
  order-statistic interval, and Spearman's rho with its exact permutation p-value.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

EXACT_LIMIT = 200_000  # relabellings enumerated exactly up to this many
MONTE_CARLO = 20_000  # random relabellings beyond it
ASYMPTOTIC_FROM = 20  # seeds per group from which the chi-square approximation is used
TOL = 1e-9


@dataclass
class SurvivalSummary:
    n: int
    events: int
    median: float
    """KM median steps-to-emergence (inf where fewer than half the seeds emerge)"""
    ci_low: float
    ci_high: float
    """95% interval of the median; NaN where undefined"""
    q1: float
    q3: float
    steps: np.ndarray
    """step grid of the curve"""
    emerged: np.ndarray
    """fraction of seeds emerged by each step of `steps` (1 - KM survival)"""
    emerged_low: np.ndarray
    emerged_high: np.ndarray
    """pointwise confidence band of `emerged` (log-log; NaN where undefined)"""


def quantile_time(times: np.ndarray, surv: np.ndarray, level: float, last: float,
                  undefined: float = math.inf) -> float:
    """The first time with S(t) <= level; the midpoint of a flat at exactly `level` (to the next
    drop, or to `last`, the largest observed time); `undefined` where S never falls there. NaN
    points of a band are skipped."""
    ok = ~np.isnan(surv)
    times, surv = times[ok], surv[ok]
    hit = np.nonzero(surv <= level + TOL)[0]
    if not len(hit):
        return undefined
    i = hit[0]
    if abs(surv[i] - level) > TOL:
        return float(times[i])
    lower = np.nonzero(surv < surv[i] - TOL)[0]
    return float((times[i] + (times[lower[0]] if len(lower) else last)) / 2)


def kaplan_meier(times: list[float], emerged: list[bool], confidence: float = 0.95):
    """Summarise steps-to-emergence; `times` are the emergence step or the censoring step."""
    t = np.asarray(times, dtype=float)
    e = np.asarray(emerged, dtype=bool)
    if not e.any():
        inf, zero = math.inf, np.array([0.0])
        return SurvivalSummary(len(t), 0, inf, math.nan, math.nan, inf, inf, zero, zero, zero,
                               zero)
    res = stats.ecdf(stats.CensoredData(uncensored=t[e], right=t[~e]))
    sf = res.sf
    grid, surv = sf.quantiles, sf.probabilities
    with warnings.catch_warnings():  # the band is undefined where S is 0 or 1
        warnings.simplefilter("ignore", RuntimeWarning)
        band = sf.confidence_interval(confidence, method="log-log")
    low, high = band.low.probabilities, band.high.probabilities
    last = float(t.max())
    return SurvivalSummary(
        n=len(t),
        events=int(e.sum()),
        median=quantile_time(grid, surv, 0.5, last),
        ci_low=quantile_time(grid, low, 0.5, last, math.nan),
        ci_high=quantile_time(grid, high, 0.5, last, math.nan),
        q1=quantile_time(grid, surv, 0.75, last),
        q3=quantile_time(grid, surv, 0.25, last),
        steps=np.concatenate([[0.0], grid]),
        emerged=np.concatenate([[0.0], 1.0 - surv]),
        emerged_low=np.concatenate([[0.0], 1.0 - high]),
        emerged_high=np.concatenate([[0.0], 1.0 - low]),
    )


# --- tests -------------------------------------------------------------------------------------
@dataclass
class TestResult:
    p: float
    method: str
    """exact permutation, Monte Carlo permutation, or asymptotic"""
    statistic: float = 0.0
    """the signed score sum: > 0 when the first group (or higher factor values) emerge sooner"""

    __test__ = False  # not a pytest class


def logrank_scores(times: list[float], emerged: list[bool]) -> np.ndarray:
    """Log-rank scores of the pooled sample: w_i = event_i - Nelson-Aalen hazard at t_i (ties
    at t_i included). They sum to 0, and a group's sum is its observed minus expected events."""
    t, e = np.asarray(times, dtype=float), np.asarray(emerged, dtype=bool)
    event_times = np.unique(t[e])
    at_risk = (t[None, :] >= event_times[:, None]).sum(1)
    deaths = (t[e][None, :] == event_times[:, None]).sum(1)
    cumulative = np.cumsum(deaths / at_risk)  # at each event time
    upto = np.searchsorted(event_times, t, side="right")  # event times <= t_i
    return e - np.concatenate([[0.0], cumulative])[upto]


def _permutation(groups: list[np.ndarray], weights: np.ndarray) -> TestResult:
    """Permutation test of |sum_g weight_g * sum(scores of g)| over relabellings."""
    sizes = [len(g) for g in groups]
    n = sum(sizes)
    splits = math.factorial(n)
    for k in sizes:
        splits //= math.factorial(k)

    def statistic(*samples, axis):
        return sum(w * np.sum(s, axis=axis) for w, s in zip(weights, samples))

    observed = float(statistic(*groups, axis=0))
    if not any(np.any(np.abs(g) > TOL) for g in groups):  # nothing emerged: no information
        return TestResult(1.0, "exact permutation", observed)
    exact = splits <= EXACT_LIMIT
    res = stats.permutation_test(
        groups, lambda *s, axis: np.abs(statistic(*s, axis=axis)), vectorized=True,
        permutation_type="independent", alternative="greater",
        n_resamples=np.inf if exact else MONTE_CARLO, rng=np.random.default_rng(0))
    method = "exact permutation" if exact else f"Monte Carlo permutation ({MONTE_CARLO:,})"
    return TestResult(float(min(res.pvalue, 1.0)), method, observed)


@functools.lru_cache(maxsize=64)
def _relabellings(n_a: int, n_b: int) -> tuple[np.ndarray, str]:
    """(R, n) 0/1 rows, each a choice of the first group among n = n_a + n_b: all of them when
    there are at most EXACT_LIMIT, else MONTE_CARLO random ones (fixed seed) after the identity."""
    n = n_a + n_b
    if math.comb(n, n_a) <= EXACT_LIMIT:
        rows = np.zeros((math.comb(n, n_a), n), dtype=np.float64)
        for r, chosen in enumerate(itertools.combinations(range(n), n_a)):
            rows[r, list(chosen)] = 1.0
        return rows, "exact permutation"
    rng = np.random.default_rng(0)
    keys = rng.random((MONTE_CARLO, n)).argsort(1) < n_a
    identity = np.arange(n)[None, :] < n_a
    return (np.concatenate([identity, keys]).astype(np.float64),
            f"Monte Carlo permutation ({MONTE_CARLO:,})")


def _two_sample(w: np.ndarray, n_a: int) -> TestResult:
    """Permutation p of |sum of the first group's scores| over relabellings (a vectorised
    matrix product: fast enough to run inside power simulations)."""
    observed = float(w[:n_a].sum())
    if not np.any(np.abs(w) > TOL):
        return TestResult(1.0, "exact permutation", observed)
    rows, method = _relabellings(n_a, len(w) - n_a)
    sums = np.abs(rows @ w)
    p = float(np.mean(sums >= abs(observed) - TOL * max(1.0, abs(observed))))
    return TestResult(min(p, 1.0), method, observed)


def logrank_test(times_a: list[float], emerged_a: list[bool], times_b: list[float],
                 emerged_b: list[bool]) -> TestResult:
    """Two-sided log-rank test that two steps-to-emergence samples (censored at their budget)
    come from one distribution: a permutation test while a group has fewer than
    ASYMPTOTIC_FROM seeds. The statistic is > 0 when the first sample emerges sooner."""
    if min(len(times_a), len(times_b)) >= ASYMPTOTIC_FROM:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = stats.logrank(_censored(times_a, emerged_a), _censored(times_b, emerged_b))
        p = 1.0 if math.isnan(res.pvalue) else float(res.pvalue)
        w = logrank_scores([*times_a, *times_b], [*emerged_a, *emerged_b])
        return TestResult(p, "asymptotic", float(w[: len(times_a)].sum()))
    w = logrank_scores([*times_a, *times_b], [*emerged_a, *emerged_b])
    return _two_sample(w, len(times_a))


def logrank_p(times_a: list[float], emerged_a: list[bool], times_b: list[float],
              emerged_b: list[bool]) -> float:
    """The p-value of `logrank_test`."""
    return logrank_test(times_a, emerged_a, times_b, emerged_b).p


def trend_test(samples: list[tuple[list[float], list[bool]]], scores: list[float]) -> TestResult:
    """Log-rank test for trend across ordered groups (each a (times, emerged) sample, with a
    factor value in `scores`): permutation of the score-weighted sum of log-rank scores. The
    statistic is > 0 when higher factor values emerge sooner."""
    times = [t for ts, _ in samples for t in ts]
    emerged = [e for _, es in samples for e in es]
    w = logrank_scores(times, emerged)
    bounds = np.cumsum([0, *(len(ts) for ts, _ in samples)])
    groups = [w[a:b] for a, b in zip(bounds, bounds[1:])]
    centred = np.asarray(scores, dtype=float) - np.mean(scores)
    return _permutation(groups, centred)


def _censored(times: list[float], emerged: list[bool]) -> stats.CensoredData:
    t, e = np.asarray(times, dtype=float), np.asarray(emerged, dtype=bool)
    return stats.CensoredData(uncensored=t[e], right=t[~e])


def solve_rate_p(emerged_a: int, n_a: int, emerged_b: int, n_b: int) -> float:
    """Two-sided Fisher exact p-value that two solve rates are equal."""
    return float(stats.fisher_exact([[emerged_a, n_a - emerged_a],
                                     [emerged_b, n_b - emerged_b]]).pvalue)


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error over one claim's comparisons)."""
    order = np.argsort(pvalues, kind="stable")
    adjusted, running, m = [0.0] * len(pvalues), 0.0, len(pvalues)
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


# --- power ---------------------------------------------------------------------------------------
RATIOS = (1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
SEED_COUNTS = (4, 8, 12, 16, 24, 32, 48)


def detection_power(times: list[float], emerged: list[bool], budget: float, ratio: float,
                    n_new: int, alpha: float = 0.05, n_sims: int = 200,
                    n_ref: int | None = None, seed: int = 0) -> float:
    """Share of simulated reruns whose log-rank test against a reference sample says *differs*
    at `alpha`, when the truth is a `ratio`-fold slowdown. Both samples are bootstrapped from
    the observed one (`n_ref` seeds for the reference, default as observed; `n_new` for the
    rerun, whose emergence steps are multiplied by `ratio` and censored at `budget`)."""
    rng = np.random.default_rng(seed)
    t, e = np.asarray(times, dtype=float), np.asarray(emerged, dtype=bool)
    n_ref = n_ref or len(t)
    hits = 0
    for _ in range(n_sims):
        ref = rng.integers(len(t), size=n_ref)
        new = rng.integers(len(t), size=n_new)
        slow = np.where(e[new], t[new] * ratio, budget)
        slow_e = e[new] & (slow < budget)
        slow = np.minimum(slow, budget)
        hits += logrank_test(t[ref], e[ref], slow, slow_e).p < alpha
    return hits / n_sims


def smallest_detectable(times: list[float], emerged: list[bool], budget: float, n_new: int,
                        alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest slowdown of RATIOS detected with `power` at these seed counts (inf: none)."""
    if not any(emerged):
        return math.inf  # nothing emerged: a slowdown cannot show
    for ratio in RATIOS:
        if detection_power(times, emerged, budget, ratio, n_new, alpha) >= power:
            return ratio
    return math.inf


def recommended_seeds(times: list[float], emerged: list[bool], budget: float,
                      ratio: float = 1.5, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """Seeds per side (reference and rerun alike) that detect a `ratio`-fold slowdown with
    `power`, from SEED_COUNTS (None: more than the largest)."""
    if not any(emerged):
        return None
    for n in SEED_COUNTS:
        if detection_power(times, emerged, budget, ratio, n, alpha, n_sims=100, n_ref=n) >= power:
            return n
    return None


def finite_median(values: list[float | None]) -> float:
    """The median of the finite values (NaN when there are none)."""
    import statistics

    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def median_interval(values: list[float]) -> tuple[float, float, float]:
    """(median, low, high): the order-statistic interval for the median with >= 95% coverage
    (the whole range where the sample is too small for that)."""
    x = sorted(values)
    n = len(x)
    k = 0
    while k + 1 <= n // 2 and stats.binom.cdf(k, n, 0.5) <= 0.025:
        k += 1
    med = (x[(n - 1) // 2] + x[n // 2]) / 2
    return med, x[max(k - 1, 0)], x[n - max(k, 1)]


def spearman(a: list[float], b: list[float]) -> tuple[float, float]:
    """Spearman's rho and its two-sided exact permutation p-value (Monte Carlo past 9 seeds).

    Permuting the pairing permutes a's ranks, so the null statistic is the correlation of
    permuted ranks with b's ranks, computed for every permutation at once: the ranks' centred
    values are multiples of 1/2, so equal pairings give bit-equal statistics and ties are exact."""
    if len(a) < 3 or len(set(a)) < 2 or len(set(b)) < 2:
        return math.nan, math.nan
    ra, rb = stats.rankdata(a), stats.rankdata(b)
    rb = rb - rb.mean()

    def rho(x, axis=-1):
        x = np.moveaxis(x, axis, -1)
        x = x - x.mean(axis=-1, keepdims=True)
        return x @ rb / np.sqrt((x * x).sum(axis=-1) * (rb @ rb))

    res = stats.permutation_test((ra,), rho, permutation_type="pairings", vectorized=True,
                                 n_resamples=9999 if len(a) > 9 else math.inf, random_state=0)
    return float(stats.spearmanr(a, b).statistic), float(res.pvalue)


SLOPE_RESAMPLES = 2000


def km_median(t: np.ndarray, e: np.ndarray) -> float:
    """The Kaplan-Meier median alone (as `kaplan_meier(...).median`, without its band): the
    product-limit curve over the distinct event times, read by `quantile_time`."""
    if not e.any():
        return math.inf
    grid = np.unique(t[e])
    at_risk = (t[None, :] >= grid[:, None]).sum(1)
    events = ((t[None, :] == grid[:, None]) & e[None, :]).sum(1)
    return quantile_time(grid, np.cumprod(1 - events / at_risk), 0.5, float(t.max()))


@dataclass
class Slope:
    slope: float
    low: float
    high: float
    cells: int  # cells whose KM median is defined (the fit's points)
    of: int  # cells offered


def loglog_slope(cells: list[tuple[float, list[float], list[bool]]],
                 resamples: int = SLOPE_RESAMPLES, seed: int = 0) -> Slope:
    """The least-squares slope b of log(KM median steps) on log(x) over the cells (x, times,
    emerged) whose median is defined (steps grow as x^b), with a percentile bootstrap interval
    (95%) over seeds: each resample draws every cell's seeds with replacement, and a cell whose
    resampled median is undefined drops out of that fit (a fit needs two distinct x). NaN where
    fewer than two cells have a median."""
    def fit(points: list[tuple[float, float]]) -> float:
        xs = np.log([x for x, _ in points])
        if len(points) < 2 or np.ptp(xs) == 0:
            return math.nan
        return float(np.polyfit(xs, np.log([m for _, m in points]), 1)[0])

    def medians(samples) -> list[tuple[float, float]]:
        out = []
        for x, times, emerged in samples:
            m = km_median(np.asarray(times, float), np.asarray(emerged, bool))
            if math.isfinite(m) and m > 0:
                out.append((x, m))
        return out

    points = medians(cells)
    slope = fit(points)
    if math.isnan(slope):
        return Slope(math.nan, math.nan, math.nan, len(points), len(cells))
    rng = np.random.default_rng(seed)
    arrays = [(x, np.asarray(t, float), np.asarray(e, bool)) for x, t, e in cells]
    draws = []
    for _ in range(resamples):
        sample = []
        for x, t, e in arrays:
            pick = rng.integers(0, len(t), len(t))
            sample.append((x, t[pick], e[pick]))
        b = fit(medians(sample))
        if math.isfinite(b):
            draws.append(b)
    low, high = np.percentile(draws, [2.5, 97.5]) if draws else (math.nan, math.nan)
    return Slope(slope, float(low), float(high), len(points), len(cells))


# --- restricted mean steps-to-emergence (a suite's scorecard) ---------------------------------
RMST_RESAMPLES = 2000


def rmst(times: list[float] | np.ndarray, emerged: list[bool] | np.ndarray, tau: float) -> float:
    """Restricted mean steps-to-emergence up to `tau` (the budget): the area under the
    Kaplan-Meier curve of "not emerged yet" from 0 to tau, i.e. E[min(T, tau)]; defined however
    many seeds never emerge (each counts up to tau), unlike the median. Without censoring
    before tau it is the plain mean of min(t, tau)."""
    t, e = np.asarray(times, dtype=float), np.asarray(emerged, dtype=bool)
    if not len(t):
        return math.nan
    grid = np.unique(t[e & (t <= tau)])
    at_risk = (t[None, :] >= grid[:, None]).sum(1)
    events = ((t[None, :] == grid[:, None]) & e[None, :]).sum(1)
    surv = np.cumprod(1 - events / at_risk)  # S just after each event time
    edges = np.concatenate([[0.0], grid, [tau]])
    heights = np.concatenate([[1.0], surv])
    return float(np.sum(heights * np.diff(edges)))


def _boot_rmst(t: np.ndarray, e: np.ndarray, tau: float, rng: np.random.Generator,
               n: int) -> np.ndarray:
    """RMST of `n` bootstrap resamples of the seeds (rows drawn with replacement)."""
    picks = rng.integers(len(t), size=(n, len(t)))
    return np.array([rmst(t[p], e[p], tau) for p in picks])


@dataclass
class Ratio:
    value: float
    low: float
    high: float
    """95% percentile bootstrap interval over seeds (each arm resampled on its own)"""


def rmst_ratio(times_a, emerged_a, times_b, emerged_b, tau: float,
               n_resamples: int = RMST_RESAMPLES, seed: int = 0) -> Ratio:
    """RMST(a) / RMST(b) up to `tau` with its bootstrap interval: above 1, a emerges later."""
    rng = np.random.default_rng(seed)
    ta, ea = np.asarray(times_a, dtype=float), np.asarray(emerged_a, dtype=bool)
    tb, eb = np.asarray(times_b, dtype=float), np.asarray(emerged_b, dtype=bool)
    boot = _boot_rmst(ta, ea, tau, rng, n_resamples) / _boot_rmst(tb, eb, tau, rng, n_resamples)
    low, high = np.percentile(boot, [2.5, 97.5])
    return Ratio(rmst(ta, ea, tau) / rmst(tb, eb, tau), float(low), float(high))


def geometric_mean_ratio(cells: list[tuple[tuple, tuple, float]],
                         n_resamples: int = RMST_RESAMPLES, seed: int = 0) -> Ratio:
    """The geometric mean over cells of RMST(a) / RMST(b), each cell given as ((times_a,
    emerged_a), (times_b, emerged_b), tau), with a percentile bootstrap interval that resamples
    the seeds of every arm of every cell at once."""
    rng = np.random.default_rng(seed)
    logs, boots = [], []
    for (ta, ea), (tb, eb), tau in cells:
        ta, ea = np.asarray(ta, dtype=float), np.asarray(ea, dtype=bool)
        tb, eb = np.asarray(tb, dtype=float), np.asarray(eb, dtype=bool)
        logs.append(math.log(rmst(ta, ea, tau) / rmst(tb, eb, tau)))
        boots.append(np.log(_boot_rmst(ta, ea, tau, rng, n_resamples)
                            / _boot_rmst(tb, eb, tau, rng, n_resamples)))
    mean = np.mean(boots, axis=0)
    low, high = np.exp(np.percentile(mean, [2.5, 97.5]))
    return Ratio(math.exp(sum(logs) / len(logs)), float(low), float(high))
