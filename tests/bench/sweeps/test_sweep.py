"""Sweeps end to end: grids, the results database, leaderboard files, resume, status."""

import csv
import math
import sqlite3
import subprocess
import sys

import pytest

from bench.analysis.leaderboard import best_lr, summarise, with_null_rows
from bench.core.errors import ConfigError
from bench.sweeps.results import SweepLock
from bench.sweeps.spec import expand, load_spec
from bench.training.config import load_run_config
from tests.bench.conftest import TINY
from tests.records import record, records


def test_grids_expand_to_the_cartesian_product_in_a_fixed_order(spec_file):
    path = spec_file(
        task=[{"name": "linear_map", "state_size": 4, "sparsity": [1, 2]},
              {"name": "cellular_automaton", "n_colors": 2}],
        archs=[{"name": "transformer", "d_model": 32, "n_heads": [1, 2]}, {"name": "mlp_mixer"}],
        seeds=[3, 7], train={"lr": [0.001, 0.003]})
    jobs = expand(load_spec(path))
    assert len(jobs) == 3 * 3 * 2 * 2  # tasks x archs x lrs x seeds
    first = [(j.task.sparsity, j.arch.name, getattr(j.arch, "n_heads", None), j.train.lr, j.seed)
             for j in jobs[:6]]
    assert first == [(1, "transformer", 1, 0.001, 3), (1, "transformer", 1, 0.001, 7),
                     (1, "transformer", 1, 0.003, 3), (1, "transformer", 1, 0.003, 7),
                     (1, "transformer", 2, 0.001, 3), (1, "transformer", 2, 0.001, 7)]
    assert jobs[-1].task.name == "cellular_automaton" and jobs[-1].arch.name == "mlp_mixer"
    ids = [j.job_id() for j in jobs]
    assert len(set(ids)) == len(ids)
    assert ids == [j.job_id() for j in expand(load_spec(path))]  # stable
    # the id is the config's: the same job listed by another spec has the same id
    alone = spec_file("alone", task={"name": "linear_map", "state_size": 4, "sparsity": 1},
                      archs=[{"name": "transformer", "d_model": 32, "n_heads": 1}], seeds=[3],
                      train={"lr": 0.001})
    assert expand(load_spec(alone))[0].job_id() == ids[0]


def test_exclude_leaves_out_exactly_the_cells_it_names(spec_file):
    task = {"name": "linear_map", "state_size": 8, "sparsity": [1, 2, 3], "n_states": 2}
    drop = {"arch.name": "transformer", "task.sparsity": [2, 3]}
    path = spec_file(task=task, exclude=[drop])
    rows = {(j.arch.name, j.task.sparsity) for j in expand(load_spec(path))}
    assert rows == {("transformer", 1), ("mlp_mixer", 1), ("mlp_mixer", 2), ("mlp_mixer", 3)}
    # the kept jobs are the full grid's (same ids): excluding a cell changes no other job
    full = {j.job_id() for j in expand(load_spec(spec_file("full", task=task)))}
    assert {j.job_id() for j in expand(load_spec(path))} < full
    # a default the grid resolves is matched too (d_model is not in the transformer's section)
    kept = expand(load_spec(spec_file("d", exclude=[{"arch.d_model": 32, "arch.name": "mlp_mixer"}],
                                      archs=[{"name": "transformer", "n_layers": 1},
                                             {"name": "mlp_mixer", "d_model": 32}])))
    assert {j.arch.name for j in kept} == {"transformer"}


@pytest.mark.parametrize("exclude, message", [
    ([{"task.sparsity": 5}], r"exclude\[0\]: \{'task.sparsity': 5\} matches no cell of the grid"),
    ([{"arch.name": "mamba"}], r"exclude\[0\]: .* matches no cell"),
    ([{"task.sparsity": True}], r"exclude\[0\]: .* matches no cell"),  # True is not 1
    ([{"arch.name": ["transformer", "mlp_mixer"]}], "exclude: leaves out every cell"),
    ([{"train.lr": 0.01}], r"exclude\[0\]: unknown key 'train.lr'; allowed: task.FIELD"),
    ([{}], r"exclude\[0\]: a non-empty mapping"),
    ([{"task.sparsity": []}], r"exclude\[0\].task.sparsity: a value or a non-empty list"),
    ({"task.sparsity": 1}, "exclude: must be a list"),
])
def test_a_bad_exclude_is_refused_in_one_line(exclude, message, spec_file):
    with pytest.raises((ConfigError, ValueError), match=message):
        expand(load_spec(spec_file(exclude=exclude)))


