"""Survival statistics at small n: R's quantile convention, undefined interval ends, exact
permutation log-rank and trend tests, Holm, the median interval and Spearman."""

import itertools
import math

import numpy as np
import pytest

from bench.core.stats import (
    holm,
    kaplan_meier,
    logrank_p,
    logrank_scores,
    logrank_test,
    median_interval,
    solve_rate_p,
    spearman,
    trend_test,
)


def test_all_emerged_follows_the_midpoint_rule_of_r_survival():
    # S = 0.5 exactly on [400, 500): the median is the midpoint, as for an uncensored sample
    km = kaplan_meier([100, 200, 300, 400, 500, 600, 700, 800], [True] * 8)
    assert (km.median, km.q1, km.q3) == (450, 250, 650)
    assert km.emerged[-1] == 1.0


def test_an_undefined_interval_end_stays_undefined():
    """All four seeds emerge; the log-log band's upper curve never falls to 0.5 at a defined
    point, so the upper end is NA, not the last step (which gave zero-width intervals)."""
    km = kaplan_meier([100, 150, 150, 200], [True] * 4)
    assert km.median == 150 and km.ci_low == 100 and math.isnan(km.ci_high)


def test_censored_seeds_are_kept_not_dropped():
    # dropping the 3 censored seeds would give median 200; keeping them, S(t) = 1 - k/6, and
    # S sits at 0.5 from 300 to the last (censored) step 1000: R's midpoint is 650
    km = kaplan_meier([100, 200, 300, 1000, 1000, 1000], [True, True, True, False, False, False])
    assert km.events == 3 and km.median == 650
    assert math.isinf(km.q3) and math.isnan(km.ci_high)
    emerged_by = dict(zip(km.steps.tolist(), km.emerged.tolist()))
    assert abs(emerged_by[300] - 0.5) < 1e-9 and abs(emerged_by[1000] - 0.5) < 1e-9


def test_less_than_half_emerged_has_no_median():
    km = kaplan_meier([100, 1000, 1000, 1000], [True, False, False, False])
    # S(100) = 0.75 exactly and flat to the last (censored) step: R's midpoint, 550
    assert math.isinf(km.median) and km.q1 == 550
    assert kaplan_meier([1000, 1000], [False, False]).events == 0


def test_logrank_scores_sum_to_zero_and_give_observed_minus_expected():
    times, events = [100, 200, 200, 300, 500, 500], [1, 1, 0, 1, 0, 1]
    w = logrank_scores(times, events)
    assert abs(w.sum()) < 1e-12
    # group a = first three: O - E by the textbook sum over event times
    group = np.array([1, 1, 1, 0, 0, 0], bool)
    t, e = np.array(times), np.array(events, bool)
    o_minus_e = 0.0
    for s in np.unique(t[e]):
        risk = t >= s
        d = ((t == s) & e).sum()
        o_minus_e += ((t == s) & e & group).sum() - d * (risk & group).sum() / risk.sum()
    assert w[group].sum() == pytest.approx(o_minus_e)


def brute_force_p(a, b):
    """Two-sided permutation p of |sum of group scores| over every relabelling."""
    times = [t for t, _ in a + b]
    events = [e for _, e in a + b]
    w = logrank_scores(times, events)
    observed = abs(w[: len(a)].sum())
    sums = [abs(w[list(idx)].sum()) for idx in itertools.combinations(range(len(w)), len(a))]
    return sum(s >= observed - 1e-9 for s in sums) / len(sums)


def test_the_permutation_log_rank_is_exact_at_small_n():
    early = ([100, 200, 300, 400], [True] * 4)
    never = ([1500] * 4, [False] * 4)
    # fully separated 4 vs 4: 2 of the 70 relabellings are as extreme, whatever chi-square says
    assert logrank_p(*early, *never) == pytest.approx(2 / 70)
    assert logrank_test(*early, *never).method == "exact permutation"
    assert logrank_p(*early, *early) == 1.0
    assert logrank_p(*never, *never) == 1.0  # no events: no evidence of a difference
    # 3 vs 3 can never go below 2/20
    assert logrank_p([1, 2, 3], [True] * 3, [7, 8, 9], [True] * 3) == pytest.approx(0.1)
    a = [(120, 1), (300, 1), (500, 0), (500, 0), (90, 1)]
    b = [(400, 1), (450, 1), (500, 0), (200, 1), (500, 0)]
    got = logrank_p(*zip(*a), *zip(*b))
    assert got == pytest.approx(brute_force_p(a, b))


def test_large_groups_use_monte_carlo_then_the_asymptotic_test():
    rng = np.random.default_rng(0)
    a, b = rng.uniform(50, 150, 14), rng.uniform(300, 500, 14)
    res = logrank_test(a, [True] * 14, b, [True] * 14)
    assert res.method.startswith("Monte Carlo") and res.p < 0.05 and res.statistic > 0
    a, b = rng.exponential(100, 25), rng.exponential(300, 25)
    assert logrank_test(a, [True] * 25, b, [True] * 25).method == "asymptotic"


def test_the_trend_test_sees_a_monotone_order_and_its_direction():
    faster = [([500, 600], [1, 1]), ([300, 350], [1, 1]), ([100, 120], [1, 1])]
    res = trend_test(faster, [1, 2, 4])
    assert res.p < 0.05 and res.statistic > 0  # higher factor, sooner
    assert trend_test(faster[::-1], [1, 2, 4]).statistic < 0
    flat = [([100, 600], [1, 1]), ([120, 580], [1, 1]), ([110, 590], [1, 1])]
    assert trend_test(flat, [1, 2, 4]).p > 0.5


