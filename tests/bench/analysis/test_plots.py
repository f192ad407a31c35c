"""The leaderboard figures' data choices: axes, series, the representative seed, the plateau."""

import math

import pytest

from bench.analysis.labels import covarying, factor_groups
from bench.analysis.plots import representative
from bench.core.errors import ConfigError
from bench.core.record import RunRecord
from bench.sweeps.axes import axis_value
from tests.records import record


def _row(heads: int, task_seed: int = 0) -> dict:
    return {"job_config": {
        "task": {"name": "linear_map", "state_size": 6, "sparsity": 3, "task_seed": task_seed},
        "arch": {"name": "transformer", "n_heads": heads, "head_dim": 64 // heads},
        "train": {"lr": 0.003}}}


def test_axes_read_config_fields_or_the_number_of_candidate_supports():
    config = _row(4)["job_config"]
    assert axis_value(config, "arch.n_heads") == 4
    assert axis_value(config, "supports") == math.comb(6, 3)
    with pytest.raises(ConfigError, match="^'arch.depth' is not a field"):
        axis_value(config, "arch.depth")
    automaton = {**config, "task": {"name": "cellular_automaton", "n_cells": 8}}
    with pytest.raises(ConfigError, match="'supports' is not an axis of the cellular_automaton"):
        axis_value(automaton, "supports")  # derived axes are the task's own


def test_a_field_that_moves_with_the_axis_is_not_a_series():
    rows = [_row(h) for h in (1, 2, 4)]
    assert covarying(rows, ["arch.n_heads"]) == ["arch.head_dim"]
    # two tasks at every head count: the task seed is a series, head_dim still follows the axis
    rows += [_row(h, task_seed=1) for h in (1, 2, 4)]
    assert covarying(rows, ["arch.n_heads"]) == ["arch.head_dim"]


def test_a_derived_axis_keeps_the_task_s_other_fields_as_series():
    # every cell's C(S, s) is distinct, so s is a function of the axis; it is still a series:
    # the paper's figure is one line per sparsity against C(S, s)
    rows = [{"job_config": {"task": {"name": "linear_map", "state_size": size, "sparsity": s},
                            "arch": {"name": "transformer"}, "train": {}}}
            for size in (8, 12, 16) for s in (1, 2)]
    groups = factor_groups(rows, ["supports"])
    assert len(groups) == 2
    by_sparsity = {tuple(sorted(v[0] for v, _ in members)) for members in groups.values()}
    assert by_sparsity == {(8, 12, 16), (28, 66, 120)}


def _run(seed: int, status: str, step: int | None, acc: float = 0.9) -> RunRecord:
    return record(status=status, steps_to_emergence=step, final_metrics={"val/token_acc": acc},
                  config={"seed": seed, "emergence": {"metric": "val/token_acc"},
                          "task": {"name": "linear_map"}},
                  curves={"step": [50, 100, 150, 200, 250],
                          "val/loss": [0.69, 0.66, 0.60, 0.1, 0.01]})


def test_the_representative_seed_is_the_median_emerger_or_the_closest():
    runs = [_run(0, "emerged", 300), _run(1, "emerged", 100), _run(2, "emerged", 200),
            _run(3, "censored", None)]
    assert representative(runs).seed == 2
    never = [_run(0, "censored", None, 0.7), _run(1, "censored", None, 0.95)]
    assert representative(never).seed == 1


def test_the_power_law_is_fitted_pooled_and_per_series():
    from bench.analysis.leaderboard import slope_markdown

    # s = 1 grows as C^0.5, s = 2 as C^1.5: the pooled slope mixes them; each series has its own
    rows = []
    for s, b in ((1, 0.5), (2, 1.5)):
        for size in (8, 16, 32):
            steps = 10 * math.comb(size, s) ** b
            rows.append({"job_config": {"task": {"name": "linear_map", "state_size": size,
                                                 "sparsity": s}, "arch": {"name": "transformer"},
                                        "train": {}},
                         "runs": [record(status="emerged", steps_to_emergence=steps * f,
                                         budget_steps=10**7) for f in (0.9, 1.0, 1.1)]})
    text = "\n".join(slope_markdown(rows, "supports"))
    assert "over the 6 of 6 rows whose median is defined" in text
    assert "linear_map(sparsity=1) / transformer: b = 0.50 [" in text
    assert "linear_map(sparsity=2) / transformer: b = 1.50 [" in text