def _result(lr: float, seed: int, step: int | None, budget: int = 100) -> dict:
    return {"config": {"task": {"name": "linear_map", "state_size": 4}, "seed": seed,
                       "arch": {"name": "transformer"}, "train": {"lr": lr}},
            "status": "emerged" if step else "censored", "steps_to_emergence": step,
            "budget_steps": budget, "transition_width": None, "n_params": 10,
            "state_per_layer": 1, "steps_per_s": 1.0, "final_metrics": {"val/token_acc": 1.0}}


def test_each_architecture_is_reported_at_its_best_learning_rate():
    results = ([_result(0.01, s, st) for s, st in enumerate([None, None, 40])]  # median never
               + [_result(0.003, s, st) for s, st in enumerate([50, 60, 70])]  # median 60
               + [_result(0.001, s, st) for s, st in enumerate([60, 80, 90])])  # median 80
    every = summarise(records(results))
    assert len(every) == 3
    [(row, km)] = best_lr(every)
    assert row["lr"] == 0.003 and row["median_steps"] == 60 and row["lr_grid"] == "0.001 0.003 0.01"
    assert math.isinf(next(r for r, _ in every if r["lr"] == 0.01)["median_steps"])


def test_sweep_records_every_job_in_the_database_and_resumes(spec_file, cli):
    path = spec_file(train={**load_spec(spec_file()).train, "lr": [0.003, 0.01]},
                     claim="Tiny models learn tiny maps.", plots=[["train.lr"]])
    assert cli("sweep", str(path), "--no-progress")[0] == 0
    out = path.with_suffix("")
    db = sqlite3.connect(out / "results.sqlite")
    rows = db.execute("SELECT id, status, attempts, finished_at, config, versions FROM jobs "
                      "ORDER BY position").fetchall()
    assert len(rows) == 8 and {r[1] for r in rows} <= {"emerged", "censored"}
    assert all(r[2] == 1 and '"seed"' in r[4] and '"torch"' in r[5] for r in rows)
    assert db.execute("SELECT count(*) FROM jobs WHERE status = 'emerged'").fetchone()[0] >= 4
    figures = ("emergence", "factors", "dynamics", "attention")
    for name in ("leaderboard.md", "leaderboard.csv", *(f"{f}.png" for f in figures)):
        assert (out / name).stat().st_size > 0
    table = list(csv.DictReader((out / "leaderboard.csv").open()))
    assert len(table) == 2 and all(r["lr_grid"] == "0.003 0.01" for r in table)
    assert all(0.5 <= float(r["heldout_acc"]) <= 1 and 0 <= float(r["train_acc"]) <= 1
               for r in table)
    markdown = (out / "leaderboard.md").read_text()
    assert "Every rate:" in markdown and "**Claim.** Tiny models learn tiny maps." in markdown
    chance = [line for line in markdown.splitlines() if "| *chance* |" in line]
    assert len(chance) == 1 and "| 0.500 |" in chance[0]
    assert "Bayes-optimal* |" not in markdown  # a linear map is deterministic: no ceiling row
    assert all(f"]({f}.png)" in markdown for f in figures)

    # a rerun trains nothing; a job left `running` by a killed sweep runs again
    db.execute("UPDATE jobs SET status = 'running' WHERE id = ?", (rows[0][0],))
    db.commit()
    with SweepLock(out):  # as while a sweep runs in another shell
        code, captured = cli("status", str(out))
        assert "live: a sweep process holds this directory" in captured.out
        assert f"running: {rows[0][0]} on " in captured.out
    code, captured = cli("status", str(out))
    assert code == 0 and "7/8 finished" in captured.out and f"interrupted: {rows[0][0]}" in \
        captured.out and "not running (stopped" in captured.out
    assert cli("sweep", str(path), "--no-progress")[0] == 0
    again = db.execute("SELECT id, status, attempts, finished_at FROM jobs ORDER BY position")
    again = again.fetchall()
    assert again[0][2] == 2 and again[0][1] == rows[0][1]
    assert [r[:4] for r in again[1:]] == [r[:4] for r in rows[1:]]

    (out / "leaderboard.md").unlink()
    assert cli("leaderboard", str(out))[0] == 0
    markdown_again = (out / "leaderboard.md").read_text()
    assert (out / "leaderboard.md").read_text().startswith("# tiny")
    code, captured = cli("status", str(out))
    assert "8/8 finished" in captured.out and "not running (complete)" in captured.out

    # the sweep recorded what labels and figures need: status and leaderboard load no torch
    assert '"transformer"' in db.execute(
        "SELECT value FROM meta WHERE key = 'arch_defaults'").fetchone()[0]
    for command in ("status", "leaderboard"):
        audit = ("import sys; from bench.cli import main; sys.argv = ['bench', *sys.argv[1:]]\n"
                 "try: main()\nexcept SystemExit: pass\n"
                 "print(sorted(m for m in ('torch', 'lightning', 'fla') if m in sys.modules))")
        done = subprocess.run([sys.executable, "-c", audit, command, str(out)],
                              capture_output=True, text=True, check=True)
        assert done.stdout.strip().splitlines()[-1] == "[]", (command, done.stdout)
    assert (out / "leaderboard.md").read_text() == markdown_again


