"""The mechanism section: alignment rise on constructed curves, its statistics, and a tiny board
whose runs record influence maps and patching summaries."""

import math

import pytest
import yaml

from bench.analysis.mechanism import _at_emergence, even_mass, rise_step, row_mechanism
from bench.api import sweep
from bench.sweeps.results import read_results
from tests.bench.conftest import TINY
from tests.records import records


def test_the_rise_is_the_first_evaluation_half_way_up():
    curves = {"step": [0, 50, 100, 150, 200], "m": [0.1, 0.12, 0.3, 0.5, 0.48]}
    assert rise_step(curves, "m") == 100  # half way from 0.1 to 0.5 is 0.3
    assert rise_step({"step": [0, 50], "m": [0.1, 0.11]}, "m") is None  # no rise of 0.02
    assert rise_step({"step": [0, 50], "m": [math.nan, 0.5]}, "m") is None
    assert rise_step(curves, "absent") is None


def test_a_rise_from_zero_to_no_preference_is_no_rise():
    # a mixer whose output projections start at zero: mass 0 at step 0, then the level of a map
    # with no preference (every row spread evenly over the earlier positions)
    target = [[0, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0]]
    assert even_mass(target) == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert math.isnan(even_mass(None))
    assert math.isnan(even_mass([[0, 0], [0.4, 0]]))  # a mean over sequences: no level to read
    curves = {"step": [0, 50, 100, 150], "m": [0.0, 0.55, 0.58, 0.59]}
    assert rise_step(curves, "m") == 50  # from zero: a rise at the first evaluation
    assert rise_step(curves, "m", floor=even_mass(target)) is None  # not above no preference
    run = {"status": "censored", "steps_to_emergence": None, "budget_steps": 400,
           "attention_target": target, "curves": {**curves, "val/influence_mass": curves["m"]}}
    (m,) = row_mechanism({"runs": records([run]), "job_config": {"train": {"eval_every": 50}}})
    assert m["censored_risen"] == 0 and m["even"] == pytest.approx(7 / 12)


def test_lags_per_row():
    runs = [{"status": "emerged", "steps_to_emergence": em, "budget_steps": 400,
             "curves": {"step": [0, 50, 100, 150, 200], "val/influence_mass": curve}}
            for em, curve in [(100, [0.1, 0.1, 0.5, 0.5, 0.5]), (150, [0.1, 0.1, 0.1, 0.5, 0.5]),
                              (200, [0.1, 0.1, 0.1, 0.1, 0.5])]]
    runs += [{"status": "censored", "steps_to_emergence": None, "budget_steps": 400,
              "curves": {"step": [0, 50, 100, 150, 200], "val/influence_mass": curve}}
             for curve in ([0.1, 0.1, 0.3, 0.4, 0.4], [0.1, 0.1, 0.1, 0.11, math.nan])]
    (m,) = row_mechanism({"runs": records(runs), "job_config": {"train": {"eval_every": 50}}})
    assert (m["curve"], m["emerged"], m["risen"], m["median_lag"]) == ("influence", 3, 3, 0)
    assert m["coincide"] == 1.0 and m["rho"] == pytest.approx(1.0)
    # every seed: start and end medians; one of the two censored seeds learned the pattern
    assert (m["seeds"], m["start"], m["end"]) == (5, pytest.approx(0.1), pytest.approx(0.5))
    assert (m["censored"], m["censored_risen"]) == (2, 1)
    assert m["half_n"] == 0  # no accuracy curve recorded here
    assert math.isnan(m["auroc_end"])  # no AUROC recorded either
    ranked = [{**r, "curves": {**r["curves"], "val/influence_auroc": [0.5, 0.6, a]}}
              for r, a in zip(runs, (0.9, 1.0, 0.95, 0.55, 0.6))]
    (m,) = row_mechanism({"runs": records(ranked), "job_config": {"train": {"eval_every": 50}}})
    assert (m["auroc_start"], m["auroc_end"]) == (pytest.approx(0.5), pytest.approx(0.9))
    # at emergence (100, 150, 200): the last AUROC measured at or before it (steps 0-100 here)
    assert m["auroc_at"] == pytest.approx([0.9, 1.0, 0.95])
    # a map measured every other evaluation is NaN between: the value before stands
    sparse = [{**r, "curves": {**r["curves"], "val/influence_auroc": [0.5, 0.7, math.nan, 0.95,
                                                                      math.nan]}}
              for r in runs]
    (m,) = row_mechanism({"runs": records(sparse), "job_config": {"train": {"eval_every": 50}}})
    assert m["auroc_at"] == pytest.approx([0.7, 0.95, 0.95])
    assert _at_emergence(m["auroc_at"]) == "0.95 (0.70-0.95), 2/3 >= 0.9"
    assert _at_emergence([]) == "-" and _at_emergence([0.8]) == "0.80, 0/1 >= 0.9"


