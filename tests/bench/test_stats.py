import math

from bench.stats import adjust, kaplan_meier, logrank_p, solve_rate_p


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


def test_logrank_separates_early_emergence_from_never_and_not_itself():
    early = ([100, 200, 300, 400], [True] * 4)
    never = ([1500] * 4, [False] * 4)
    assert logrank_p(*early, *early) == 1.0
    assert logrank_p(*early, *never) < 0.01
    assert logrank_p(*never, *never) == 1.0  # no events: no evidence of a difference


def test_solve_rate_test_and_the_adjustment():
    assert solve_rate_p(4, 4, 0, 4) < 0.05 and solve_rate_p(2, 4, 2, 4) == 1.0
    assert adjust([0.01, 0.5, 1.0]) == [0.03, 0.75, 1.0]


def test_the_confidence_band_brackets_the_curve():
    km = kaplan_meier([100, 200, 300, 1000, 1000], [True, True, True, False, False])
    assert (km.emerged_low <= km.emerged + 1e-12).all()
    assert (km.emerged <= km.emerged_high + 1e-12).all()
    assert km.emerged_high[-1] > km.emerged[-1] > km.emerged_low[-1]