def test_a_grown_spec_reuses_finished_jobs_and_the_table_shows_the_current_spec(spec_file, cli):
    one = spec_file("one", seeds=1, archs=[{"name": "mlp_mixer", "d_model": 32, "n_layers": 1}])
    out = one.parent / "grown"
    assert cli("sweep", str(one), "--out", str(out), "--no-progress")[0] == 0
    db = sqlite3.connect(out / "results.sqlite")
    first = db.execute("SELECT id, finished_at FROM jobs").fetchall()
    two = spec_file("two", seeds=2, archs=[{"name": "mlp_mixer", "d_model": 32, "n_layers": 1}])
    assert cli("sweep", str(two), "--out", str(out), "--no-progress")[0] == 0
    assert db.execute("SELECT finished_at FROM jobs WHERE id = ?", (first[0][0],)).fetchone()[0] \
        == first[0][1]
    [row] = list(csv.DictReader((out / "leaderboard.csv").open()))
    assert row["seeds"] == "2"
    # growing the seeds after results were seen is recorded and said in the table
    assert "Seeds grew after a first look**: from 1 to 2 per row" in \
        (out / "leaderboard.md").read_text()
    assert cli("sweep", str(one), "--out", str(out), "--no-progress")[0] == 0  # shrink back
    [row] = list(csv.DictReader((out / "leaderboard.csv").open()))
    assert row["seeds"] == "1"  # the other seed stays in the database, out of the table
    assert db.execute("SELECT count(*) FROM jobs").fetchone()[0] == 2


def test_reuse_copies_another_sweeps_finished_runs_of_the_same_ids_and_says_so(spec_file, cli):
    mixer = [{"name": "mlp_mixer", "d_model": 32, "n_layers": 1}]
    one = spec_file("one", seeds=1, archs=mixer)
    assert cli("sweep", str(one), "--no-progress")[0] == 0
    source = one.with_suffix("")
    # a missing or foreign source is refused in one line before anything is written
    two = spec_file("two", seeds=2, archs=mixer)
    code, captured = cli("sweep", str(two), "--reuse", str(source.parent / "nope"),
                         "--no-progress")
    assert code == 2 and "no results database" in captured.err
    assert not two.with_suffix("").exists()
    code, captured = cli("sweep", str(two), "--reuse", str(source), "--no-progress")
    assert code == 0 and "reused 1 finished run(s) of the same job ids" in captured.out
    old = sqlite3.connect(source / "results.sqlite").execute(
        "SELECT id, result, attempts, finished_at FROM jobs").fetchall()
    new = sqlite3.connect(two.with_suffix("") / "results.sqlite")
    rows = new.execute("SELECT id, result, attempts, finished_at, status FROM jobs "
                       "ORDER BY position").fetchall()
    assert [r[:4] for r in rows[:1]] == old and rows[1][0] != old[0][0]  # seed 0 copied
    assert rows[1][4] in ("emerged", "censored") and rows[1][3] > old[0][3]  # seed 1 trained
    markdown = (two.with_suffix("") / "leaderboard.md").read_text()
    assert f"**Reused runs**: 1 run(s) were copied from `{source}`" in markdown
    # a rerun reuses nothing more and keeps the note
    code, captured = cli("sweep", str(two), "--reuse", str(source), "--no-progress")
    assert code == 0 and "finished run(s) of the same job ids" not in captured.out
    assert "nothing copied" not in captured.err  # it had copied before
    assert "**Reused runs**: 1 run(s)" in (two.with_suffix("") / "leaderboard.md").read_text()
    # a source that shares no job id (another mixer) is said, not silently trained past
    other = spec_file("other", seeds=1, archs=[{**mixer[0], "d_model": 16}])
    code, captured = cli("sweep", str(other), "--reuse", str(source), "--no-progress")
    assert code == 0 and (f"warning: reuse {source}: none of its finished runs has one of these "
                          "1 job ids") in captured.err


