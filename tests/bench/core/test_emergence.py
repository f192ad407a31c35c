"""The emergence tracker on constructed metric curves."""

import math

import pytest

from bench.core.emergence import EmergenceCriterion, EmergenceTracker, check_threshold


def track(values, criterion=None, every=100, baseline=0.5, solved=1.0):
    tracker = EmergenceTracker(criterion or EmergenceCriterion(threshold=0.99, consecutive=2),
                               baseline=baseline, solved=solved)
    for i, v in enumerate(values, start=1):
        tracker.update(i * every, v, wall_time_s=float(i))
    tracker.finish(len(values) * every)
    return tracker


def test_clean_crossing_records_the_first_step_of_the_confirmed_streak():
    t = track([0.5, 0.5, 0.52, 0.7, 0.95, 0.995, 1.0, 1.0])
    assert t.status == "emerged" and t.step == 600 and t.wall_time_s == 6.0


def test_plateau_without_crossing_is_censored_at_the_budget():
    t = track([0.5] * 10 + [0.9] * 5)
    assert t.status == "censored" and t.step == 1500 and t.transition_width() is None


def test_non_finite_value_is_diverged_and_final():
    t = track([0.5, 0.6, math.nan, 1.0, 1.0])
    assert t.status == "diverged" and t.step == 300


def test_a_crossing_that_falls_back_does_not_count():
    t = track([0.5, 0.995, 0.6, 0.5, 0.992, 0.999, 1.0])
    assert t.status == "emerged" and t.step == 500


def test_single_evaluation_at_threshold_is_not_enough():
    t = track([0.5, 0.5, 0.995], EmergenceCriterion(threshold=0.99, consecutive=2))
    assert t.status == "censored"
    t = track([0.5, 0.5, 0.995], EmergenceCriterion(threshold=0.99, consecutive=1))
    assert t.status == "emerged" and t.step == 300


def test_loss_criterion_crosses_downwards():
    crit = EmergenceCriterion(metric="val/loss", threshold=0.05, consecutive=2)
    t = track([0.69, 0.69, 0.3, 0.04, 0.01, 0.005], crit, baseline=math.log(2), solved=0.0)
    assert t.status == "emerged" and t.step == 400


def test_transition_width_spans_plateau_end_to_final_rise():
    # progress: 0, 0, 0.04 (last <=10%), 0.4, 0.8, 0.96 (first of the final rise >=90%), 1, 1
    t = track([0.5, 0.5, 0.52, 0.7, 0.9, 0.98, 0.995, 1.0])
    assert t.status == "emerged"
    assert t.transition_width() == 600 - 300


def test_transition_width_ignores_an_earlier_spike():
    t = track([0.5, 0.99, 0.5, 0.5, 0.8, 0.999, 1.0])
    assert t.transition_width() == 600 - 400


def test_no_width_without_an_observed_plateau():
    """Step 0 sits at the baseline, but if the next evaluation has already left it the plateau
    was not observed: no width, and the reason is recorded."""
    t = EmergenceTracker(EmergenceCriterion(threshold=0.99), baseline=0.5, solved=1.0)
    for step, v in [(0, 0.5), (100, 0.8), (200, 0.995), (300, 1.0)]:
        t.update(step, v)
    assert t.status == "emerged" and t.transition_width() is None
    assert t.transition() == (None, 200, "no evaluation after step 0 sat on the plateau "
                                         "(<= 10% up)")
    t = EmergenceTracker(EmergenceCriterion(threshold=0.99), baseline=0.5, solved=1.0)
    for step, v in [(0, 0.5), (100, 0.52), (200, 0.8), (300, 0.995), (400, 1.0)]:
        t.update(step, v)
    assert t.transition() == (100, 300, "") and t.transition_width() == 200


def test_progress_runs_from_the_no_context_baseline_not_uniform_chance():
    # a task whose no-context predictor already scores 0.6: 0.62 is still on the plateau
    t = track([0.6, 0.62, 0.8, 0.97, 0.995, 1.0], baseline=0.6)
    assert t.transition_width() == 400 - 200


REFS = {"no_context": {"token_acc": 0.6, "loss": 0.65, "exact_acc": 0.1},
        "ceiling": {"token_acc": 0.967, "loss": 0.06, "exact_acc": 0.967}}


@pytest.mark.parametrize("metric,threshold,match", [
    ("val/token_acc", 0.99, "beyond this task's Bayes ceiling"),
    ("val/token_acc", 0.967, "beyond this task's Bayes ceiling"),
    ("val/token_acc", 0.55, "met without reading the context"),
    ("val/loss", 0.05, "beyond this task's Bayes ceiling"),
    ("val/loss", 0.7, "met without reading the context"),
    ("val/exact_acc", 0.99, "beyond"),
])
def test_a_threshold_outside_baseline_and_ceiling_is_refused(metric, threshold, match):
    with pytest.raises(ValueError, match=f"threshold: .*{match}.*allowed: between"):
        check_threshold(EmergenceCriterion(metric=metric, threshold=threshold), REFS)


def test_a_threshold_between_baseline_and_ceiling_passes_and_perfect_is_allowed():
    check_threshold(EmergenceCriterion(threshold=0.95), REFS)
    perfect = {"no_context": REFS["no_context"],
               "ceiling": {"token_acc": 1.0, "loss": 0.0, "exact_acc": 1.0}}
    check_threshold(EmergenceCriterion(threshold=1.0), perfect)


@pytest.mark.parametrize("bad", [dict(consecutive=0), dict(threshold=1.5),
                                 dict(metric="val/loss", threshold=-1.0)])
def test_criterion_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        EmergenceCriterion(**bad)


def test_a_run_that_emerged_short_of_90_percent_has_a_plateau_end_but_no_width():
    """Threshold 0.9 on a 0.5-baseline task is 80% progress: the run stops before 90%, yet its
    plateau (where attention patching takes its pre-emergence checkpoint) was observed."""
    t = EmergenceTracker(EmergenceCriterion(threshold=0.9), baseline=0.5, solved=1.0)
    for step, v in [(0, 0.5), (50, 0.51), (100, 0.54), (150, 0.7), (200, 0.91), (250, 0.92)]:
        t.update(step, v)
    assert t.status == "emerged" and t.step == 200
    assert t.transition() == (100, None, "the criterion was met short of 90% of the way up")
    assert t.transition_width() is None
