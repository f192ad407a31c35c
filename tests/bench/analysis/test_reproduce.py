"""`bench reproduce`: a tiny committed leaderboard agrees with its own rerun and not with
doctored results."""

import json
import re
import shutil
import sqlite3

import pytest
import yaml

from bench.sweeps.results import ResultsDB
from bench.sweeps.spec import load_spec
from bench.sweeps.sweep import run_sweep
from tests.bench.conftest import TINY

# 5 seeds: at 4 a fully separated pair cannot reach p < 0.05 after Holm over two tests
# PyTorch's defaults: at the reference initialisation one of these seeds does not emerge
ONE_ROW = {**TINY, "archs": [{"name": "mlp_mixer", "d_model": 32, "n_layers": 1, "init": "torch"}],
           "seeds": 5,
           "train": {**TINY["train"], "max_steps": 400}}


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """A tiny leaderboard, run once: SPEC.yaml and its committed results in SPEC/."""
    spec = tmp_path_factory.mktemp("board") / "tinyboard.yaml"
    spec.write_text(yaml.safe_dump({**ONE_ROW, "name": "tinyboard"}, sort_keys=False))
    counts = run_sweep(load_spec(spec), spec.with_suffix(""), progress=False)
    assert counts["emerged"] == 5  # every seed: so a doctored "never" is a real difference
    return spec


@pytest.fixture
def committed(board, tmp_path):
    """A private copy of the tiny leaderboard (a test may doctor it)."""
    shutil.copy(board, tmp_path / board.name)
    shutil.copytree(board.with_suffix(""), tmp_path / board.stem)
    return tmp_path / board.name


def test_a_rerun_agrees_with_its_committed_results(committed, cli, tmp_path):
    out = tmp_path / "again"
    # a hardware key set on the command line leaves every row matching the committed one
    code, captured = cli("reproduce", str(committed), "--out", str(out), "--no-progress",
                         "--set", "runtime.accelerator=cpu")
    assert code == 0, captured.out + captured.err
    report = json.loads((out / "reproduce.json").read_text())
    (row,) = report["rows"]
    assert row["verdict"] == "agrees" and row["committed_solved"] == row["new_solved"] == "5/5"
    assert row["p_logrank"] == 1.0 and row["p_solve_rate"] == 1.0  # the same seeds, bit for bit
    assert row["method"] == "exact permutation"
    # what an "agrees" could have missed: a stated slowdown and a seed count
    assert row["detectable_slowdown"] >= 1.25 and row["seeds_for_1.5x"] in (4, 8, 12, 16, 24,
                                                                              32, 48, None)
    markdown = (out / "reproduce.md").read_text()
    assert "detects (80% power)" in markdown and "slowdown" in markdown
    assert "agrees" in captured.out and (out / "leaderboard.md").exists()


def test_doctored_committed_results_differ(committed, cli, tmp_path):
    reference = committed.with_suffix("")
    fresh = tmp_path / "fresh"
    shutil.copytree(reference, fresh)  # the honest results become the rerun ...
    db = ResultsDB(reference / ResultsDB.FILENAME)
    for record in db.results():  # ... and the committed ones say no seed ever emerged
        result = record.to_json() | {"status": "censored", "steps_to_emergence": None,
                                     "tokens_to_emergence": None, "steps": record.budget_steps}
        db.finish(record.job_id, result)
    db.close()
    code, captured = cli("reproduce", str(committed), "--out", str(fresh), "--no-progress")
    assert code == 1
    (row,) = json.loads((fresh / "reproduce.json").read_text())["rows"]
    assert row["verdict"] == "differs" and row["committed_solved"] == "0/5"
    assert row["p_logrank"] == pytest.approx(2 / 252)  # exact: 2 of C(10, 5) relabellings
    assert row["p_solve_rate"] < 0.05 and row["p_adjusted"] < 0.05


def test_a_subset_of_seeds_and_rows(committed, cli, tmp_path):
    out = tmp_path / "two"
    code, captured = cli("reproduce", str(committed), "--out", str(out), "--seeds", "2",
                         "--no-progress")
    assert code == 0, captured.err
    (row,) = json.loads((out / "reproduce.json").read_text())["rows"]
    assert row["new_solved"] == "2/2" and row["committed_solved"] == "5/5"
    with sqlite3.connect(out / ResultsDB.FILENAME) as conn:
        assert conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 2
    code, captured = cli("reproduce", str(committed), "--out", str(out), "--row", "ffff")
    assert code == 2 and "--row: 'ffff' matches no row of tinyboard; allowed:" in captured.err