def test_reuse_tuning_copies_only_the_tuning_runs_and_the_reported_runs_train_again(spec_file,
                                                                                      cli):
    """A rerun under a changed measurement keeps the rates its tuning runs chose: only those
    are copied; the reported runs train again, and the table says which were copied."""
    mixer = [{"name": "mlp_mixer", "d_model": 32, "n_layers": 1}]
    train = {**TINY["train"], "max_steps": 60}
    plain = spec_file("plain", seeds=1, archs=mixer, train=train)
    code, captured = cli("sweep", str(plain), "--reuse-tuning", str(plain.parent),
                         "--no-progress")
    assert code == 2 and "--reuse-tuning: tiny tunes no learning rate" in captured.err
    assert not plain.with_suffix("").exists()  # nothing written
    rated = {k: v for k, v in train.items() if k != "lr"}  # tune sets each row's rate
    tuned = {"seeds": 1, "archs": mixer, "train": rated, "tune": {"lr": [0.003, 0.01], "seeds": 1}}
    first = spec_file("first", **tuned)
    assert cli("sweep", str(first), "--no-progress")[0] == 0
    source = first.with_suffix("")
    again = spec_file("again", **tuned)
    code, captured = cli("sweep", str(again), "--reuse-tuning", str(source), "--no-progress")
    assert code == 0 and "reused 2 finished run(s) of the same job ids" in captured.out
    assert "nothing copied" not in captured.err  # the reported phase does not look there
    old = {r[0:2]: r[2:] for r in sqlite3.connect(source / "results.sqlite").execute(
        "SELECT seed, lr, id, result, finished_at FROM jobs")}
    new = {r[0:2]: r[2:] for r in sqlite3.connect(again.with_suffix("") / "results.sqlite")
           .execute("SELECT seed, lr, id, result, finished_at FROM jobs")}
    assert new.keys() == old.keys() and len(new) == 3  # two tuning runs, one reported
    for (seed, lr), (job, result, finished) in new.items():
        assert job == old[seed, lr][0]
        if seed == 1000:  # the tuning runs copied as they were
            assert (result, finished) == old[seed, lr][1:]
        else:  # the reported run trained again
            assert finished > old[seed, lr][2]
    markdown = (again.with_suffix("") / "leaderboard.md").read_text()
    assert (f"**Reused runs**: 2 run(s) were copied from `{source}`" in markdown
            and ": 0 of the reported runs and 2 not reported (tuning runs" in markdown)


