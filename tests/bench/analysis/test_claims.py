"""A spec's tests (pairwise and trend log-rank, Holm per claim) and learning rates tuned on
seeds the table never reports."""

import csv
import sqlite3

import pytest

from bench.analysis.claims import _order_fixed, run_tests, to_markdown
from bench.analysis.leaderboard import summarise
from bench.core.errors import ConfigError
from bench.core.stats import smallest_detectable
from bench.sweeps.spec import expand, load_spec, tuning_jobs
from tests.records import records


def _result(heads: int, seed: int, step: int | None, budget: int = 1000) -> dict:
    return {"config": {"task": {"name": "linear_map", "state_size": 8}, "seed": seed,
                       "arch": {"name": "transformer", "n_heads": heads, "head_dim": 64 // heads},
                       "train": {"lr": 0.003}},
            "status": "emerged" if step else "censored", "steps_to_emergence": step,
            "budget_steps": budget, "transition_width": None, "n_params": 10,
            "state_per_layer": 1, "steps_per_s": 1.0, "final_metrics": {}}


def _rows(steps_by_heads: dict[int, list[int | None]]) -> list[dict]:
    results = [_result(h, s, st) for h, steps in steps_by_heads.items()
               for s, st in enumerate(steps)]
    return [row for row, _ in summarise(records(results))]


def test_a_monotone_claim_is_tested_as_a_trend_with_its_direction():
    rows = _rows({1: [None] * 4, 2: [700, 800, 900, None], 4: [300, 350, 400, 450],
                  8: [100, 120, 150, 160]})
    [trend] = run_tests([{"trend": "arch.n_heads"}], rows)
    assert trend.between == "1 < 2 < 4 < 8" and trend.direction == "higher arch.n_heads sooner"
    assert trend.p < 0.001 and trend.method.startswith("Monte Carlo")  # 16!/(4!^4): too many


def test_a_comparison_says_which_levels_the_budget_may_have_decided():
    rows = _rows({1: [None] * 4, 2: [700, 800, None, None], 4: [300, None, None, None],
                  8: [100, 120, 150, 160]})
    [trend] = run_tests([{"trend": "arch.n_heads"}], rows)
    assert trend.budget_decides == "1: 4/4; 4: 3/4"  # half censored (2: 2/4) is not more
    pairs = {c.between: c for c in run_tests([{"compare": "arch.n_heads", "against": 8}], rows)}
    assert pairs["1 vs 8"].budget_decides == "1: 4/4; order fixed"
    assert pairs["2 vs 8"].budget_decides == "no"
    # every 8-head seed emerged by 160 and every censored 1-head seed ran to 1,000: a longer
    # budget can only add later emergences to the 1-head row
    assert pairs["4 vs 8"].budget_decides == "4: 3/4; order fixed"
    late = _rows({1: [None] * 4, 2: [100, 200, 300, 1200]})  # 2 heads' last emerged after 1,000
    [pair] = run_tests([{"compare": "arch.n_heads"}], late)
    assert pair.budget_decides == "1: 4/4"
    # only the order the test found is fixed: were the level with censored seeds the sooner
    # one, its censored seeds emerging late could reverse it
    done, cut = ([500.0, 510.0, 520.0], [True] * 3), ([50.0, 1000.0, 1000.0], [True, False, False])
    assert _order_fixed(*done, *cut, statistic=1.0)  # the all-emerged level sooner
    assert not _order_fixed(*done, *cut, statistic=-1.0)
    assert not _order_fixed(*done, *cut, statistic=0.0)
    assert "| 1: 4/4; order fixed |" in "\n".join(to_markdown(list(pairs.values())))


def test_pairwise_comparisons_are_holm_adjusted_within_one_claim():
    rows = _rows({2: [100, 110, 120, 130], 4: [500, 600, 700, 800], 8: [90, 100, 140, 150]})
    pairs = run_tests([{"compare": "arch.n_heads"}], rows)
    assert [c.between for c in pairs] == ["2 vs 4", "2 vs 8", "4 vs 8"]
    assert pairs[0].p == pytest.approx(2 / 70)  # exact at 4 vs 4
    assert pairs[0].p_holm == pytest.approx(min(1, 3 * 2 / 70))
    assert all(c.p_holm >= c.p for c in pairs)
    against = run_tests([{"compare": "arch.n_heads", "against": 4}], rows)
    assert [c.between for c in against] == ["2 vs 4", "8 vs 4"]
    lowest = run_tests([{"compare": "arch.n_heads", "against": 2}], rows)
    assert [c.between for c in lowest] == ["4 vs 2", "8 vs 2"]  # every level, not the first


def test_a_comparison_that_does_not_reject_says_what_its_seeds_could_detect():
    rows = _rows({2: [100, 110, 120, 130], 4: [500, 600, 700, 800], 8: [90, 100, 140, 150]})
    pairs = {c.between: c for c in run_tests([{"compare": "arch.n_heads", "against": 2}], rows)}
    assert pairs["8 vs 2"].p_holm >= 0.05 and pairs["8 vs 2"].detectable is not None
    # simulated from the reference level's own seeds (n_heads = 2), at the other row's count
    ref = ([100, 110, 120, 130], [True] * 4, 1000)
    assert pairs["8 vs 2"].detectable == smallest_detectable(*ref, 4, 0.05)
    [rejects] = run_tests([{"compare": "arch.n_heads"}],
                          _rows({2: list(range(100, 180, 10)), 4: list(range(500, 580, 10))}))
    assert rejects.p_holm < 0.05 and rejects.detectable is None  # it rejected: nothing to size
    table = "\n".join(to_markdown(list(pairs.values())))
    assert "detects (80% power)" in table
    [censored] = run_tests([{"compare": "arch.n_heads"}], _rows({2: [None] * 4, 4: [None] * 4}))
    assert censored.detectable == float("inf") and "| none |" in "\n".join(to_markdown([censored]))


@pytest.mark.parametrize("tests,message", [
    ([{"trend": "arch.n_heads", "compare": "arch.name"}], "each entry is"),
    ([{"compare": "n_heads"}], "is not task.FIELD"),
    ([{"trend": "arch.n_heads", "against": 4}], "unknown keys"),
    (["arch.n_heads"], "each entry is"),
])
def test_bad_tests_are_one_line_errors(spec_file, tests, message):
    with pytest.raises(ConfigError, match=f"tests: .*{message}"):
        load_spec(spec_file(tests=tests))


def test_tuning_seeds_are_disjoint_and_rates_come_from_the_grid(spec_file):
    train = {"max_steps": 300, "eval_every": 20, "eval_size": 128, "batch_size": 32,
             "warmup_steps": 20}
    spec = load_spec(spec_file(train=train, tune={"lr": [0.003, 0.01], "seeds": 2}))
    tuning = tuning_jobs(spec)
    assert sorted({j.seed for j in tuning}) == [1000, 1001]
    assert sorted({j.train.lr for j in tuning}) == [0.003, 0.01] and len(tuning) == 8
    assert {j.seed for j in expand(spec)} == {0, 1}
    with pytest.raises(ConfigError, match="tune.seeds: must be disjoint from seeds"):
        load_spec(spec_file(train=train, tune={"lr": [0.003, 0.01], "seeds": [1, 5]}))
    with pytest.raises(ConfigError, match="train.lr: set by tune"):
        load_spec(spec_file(tune={"lr": [0.003, 0.01], "seeds": 2}))
    with pytest.raises(ConfigError, match="tune.lr: a list of at least two positive rates"):
        load_spec(spec_file(train=train, tune={"lr": [0.003, float("nan")], "seeds": 2}))


@pytest.mark.slow
def test_a_tuned_sweep_reports_only_its_seeds_at_each_rows_chosen_rate(spec_file, cli):
    train = {"max_steps": 300, "eval_every": 20, "eval_size": 128, "batch_size": 32,
             "warmup_steps": 20}
    path = spec_file(train=train, tune={"lr": [0.001, 0.01], "seeds": 2},
                     archs=[{"name": "mlp_mixer", "d_model": 32, "n_layers": 1}])
    assert cli("sweep", str(path), "--no-progress")[0] == 0
    out = path.with_suffix("")
    db = sqlite3.connect(out / "results.sqlite")
    seeds = db.execute("SELECT seed, lr, status FROM jobs ORDER BY position").fetchall()
    tuned = [s for s in seeds if s[0] >= 1000]
    reported = [s for s in seeds if s[0] < 1000]
    assert len(tuned) == 4 and len(reported) == 2 and len({s[1] for s in reported}) == 1
    [row] = list(csv.DictReader((out / "leaderboard.csv").open()))
    assert row["seeds"] == "2" and float(row["lr"]) == reported[0][1]
    markdown = (out / "leaderboard.md").read_text()
    assert "tuning seeds [1000, 1001], disjoint from the seeds above" in markdown


def test_comparing_architectures_by_name_keeps_their_own_rates_in_the_comparison():
    results = [{**_result(4, s, st), "config": {**_result(4, s, st)["config"],
                                                "arch": {"name": name}, "train": {"lr": lr}}}
               for name, lr, steps in (("transformer", 0.01, [400, 450, 500, 520]),
                                       ("mlp_mixer", 0.003, [100, 100, 150, 150]))
               for s, st in enumerate(steps)]
    rows = [row for row, _ in summarise(records(results))]
    [c] = run_tests([{"compare": "arch.name", "against": "transformer"}], rows)
    assert c.between == "mlp_mixer vs transformer" and c.direction == "mlp_mixer sooner"
    assert c.p == pytest.approx(2 / 70)


def test_reproducing_on_seeds_that_overlap_the_tuning_seeds_is_refused(spec_file):
    from bench.analysis.reproduce import select_spec

    train = {"max_steps": 300, "eval_every": 20, "eval_size": 128, "batch_size": 32}
    spec = load_spec(spec_file(train=train, tune={"lr": [0.003, 0.01], "seeds": 2}))
    assert select_spec(spec, 4, 100).seed_list() == [100, 101, 102, 103]
    with pytest.raises(ConfigError, match="--seed-start/--seeds: tune.seeds: must be disjoint"):
        select_spec(spec, 4, 999)