@pytest.mark.parametrize("args, message", [
    (["--alpha", "1.5"], "--alpha: must be in (0, 1), got 1.5"),
    (["--seeds", "0"], "--seeds: must be in 1..10,000, got 0"),
    (["--seeds", "1000000000"], "--seeds: must be in 1..10,000, got 1000000000"),
    (["--seed-start", "4294967290", "--seeds", "100"], "--seed-start/--seeds: seeds: every seed "
     "must be an integer in 0..4294967295, got 4294967296 (and 93 more)"),
    (["--set", "runtime.accelerator"], "--set runtime.accelerator: expected key=value, e.g. "
                                       "runtime.accelerator=gpu"),
])
def test_bad_reproduce_options_are_one_line_errors(committed, cli, tmp_path, args, message):
    code, captured = cli("reproduce", str(committed), "--out", str(tmp_path / "x"), *args)
    assert code == 2 and captured.err.strip() == f"error: {message}"
    assert not (tmp_path / "x").exists()


def test_no_committed_results_and_the_committed_directory_are_refused(tmp_path, cli):
    spec = tmp_path / "unrun.yaml"
    spec.write_text(yaml.safe_dump(ONE_ROW))
    code, captured = cli("reproduce", str(spec))
    assert code == 2 and "no committed results at" in captured.err
    spec.with_suffix("").mkdir()
    (spec.with_suffix("") / ResultsDB.FILENAME).touch()
    code, captured = cli("reproduce", str(spec), "--out", str(spec.with_suffix("")))
    assert code == 2 and "holds the committed results; give a fresh directory" in captured.err


def tuned_spec(tmp_path, seeds: int):
    train = {k: v for k, v in ONE_ROW["train"].items() if k != "lr"}
    two = {**ONE_ROW, "name": "tuned", "seeds": seeds,
           "tune": {"lr": [0.003, 0.01], "seeds": 1}, "train": train,
           "archs": [{"name": "mlp_mixer", "d_model": 32, "n_layers": 1},
                     {"name": "transformer", "d_model": 32, "n_layers": 1}]}
    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump(two, sort_keys=False))
    return path


def test_a_row_of_a_tuned_spec_is_chosen_by_its_hash_at_any_rate(tmp_path):
    """The committed table shows a row's hash at its chosen rate, which need not be the first
    of the grid: that hash selects the row's family, tuning runs at every rate included."""
    from bench.core.errors import ConfigError
    from bench.core.rows import group_key
    from bench.sweeps.spec import expand, row_filter, tuning_jobs

    spec = load_spec(tuned_spec(tmp_path, seeds=2))
    jobs = [*tuning_jobs(spec), *expand(spec)]
    at_second = next(j for j in tuning_jobs(spec)
                     if j.arch.name == "mlp_mixer" and j.train.lr == 0.01)
    keep = row_filter(spec, [group_key(at_second.to_dict())[:10]])
    kept = [j for j in jobs if keep(j)]
    assert {j.arch.name for j in kept} == {"mlp_mixer"}
    assert {j.train.lr for j in kept} == {0.003, 0.01} and len(kept) == 2 + 2  # tuning + seeds
    with pytest.raises(ConfigError, match="--row: 'ffff' matches no row of tuned"):
        row_filter(spec, ["ffff"])
    for bad in ("", " ", "transformer", "../x"):  # an empty prefix would match every row
        with pytest.raises(ConfigError, match=f"--row: '{re.escape(bad)}' is not a config hash"):
            row_filter(spec, [bad])


@pytest.mark.slow
def test_reproducing_one_row_of_a_tuned_leaderboard(cli, tmp_path):
    """--row on a tuned spec tunes and reruns that row only (the others have no rate)."""
    from bench.core.rows import group_key

    path = tuned_spec(tmp_path, seeds=1)
    assert run_sweep(load_spec(path), path.with_suffix(""), progress=False)["pending"] == 0
    with sqlite3.connect(path.with_suffix("") / ResultsDB.FILENAME) as conn:
        config = json.loads(conn.execute("SELECT config FROM jobs WHERE arch = 'mlp_mixer' AND "
                                         "seed = 0").fetchone()[0])
    out = tmp_path / "one"
    code, captured = cli("reproduce", str(path), "--out", str(out), "--row",
                         group_key(config)[:10], "--no-progress")
    assert code == 0, captured.err
    with sqlite3.connect(out / ResultsDB.FILENAME) as conn:
        rows = conn.execute("SELECT arch, seed, lr FROM jobs ORDER BY seed, lr").fetchall()
    assert rows == [("mlp_mixer", 0, config["train"]["lr"]), ("mlp_mixer", 1000, 0.003),
                    ("mlp_mixer", 1000, 0.01)]