def test_tune_only_runs_the_tuning_runs_and_a_later_sweep_trains_the_reported_seeds(spec_file,
                                                                                      cli):
    """A look at the tuning runs (is a row near its budget?) before any reported seed trains."""
    mixer = [{"name": "mlp_mixer", "d_model": 32, "n_layers": 1}]
    train = {k: v for k, v in {**TINY["train"], "max_steps": 60}.items() if k != "lr"}
    plain = spec_file("plain", seeds=1, archs=mixer, train={**train, "lr": 0.003})
    code, captured = cli("sweep", str(plain), "--tune-only", "--no-progress")
    assert code == 2 and "--tune-only: tiny tunes no learning rate" in captured.err
    assert not plain.with_suffix("").exists()  # nothing written
    tuned = spec_file("tuned", seeds=1, archs=mixer, train=train,
                      tune={"lr": [0.003, 0.01], "seeds": 1})
    out = tuned.with_suffix("")
    code, captured = cli("sweep", str(tuned), "--tune-only", "--no-progress")
    assert code == 0 and "tuning runs only: `bench status" in captured.out
    db = sqlite3.connect(out / "results.sqlite")
    rows = db.execute("SELECT seed, status, finished_at FROM jobs").fetchall()
    assert sorted(r[0] for r in rows) == [1000, 1000]  # the two rates' tuning runs, nothing else
    assert all(r[1] in ("emerged", "censored") for r in rows)
    assert not (out / "leaderboard.md").exists()  # no reported run to tabulate
    code, captured = cli("status", str(out))
    assert code == 0 and "2/2 finished" in captured.out
    assert "steps to emergence" in captured.out  # each rate's, or "> budget" (_steps' test)
    assert cli("sweep", str(tuned), "--no-progress")[0] == 0  # the reported seed, at its rate
    after = db.execute("SELECT seed, finished_at FROM jobs").fetchall()
    assert sorted(r[0] for r in after) == [0, 1000, 1000]
    assert {r[2] for r in rows} == {f for seed, f in after if seed == 1000}  # not retrained
    assert (out / "leaderboard.md").exists()


def test_leaderboard_and_status_of_a_directory_without_results_are_clear_errors(tmp_path, cli):
    for command in ("leaderboard", "status"):
        code, captured = cli(command, str(tmp_path))
        assert code == 2 and "no results database (results.sqlite) here" in captured.err


def test_null_rows_come_from_the_runs_recorded_references():
    """Chance and the no-context predictor always; the Bayes ceiling where perfect is out of
    reach; each the median over the row's task instances."""
    from bench.training.config import build_run_task

    def row(task: dict, seeds: list[int]) -> dict:
        runs = []
        for seed in seeds:
            cfg = load_run_config({"task": task, "seed": seed,
                                   "emergence": {"threshold": 0.9}})
            runs.append(record(references=build_run_task(cfg).references()))
        return {"task": task["name"], "architecture": "x", "job_config": {"task": task},
                "runs": runs}

    automaton = row({"name": "cellular_automaton", "n_cells": 8, "n_colors": 2, "n_rules": 4,
                     "n_states": 4}, [0, 1, 2])
    linear = row({"name": "linear_map", "state_size": 8, "sparsity": 1, "modulus": 3,
                  "n_states": 2}, [0])
    rows = with_null_rows([automaton, linear])
    names = [r["architecture"] for r in rows]
    assert names[1:4] == ["chance", "no context", "Bayes-optimal"]
    assert rows[1]["heldout_acc"] == 0.5 and 0.5 <= rows[2]["heldout_acc"] < 0.8
    assert 0.85 < rows[3]["heldout_acc"] < 1
    assert names[5:] == ["chance", "no context"]  # deterministic: no ceiling row
    assert rows[5]["heldout_acc"] == 1 / 3


def test_rows_and_job_ids_ignore_speed_only_knobs_so_older_results_still_match():
    from bench.core.rows import group_key
    from bench.training.config import load_run_config

    cfg = load_run_config(["runtime.compile=true"])
    plain = load_run_config([])
    assert cfg.job_id() == plain.job_id()
    older = plain.to_dict()
    del older["runtime"]["compile"]  # a result recorded before runtime.compile existed
    oldest = {**older, "train": {**older["train"], "compile": False}}  # in train, as it was
    del oldest["runtime"]
    assert group_key(older) == group_key(plain.to_dict()) == group_key(cfg.to_dict()) \
        == group_key(oldest)


