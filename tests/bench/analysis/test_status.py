"""`bench status`: the time left is estimated per (task, architecture), not from the mean job."""

import json

import pytest

from bench.analysis.labels import row_labels
from bench.analysis.status import estimate_remaining


def job(arch, status, wall=None, started=None, finished=None, lr=0.01):
    config = {"task": {"name": "linear_map"}, "arch": {"name": arch}, "seed": 0,
              "train": {"lr": lr}}
    return {"config": json.dumps(config), "status": status, "wall_time_s": wall,
            "started_at": started, "finished_at": finished}


def eta(rows, workers, now):
    return estimate_remaining(rows, [row_labels(json.loads(r["config"])) for r in rows], workers,
                              now)


def test_each_job_takes_the_time_of_its_own_kind():
    rows = [job("transformer", "emerged", wall=100), job("transformer", "censored", wall=300),
            job("mamba", "censored", wall=2000, lr=0.003),  # another lr: the same kind
            job("transformer", "pending"), job("mamba", "pending"), job("mamba", "pending")]
    assert eta(rows, workers=2, now=0) == pytest.approx((200 + 2 * 2000) / 2)


def test_a_resumed_job_counts_its_own_wall_time_and_a_running_one_what_is_left():
    # finished after a resume: its last claim ran 50 s of a 1,000 s run
    rows = [job("mamba", "censored", wall=1000, started=950, finished=1000),
            job("rwkv", "censored", started=0, finished=400),  # no wall time: its claim
            job("mamba", "running", started=700), job("rwkv", "pending"),
            job("gated_deltanet", "pending")]  # no finished job of its kind: the overall mean
    left = eta(rows, workers=1, now=1000)
    assert left == pytest.approx((1000 - 300) + 400 + (1000 + 400) / 2)
    assert eta([job("mamba", "pending")], workers=2, now=0) is None


def test_each_row_lists_its_steps_to_emergence_and_its_censored_runs_at_their_budget():
    """What a look at tuning runs (bench sweep --tune-only) needs: is a row near its budget?"""
    from bench.analysis.status import _steps

    assert _steps({"steps": [1200, 850], "censored": [4000, 4000]}) == "850, 1,200, > 4,000 x2"
    assert _steps({"steps": [], "censored": [4000]}) == "> 4,000"
    assert _steps({"steps": [], "censored": []}) == "-"


def test_a_compare_interrupted_before_any_new_run_finished_says_a_sane_time(tmp_path):
    """A compare's directory holds the committed rows, finished long before its own sweep
    started: the time it ran counts only what this sweep finished (was: 'ran -158h54m57s')."""
    import shutil
    import time
    from pathlib import Path

    from bench.analysis.status import sweep_status
    from bench.sweeps.results import ResultsDB

    root = Path(__file__).resolve().parents[3]
    shutil.copy(root / "leaderboards" / "quickstart" / "results.sqlite", tmp_path)
    db = ResultsDB(tmp_path / "results.sqlite")
    db.set_meta("started_at", time.time() - 5)  # this sweep's start; nothing of it finished
    db.close()
    status = sweep_status(tmp_path)
    assert 0 <= status["elapsed_s"] < 60
    assert "ran -" not in status["text"]
