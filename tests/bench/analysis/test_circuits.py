"""The circuits leaderboard section: the findings F1-F5 and the curves over checkpoints, read
from the runs' head-screen summaries."""

import dataclasses
import math

from bench.analysis.circuits import circuits_figure, circuits_markdown, row_circuits, row_curves
from tests.records import record


def test_the_leaderboard_section_reads_the_findings():
    def run(ind, half, shape, early_sinks, identified, heads, dl_ind, dl_ctl):
        steps = [{"step": s} for s in (0, 50, 100, 200, 400, 3000)]
        return record(config={"train": {"max_steps": 3000}}, circuits={
            "induction_formation_step": ind, "sink_half_step": half, "sink_shape": shape,
            "sinks_in_layers_0_1_at": early_sinks, "steps": steps,
            "early_identification": identified, "induction_heads": heads,
            "ablation": {"dloss_induction": dl_ind, "dloss_control": dl_ctl}})

    head = {"pr_at_or_before": True}
    late = {"pr_at_or_before": False}
    row = {"task": "induction()", "architecture": "transformer", "runs": [
        run(100, 2000, "jump", [], [0, 0.5, 1, 1, 1, 1], [head, head], 1.0, 0.1),
        run(200, 400, "gradual", [400], [0, 0, 0.5, 1, 1, 1], [late], 0.5, 0.6),
        run(None, None, "none", [], [None] * 6, [], None, None),
        record(config={"train": {"max_steps": 3000}}, circuits="not screened: x")]}
    c = row_circuits(row)
    assert c["runs"] == 3 and c["induction_runs"] == 2
    assert c["f1_runs_with_early_sinks"] == 1
    assert c["f2_shapes"] == {"jump": 1, "gradual": 1, "none": 1}
    assert (c["f3_both"], c["f3_magnitude"], c["f3_first"]) == (2, 1, 2)
    assert c["f3_median"] == 11.0  # ratios 20 and 2
    assert c["f4_runs"] == 2 and c["f4_median"] == 0.25  # step 50 is within 2% of 3000
    # two thirds of the final circuit first at steps 100 and 200: too few runs for a 95%
    # interval narrower than their range
    assert (c["f4_two_thirds"], c["f4_two_thirds_low"], c["f4_two_thirds_high"]) == (150, 100, 200)
    assert c["f4_two_thirds_share"] == 0.05
    assert (c["f5_heads"], c["f5_ahead"]) == (3, 2)
    # the test counts runs, not heads: run 1 (2 of 2 heads first) against run 2 (0 of 1)
    assert (c["f5_runs_more"], c["f5_runs_fewer"]) == (1, 1) and c["f5_p"] == 1.0
    assert c["f3_p"] == 0.25  # 2 of 2 runs with induction first, one-sided
    assert c["ablation_runs"] == 2 and c["ablation_wins"] == 1
    text = "\n".join(circuits_markdown([row]))
    assert "## Circuits" in text and "1/3" in text
    assert circuits_markdown([{**row, "runs": row["runs"][3:]}]) == []
    # Holm across rows: two rows with the same F3 p of 0.25 are both adjusted to 0.5
    text = "\n".join(circuits_markdown([row, {**row, "architecture": "other"}]))
    assert text.count("0.250 (0.500)") == 2
    # mean-pattern ablation: a column only where some run measured it
    assert "mean-pattern" not in text and c["ablation_mean_runs"] == 0
    both = run(100, 2000, "jump", [], [0, 0.5, 1, 1, 1, 1], [head], 1.0, 2.0)
    both.circuits["ablation"].update(dloss_induction_mean=0.8, dloss_control_mean=0.1)
    c = row_circuits({**row, "runs": [*row["runs"], both]})
    assert (c["ablation_mean_runs"], c["ablation_mean_wins"]) == (1, 1)
    assert (c["dloss_induction_mean"], c["dloss_control_mean"]) == (0.8, 0.1)
    assert (c["ablation_runs"], c["ablation_wins"]) == (3, 1)  # zeroed: 1.0 < 2.0 here
    text = "\n".join(circuits_markdown([{**row, "runs": [*row["runs"], both]}]))
    assert "| mean-pattern ablation dloss |" in text and "| 0.800 vs 0.100 (1/1) |" in text


def screened(steps, induction, first, identified):
    return record(config={"train": {"max_steps": 3000}}, circuits={
        "steps": [{"step": s} for s in steps], "early_identification": identified,
        "overall": {"induction": induction, "first": first}})


def test_curves_are_quartiles_over_runs_at_the_common_checkpoints():
    runs = [screened([0, 50, 100], [0, 0.25, 0.5], [0, 0, 0.1], [0, 0.5, 1]),
            # an extra bracketing checkpoint at 75 is left out: not every run kept one
            screened([0, 50, 75, 100], [0, 0.5, 0.5, 1.0], [0, 0, 0, 0.3], [0, 1, 1, 1]),
            # no induction circuit at the end: no identified share at any step
            screened([0, 50, 100], [0, 0, 0], [0, 0.2, 0.2], [None, None, None])]
    c = row_curves([r.circuits for r in runs])
    assert c["step"] == [0, 50, 100]
    assert c["induction"][1] == [0, 0.25, 0.5]  # medians of (0,0,0), (0.25,0.5,0), (0.5,1,0)
    assert c["first"][1] == [0, 0, 0.2]
    assert c["identified"][1] == [0, 0.75, 1]  # over the two runs that have a circuit
    assert c["induction"][0][2] == 0.25 and c["induction"][2][2] == 0.75
    assert all(math.isnan(v) for v in row_curves([runs[2].circuits])["identified"][1])