def test_hardware_keys_leave_job_ids_and_rows_alone_so_a_gpu_rerun_matches(tmp_path):
    from bench.core.rows import group_key

    spec = tmp_path / "spec.yaml"
    spec.write_text("name: s\ntask: {name: linear_map, state_size: 12, sparsity: 1}\n"
                    "archs: [{name: mlp_mixer, d_model: 16, n_layers: 1}]\nseeds: 2\n")
    plain = expand(load_spec(spec))
    gpu = expand(load_spec(spec, ["runtime.accelerator=gpu", "runtime.devices=1",
                                  "runtime.strategy=auto"]))
    runtime = gpu[0].runtime
    assert (runtime.accelerator, runtime.devices, runtime.strategy) == ("gpu", 1, "auto")
    old = expand(load_spec(spec, ["trainer.accelerator=gpu"]))  # where it was before runtime
    assert old[0].runtime.accelerator == "gpu" and old[0].trainer == {}
    assert [j.job_id() for j in gpu] == [j.job_id() for j in plain]
    assert group_key(gpu[0].to_dict()) == group_key(plain[0].to_dict())
    # precision changes the numbers: a different experiment
    half = expand(load_spec(spec, ["trainer.precision=bf16-mixed"]))
    assert half[0].job_id() != plain[0].job_id()
    assert expand(load_spec(spec, ["seeds=3"]))[2].seed == 2  # any spec field


def test_a_sweep_still_tuning_has_no_table_yet_and_says_so(tmp_path):
    """Only tuning runs finished (or every reported job failed): one line, not a traceback."""
    from bench.analysis.leaderboard import reported, write_leaderboard
    from bench.core.errors import ConfigError

    spec = {"tune": {"lr": [1e-3, 3e-3], "seeds": 2}}
    tuning = [record(config={"seed": 1000}), record(config={"seed": 1001})]
    assert reported(tuning, spec) == [] and reported(tuning, {}) == tuning
    with pytest.raises(ConfigError, match=r"no reported run has finished yet \(2 tuning"):
        write_leaderboard(tmp_path, "x", tuning, spec)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_sweep_can_run_one_row_first(spec_file, cli):
    """--row runs only the rows whose config hash starts with it (as `bench status` shows),
    while every row of the spec stays listed (status and the table show the whole spec, the
    others pending); a hash that matches no row is one line with nothing written."""
    from bench.core.rows import group_key

    path = spec_file()
    out = path.with_suffix("")
    jobs = expand(load_spec(path))
    mixer = group_key(next(j for j in jobs if j.arch.name == "mlp_mixer").to_dict())
    code, captured = cli("sweep", str(path), "--no-progress", "--row", "ffff")
    assert code == 2 and "--row: 'ffff' matches no row of tiny; allowed: " in captured.err
    assert not out.exists()
    assert cli("sweep", str(path), "--no-progress", "--row", mixer[:6])[0] == 0
    db = sqlite3.connect(out / "results.sqlite")
    status = {arch: {s for a, s in db.execute("SELECT arch, status FROM jobs") if a == arch}
              for arch in ("mlp_mixer", "transformer")}
    assert "pending" not in status["mlp_mixer"] and status["transformer"] == {"pending"}
    code, captured = cli("status", str(out))
    assert f"| `{mixer}` |" in captured.out and "pending" in captured.out
    assert "not running (complete)" not in captured.out
    assert cli("sweep", str(path), "--no-progress")[0] == 0  # the rest later
    assert "pending" not in {r[0] for r in db.execute("SELECT status FROM jobs")}


@pytest.mark.parametrize("bad, message", [
    ("tests: [{trend: task.bogus}]", "tests: trend 'task.bogus' is not a field of every row's"),
    ("plots: [[arch.bogus]]", "plots: 'arch.bogus' is not a field of every row's arch"),
])
def test_a_huge_spec_with_a_field_no_row_has_is_refused_at_its_first_row(bad, message, tmp_path,
                                                                        monkeypatch):
    # 100 rows x 100 seeds = 10,000 jobs: refused as the first row is built, not after all
    # 100 rows (~0.06 s each) and 10,000 jobs
    import bench.sweeps.spec as spec_module

    built = []
    real = spec_module._job
    monkeypatch.setattr(spec_module, "_job", lambda *a, **k: built.append(1) or real(*a, **k))
    path = tmp_path / "big.yaml"
    path.write_text(f"name: big\ntask: {{name: linear_map, state_size: {list(range(8, 108))}, "
                    "sparsity: 1}\narchs: [{name: mlp_mixer, d_model: 16}]\nseeds: 100\n"
                    f"train: {{max_steps: 20, eval_every: 10}}\n{bad}\n")
    with pytest.raises(ConfigError, match=message):
        expand(load_spec(path))
    assert len(built) == 1
