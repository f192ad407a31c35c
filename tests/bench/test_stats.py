import math

from bench.stats import kaplan_meier


def test_all_emerged_matches_the_empirical_quantiles():
    km = kaplan_meier([100, 200, 300, 400, 500, 600, 700, 800], [True] * 8)
    assert (km.median, km.q1, km.q3) == (400, 200, 600)
    assert km.ci_low <= km.median <= km.ci_high
    assert km.emerged[-1] == 1.0


def test_censored_seeds_are_kept_not_dropped():
    # dropping the 3 censored seeds would give median 200; keeping them, S(t) = 1 - k/6
    km = kaplan_meier([100, 200, 300, 1000, 1000, 1000], [True, True, True, False, False, False])
    assert km.events == 3 and km.median == 300
    assert math.isinf(km.q3) and math.isinf(km.ci_high)
    emerged_by = dict(zip(km.steps.tolist(), km.emerged.tolist()))
    assert abs(emerged_by[300] - 0.5) < 1e-9 and abs(emerged_by[1000] - 0.5) < 1e-9


def test_less_than_half_emerged_has_no_median():
    km = kaplan_meier([100, 1000, 1000, 1000], [True, False, False, False])
    assert math.isinf(km.median) and km.q1 == 100  # S(100) = 0.75
    assert kaplan_meier([1000, 1000], [False, False]).events == 0