def test_the_figure_is_drawn_only_from_screened_runs(tmp_path):
    row = {"architecture": "transformer", "runs": [
        screened([0, 50, 100], [0, 0.25, 0.5], [0, 0, 0.1], [0, 0.5, 1]),
        record(config={"train": {"max_steps": 3000}}, circuits="not screened: x")]}
    assert circuits_figure(tmp_path / "c.png", [row])
    assert (tmp_path / "c.png").stat().st_size > 10_000
    assert not circuits_figure(tmp_path / "d.png", [{**row, "runs": row["runs"][1:]}])
    assert not (tmp_path / "d.png").exists()


def test_sinks_of_any_class_are_read_from_the_kept_ratios():
    from bench.analysis.circuits import row_sinks_any_class

    def head(induction=1.0, first=1.0):  # ratios in the screen's class order
        return [induction, 1.0, 1.0, first, 1.0, 1.0]

    def run(first_by_step, early=1.0):
        # 3 layers of one head; layer 2 is an induction head from step 200 whose first-token
        # ratio follows `first_by_step`; layer 0's first-token ratio is `early` throughout. The
        # single-class summary sees no sink at all.
        steps = [{"step": s, "ratios": [[head(first=early)], [head()],
                                        [head(induction=100 if s else 1, first=f)]]}
                 for s, f in zip((0, 200, 400, 800), first_by_step)]
        return record(config={"train": {"max_steps": 800}}, circuits={
            "steps": steps, "induction_formation_step": 200, "sink_half_step": None,
            "sink_shape": "none", "sinks_in_layers_0_1_at": [],
            "overall": {"induction": [0, 1 / 3, 1 / 3, 1 / 3], "first": [0, 0, 0, 0]},
            "early_identification": [0, 1, 1, 1], "induction_heads": [], "ablation": {}})

    old = run([1, 1, 1, 1])
    old.circuits["steps"] = [{"step": s["step"]} for s in old.circuits["steps"]]
    row = {"task": "induction()", "architecture": "transformer", "runs": [
        run([1, 1, 40, 60]),  # sinks reach half their final fraction at 400: 2x induction's 200
        run([1, 1, 1, 35], early=31),  # layer 0 holds a sink from step 0: ratio 0
        run([1, 1, 1, 1]),
        old]}  # summarised before the ratios were kept: left out
    c = row_sinks_any_class(row)
    assert (c["runs"], c["with_sinks"], c["sink_layers"]) == (3, 2, [0, 2])
    assert c["f1_runs_with_early_sinks"] == 1
    assert c["f2_shapes"] == {"jump": 2, "gradual": 0, "none": 1}
    assert (c["f3_both"], c["f3_first"], c["f3_magnitude"], c["f3_median"]) == (2, 1, 0, 1.0)
    assert row_circuits(row)["f2_shapes"]["none"] == 4  # what the single-class rule reports
    text = "\n".join(circuits_markdown([row]))
    assert "Sinks counted whatever else a head is" in text
    assert "| induction() | `transformer` | 3 | 2/3 | 0, 2 | 1/3 | jump 2, none 1 |" in text
    assert row_sinks_any_class({**row, "runs": [old]}) is None
    assert "thresholds induction 50x, first token 30x, as in the paper" in text
    # a row screened with a first-token threshold of 36x counts sinks at 36x and says so
    strict = [dataclasses.replace(r, circuits={**r.circuits, "sequences": 500,
                                               "thresholds": {"induction": 50.0, "first": 36.0}})
              for r in row["runs"][:3]]
    c = row_sinks_any_class({**row, "runs": strict})
    assert (c["with_sinks"], c["sink_layers"]) == (1, [2])  # reached by run 1 (40x, 60x) only
    text = "\n".join(circuits_markdown([{**row, "runs": strict}]))
    assert "500 induction sequences per checkpoint; thresholds induction 50x, first token 36x;" \
        in text
    mixed = "\n".join(circuits_markdown([{**row, "runs": strict[:1] + row["runs"][1:3]}]))
    assert "runs differ: 500 induction sequences" in mixed
    # the figure's dashed curve: the median multi-label fraction, the run without ratios left out
    curves = row_curves([r.circuits for r in row["runs"]])
    assert curves["first_any"][1] == [0, 0, 1 / 3, 1 / 3]
    assert curves["first"][1] == [0, 0, 0, 0]
    assert all(math.isnan(v) for v in row_curves([old.circuits])["first_any"][1])
    assert "Sinks counted" not in "\n".join(circuits_markdown([{**row, "runs": [old]}]))