def test_a_pattern_rising_with_the_metric_leads_the_threshold_but_not_the_half_rise():
    # the pattern and the accuracy rise together over 100-200; the 0.9 threshold is met at 200
    steps = [0, 50, 100, 150, 200, 250]
    runs = [{"status": "emerged", "steps_to_emergence": 200, "budget_steps": 400,
             "curves": {"step": steps, "val/parent_mass": [0.1, 0.1, 0.2, 0.5, 0.6, 0.6],
                        "val/token_acc": [0.5, 0.5, 0.6, 0.8, 0.92, 0.95]}}] * 3
    job = {"train": {"eval_every": 50}, "emergence": {"metric": "val/token_acc"}}
    (m,) = row_mechanism({"runs": records(runs), "job_config": job})
    assert (m["curve"], m["median_lag"], m["half_lag"], m["half_coincide"]) == \
        ("attention", -50, 0, 1.0)
    # a loss falls: its half-fall is the same step
    loss = [{**r, "curves": {**r["curves"], "val/loss": [0.7, 0.7, 0.6, 0.3, 0.1, 0.1]}}
            for r in runs]
    job = {"train": {"eval_every": 50}, "emergence": {"metric": "val/loss"}}
    (m,) = row_mechanism({"runs": records(loss), "job_config": job})
    assert m["half_lag"] == 0


def test_a_row_that_never_emerged_still_shows_its_pattern():
    runs = [{"status": "censored", "steps_to_emergence": None, "budget_steps": 400,
             "curves": {"step": [0, 50, 100], "val/influence_mass": [0.2, 0.3, 0.6]}}] * 2
    (m,) = row_mechanism({"runs": records(runs), "job_config": {"train": {"eval_every": 50}}})
    assert (m["emerged"], m["risen"], m["censored_risen"]) == (0, 0, 2)
    assert math.isnan(m["median_lag"]) and m["end"] == pytest.approx(0.6)
    # a seed that never emerged but whose accuracy rose with its pattern counts at the half-rise
    runs = [{**runs[0], "curves": {"step": [0, 50, 100], "val/influence_mass": [0.2, 0.5, 0.6],
                                   "val/token_acc": [0.5, 0.6, 0.8]}}]
    (m,) = row_mechanism({"runs": records(runs), "job_config": {"train": {"eval_every": 50}}})
    assert (m["half_n"], m["half_lag"]) == (1, -50)  # pattern half way at 50, accuracy at 100


@pytest.mark.slow
def test_a_board_with_influence_and_patching_shows_its_mechanism(tmp_path):
    spec = {**TINY, "name": "mech", "train": {**TINY["train"], "keep_checkpoints": True,
                                              "patch": True}}
    path = tmp_path / "mech.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    sweep(path, out=tmp_path / "mech")
    _, results = read_results(tmp_path / "mech")
    for r in results:
        assert "val/influence_mass" in r.curves
        if r.config["arch"]["name"] == "transformer" and r.emerged:
            assert r.patch["pre"]["step"] < r.patch["post"]["step"]
            assert r.patch["on_plateau"] == (r.plateau_end is not None
                                             and r.patch["pre"]["step"] <= r.plateau_end)
        elif r.emerged:
            assert r.patch.startswith("not patched: arch.name: mixer 'mlp_mixer' exposes no")
    text = (tmp_path / "mech" / "leaderboard.md").read_text()
    assert "## Mechanism: the pattern against emergence" in text
    assert "| influence |" in text and "| attention |" in text
    assert "ground truth |" in text  # the patching table
    assert "![gradient and intervention maps before and at emergence" in text
    assert (tmp_path / "mech" / "influence.png").stat().st_size > 1000