def test_solve_rate_test_and_holm():
    assert solve_rate_p(4, 4, 0, 4) < 0.05 and solve_rate_p(2, 4, 2, 4) == 1.0
    assert holm([0.01, 0.5, 1.0]) == [0.03, 1.0, 1.0]
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])


def test_the_confidence_band_brackets_the_curve():
    km = kaplan_meier([100, 200, 300, 1000, 1000], [True, True, True, False, False])
    ok = ~np.isnan(km.emerged_low)
    assert (km.emerged_low[ok] <= km.emerged[ok] + 1e-12).all()
    assert (km.emerged[ok] <= km.emerged_high[ok] + 1e-12).all()
    assert km.emerged_high[-1] > km.emerged[-1] > km.emerged_low[-1]


def test_the_median_interval_has_at_least_95_percent_coverage():
    assert median_interval([3, 1, 2]) == (2, 1, 3)  # too few: the range
    med, low, high = median_interval(list(range(1, 21)))
    assert med == 10.5 and (low, high) == (6, 15)  # P(Binom(20, .5) <= 5) = 0.021


def test_spearman_exact_p():
    rho, p = spearman([1, 2, 3, 4, 5], [10, 20, 30, 40, 50])
    assert rho == pytest.approx(1.0) and p == pytest.approx(2 / 120)  # 2 of 5! orderings
    assert all(math.isnan(x) for x in spearman([1, 2], [3, 4]))


@pytest.mark.parametrize("n", [6, 11])  # exact, then Monte Carlo
def test_spearman_p_is_scipys_permutation_test_with_ties(n):
    """The vectorised null (permuted ranks) gives scipy's p-value for spearmanr itself, ties
    included: an off-by-one tie comparison would move the exact p by a multiple of 1/n!."""
    from scipy.stats import permutation_test, spearmanr

    a = [1, 2, 2, 3, 5, 5, 8, 9, 9, 10, 12][:n]
    b = [0.3, 0.1, 0.9, 0.9, 0.4, 0.7, 0.8, 0.2, 0.6, 0.6, 1.0][:n]
    expected = permutation_test((a,), lambda x: spearmanr(x, b).statistic,
                                permutation_type="pairings", random_state=0,
                                n_resamples=9999 if n > 9 else math.inf).pvalue
    assert spearman(a, b) == (spearmanr(a, b).statistic, expected)


def test_the_km_median_alone_is_the_full_summary_s_median():
    from bench.core.stats import km_median

    rng = np.random.default_rng(4)
    for _ in range(200):
        n = int(rng.integers(1, 12))
        t, e = rng.integers(1, 20, n) * 50.0, rng.random(n) < 0.7
        assert km_median(t, e) == kaplan_meier(list(t), list(e)).median


def test_the_power_law_slope_is_recovered_with_its_interval():
    from bench.core.stats import loglog_slope

    rng = np.random.default_rng(0)
    cells = [(c, list(30 * c ** 1.5 * rng.lognormal(0, 0.2, 8)), [True] * 8)
             for c in (8, 16, 28, 66, 120)]
    hopeless = (276, [24000.0] * 8, [False] * 8)  # no median: left out, counted
    fit = loglog_slope([*cells, hopeless], resamples=400)
    assert (fit.cells, fit.of) == (5, 6)
    assert abs(fit.slope - 1.5) < 0.1 and fit.low < fit.slope < fit.high
    assert fit.low > 1.3 and fit.high < 1.7
    flat = loglog_slope([(c, [500.0] * 4, [True] * 4) for c in (8, 16, 32)], resamples=50)
    assert fit.slope > 1 and abs(flat.slope) < 1e-9  # difficulty that does not grow: slope 0
    lone = loglog_slope([cells[0], hopeless])
    assert math.isnan(lone.slope) and lone.cells == 1


def test_rmst_is_the_mean_of_min_t_tau_when_nothing_is_censored_before_tau():
    from bench.core.stats import rmst

    rng = np.random.default_rng(0)
    t = rng.exponential(300, size=25).round() + 1
    tau = 400.0
    emerged = t < tau  # the budget censors at tau, as a run does
    capped = np.minimum(t, tau)
    assert rmst(capped, emerged, tau) == pytest.approx(capped.mean())
    # by hand, a seed censored at 500 < tau = 1000: KM keeps S = 1/3 from 200 to tau
    assert rmst([100, 200, 500], [True, True, False], 1000) == pytest.approx(
        100 + 100 * 2 / 3 + 800 / 3)
    assert rmst([1000, 1000], [False, False], 1000) == 1000  # nothing emerged: the budget


def test_a_planted_slowdown_shows_in_the_rmst_ratio_and_its_interval():
    from bench.core.stats import geometric_mean_ratio, rmst_ratio

    rng = np.random.default_rng(1)
    fast = rng.lognormal(np.log(200), 0.3, size=8).round()
    slow = 3 * fast  # the same seeds, three times later
    ratio = rmst_ratio(slow, [True] * 8, fast, [True] * 8, 10_000)
    assert ratio.value == pytest.approx(3.0) and 1 < ratio.low < 3 < ratio.high
    same = rmst_ratio(fast, [True] * 8, fast, [True] * 8, 10_000)
    assert same.value == 1 and same.low < 1 < same.high
    # the geometric mean over a 3x cell and a 1/3x cell is 1
    cells = [((slow, [True] * 8), (fast, [True] * 8), 10_000),
             ((fast, [True] * 8), (slow, [True] * 8), 10_000)]
    assert geometric_mean_ratio(cells).value == pytest.approx(1.0)