def test_patching_summary_leaves_out_runs_whose_pre_checkpoint_is_off_the_plateau():
    from bench.analysis.mechanism import patch_summary

    def run(pre_step, plateau_end, pre, post, layer_accs, all_acc):
        gap = post - pre
        truth = [{"acc": a} for a in layer_accs] + [{"restored": (all_acc - pre) / gap,
                                                     "acc": all_acc}]
        return {"plateau_end": plateau_end, "patch": {
            "pre": {"step": pre_step, "p": pre}, "post": {"p": post},
            "greedy": [{"restored": r} for r in (0.1, 0.2, 0.3, 0.9)], "ground_truth": truth}}

    runs = [run(200, 300, 0.5, 0.9, [0.97, 0.5], 0.95), run(200, 200, 0.5, 0.9, [0.7, 0.4], 0.6),
            run(1050, 300, 0.88, 0.9, [0.5, 0.5], 0.5),  # pre after the plateau: gap 0.02
            run(1050, None, 0.88, 0.9, [0.5, 0.5], 0.5),  # no plateau observed
            {"plateau_end": 100, "patch": "not patched: no attention"}]
    runs = records(runs)
    s = patch_summary({"runs": runs, "job_config": {"emergence": {"metric": "val/token_acc",
                                                                  "threshold": 0.9}}})
    assert (s["runs"], s["used"], s["heads"]) == (4, 2, 4)
    assert s["truth"] == pytest.approx((0.45 / 0.4 + 0.1 / 0.4) / 2)  # the -19s left out
    assert s["truth_acc"] == pytest.approx(0.775) and s["truth_layer_acc"] == pytest.approx(0.835)
    assert s["solves"] == (1, 1)  # every layer / the best single layer
    assert (s["pre"], s["post"], s["top1"], s["all"]) == (0.5, 0.9, 0.1, 0.9)
    loss = patch_summary({"runs": runs, "job_config": {"emergence": {"metric": "val/loss"}}})
    assert loss["solves"] is None  # accuracy says nothing about a loss threshold


def test_the_influence_figure_shows_a_row_that_never_emerged(tmp_path, monkeypatch):
    from bench.analysis import plots
    from bench.analysis.mechanism import influence_figure

    drawn = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path, **kw: (drawn.append(fig),
                                                                save(fig, path, **kw)))

    truth = [[0, 0, 0], [1, 0, 0], [0, 1, 0]]
    run = {"status": "censored", "steps_to_emergence": 400, "final_metrics": {"val/token_acc": .6},
           "config": {"seed": 3, "emergence": {"metric": "val/token_acc"}},
           "attention_target": truth,
           "influence": {"steps": [0, 200, 400], "rows": [1, 2],
                         "maps": [[[0.5, 0.5, 0], [0.3, 0.3, 0.4]]] * 3}}
    row = {"architecture": "gdn", "runs": records([run])}
    assert influence_figure(tmp_path / "influence.png", [row])
    assert (tmp_path / "influence.png").stat().st_size > 1000
    titles = [ax.get_title() for ax in drawn[0].axes if ax.get_title()]  # not the colour bars
    assert titles == ["gradient, step 0", "gradient, step 400 (last; never emerged)",
                      "intervention: not recorded", "intervention: not recorded",
                      "ground truth (parents)"]
    assert len(drawn[0].axes) == 5 + 3  # a colour scale beside every drawn map
    run["intervention"] = {"steps": [0, 400], "rows": [1, 2],
                           "maps": [[[0.1, 0.9, 0], [0.5, 0.5, 0.0]]] * 2}
    drawn.clear()
    assert influence_figure(tmp_path / "influence.png",
                            [{"architecture": "gdn", "runs": records([run])}])
    titles = [ax.get_title() for ax in drawn[0].axes if ax.get_title()]
    assert titles[2:4] == ["intervention, step 0", "intervention, step 400 (last; never emerged)"]
    # a board of two tasks names each row's task beside its mixer; one task needs no name
    assert drawn[0].axes[0].get_ylabel().startswith("gdn\n")
    drawn.clear()
    assert influence_figure(tmp_path / "influence.png",
                            [{"architecture": "gdn", "task": t, "runs": records([run])}
                             for t in ("linear_map(state_size=3)", "cellular_automaton(n=3)")])
    labels = [ax.get_ylabel() for ax in drawn[0].axes if ax.get_ylabel()]
    assert [label.split("\n")[0] for label in labels] == ["linear_map", "cellular_automaton"]
