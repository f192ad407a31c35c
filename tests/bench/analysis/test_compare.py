"""`bench compare`: a mixer as one more row of a committed leaderboard, only its runs trained."""

import shutil
import sqlite3

import pytest
import yaml

from bench.sweeps.spec import load_spec
from bench.sweeps.sweep import run_sweep
from tests.bench.conftest import TINY

BOARD = {**TINY, "name": "cmpboard", "archs": [{"name": "mlp_mixer", "d_model": 32,
                                                "n_layers": 1}],
         "seeds": 2, "train": {**TINY["train"], "max_steps": 60}}


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    spec = tmp_path_factory.mktemp("board") / "cmpboard.yaml"
    spec.write_text(yaml.safe_dump(BOARD, sort_keys=False))
    run_sweep(load_spec(spec), spec.with_suffix(""), progress=False)
    return spec


def finished_at(db) -> dict[str, float]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT id, finished_at FROM jobs"))


def test_compare_trains_only_the_new_row_and_notes_its_size(board, cli, tmp_path):
    committed = finished_at(board.with_suffix("") / "results.sqlite")
    out = tmp_path / "cmp"
    code, captured = cli("compare", "arch.name=mlp_mixer", "arch.d_model=64", "arch.n_layers=1",
                         "--against", str(board), "--out", str(out), "--no-progress")
    assert code == 0, captured.err
    after = finished_at(out / "results.sqlite")
    assert {k: after[k] for k in committed} == committed  # the baselines reused, not retrained
    assert len(after) == 2 * len(committed)  # two seeds of the new row
    text = (out / "compare.md").read_text()
    assert "`mlp_mixer(d_model=32, n_layers=1)`" in text and "`mlp_mixer(n_layers=1)`" in text
    assert "size: `mlp_mixer(n_layers=1)` has" in text and "beyond ±20%" in text


def test_rerunning_a_compare_resumes_it_and_another_mixer_is_refused(board, cli, tmp_path):
    out = tmp_path / "cmp"
    args = ["arch.name=mlp_mixer", "arch.d_model=48", "arch.n_layers=1", "--against", str(board),
            "--out", str(out), "--no-progress"]
    assert cli("compare", *args)[0] == 0
    first = finished_at(out / "results.sqlite")
    db = sqlite3.connect(out / "results.sqlite")  # as if interrupted: one new run unfinished
    with db:
        undone = db.execute("SELECT id FROM jobs WHERE finished_at = ?",
                            (max(first.values()),)).fetchone()[0]
        db.execute("UPDATE jobs SET status = 'running', finished_at = NULL WHERE id = ?",
                   (undone,))
    db.close()
    code, captured = cli("compare", *args)  # the same command: resumes, trains that run only
    assert code == 0, captured.err
    again = finished_at(out / "results.sqlite")
    assert {k: v for k, v in again.items() if k != undone} == \
        {k: v for k, v in first.items() if k != undone}
    assert again[undone] is not None
    code, captured = cli("compare", "arch.name=transformer", "arch.d_model=32",
                         "arch.n_layers=1", "--against", str(board), "--out", str(out))
    assert code == 2 and "already holds a results database of another sweep" in captured.err


def test_bad_comparisons_are_one_line_and_write_nothing(board, cli, tmp_path):
    bare = tmp_path / "bare.yaml"  # a spec without committed results
    shutil.copy(board, bare)
    out = tmp_path / "cmp"
    for args, message in [
        (["arch.name=transformer", "--against", str(bare)], "--against: no committed results"),
        (["arch.name=transformer", "task.state_size=12", "--against", str(board)],
         "task: bench compare takes the committed spec's task; give only arch.* and plugins"),
        (["arch.d_model=32", "--against", str(board)], "arch.name: required"),
        (["arch.name=mlp_mixer", "arch.d_model=32", "arch.n_layers=1", "--against", str(board)],
         "arch.name: arch.name=mlp_mixer arch.d_model=32 arch.n_layers=1 is already a row of "
         f"{board} (the same resolved architecture config); nothing to compare"),
    ]:
        code, captured = cli("compare", *args, "--out", str(out), "--no-progress")
        lines = captured.err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and message in lines[0], lines
        assert not out.exists()


def test_a_leaking_plug_in_compared_against_a_board_ends_leaked(board, cli, tmp_path,
                                                                monkeypatch):
    import architectures
    from tests.bench.training.test_leak_check import AfterTraining

    monkeypatch.setattr(architectures, "ARCHITECTURES", dict(architectures.ARCHITECTURES))
    architectures.register("leaky_after_many_calls", AfterTraining)
    out = tmp_path / "cmp"
    code, captured = cli("compare", "arch.name=leaky_after_many_calls", "arch.d_model=32",
                         "--against", str(board), "--out", str(out), "--no-progress")
    assert code == 0, captured.err
    table = (out / "leaderboard.md").read_text()
    assert "0/2 (0%), **2 leaked**" in table  # on the table, never as emerged
    assert "the mixer read the future" in table


def test_a_new_row_from_another_machine_is_noted_under_the_table():
    from bench.analysis.compare import machine_notes
    from bench.core.rows import group_key
    from tests.records import record

    def run(arch, cpu):
        return record(config={"task": {"name": "linear_map"}, "arch": {"name": arch},
                              "train": {"lr": 0.001}, "seed": 0},
                      versions={"cpu": cpu, "torch_threads": "2"})

    same = [run("transformer", "EPYC"), run("mine", "EPYC")]
    new_key = group_key(same[1].config)
    assert machine_notes(same, {new_key}) == []
    other = [run("transformer", "EPYC"), run("mine", "Xeon")]
    assert machine_notes(other, {new_key}) == [
        "steps/s: the committed rows ran on EPYC, 2 threads, the new row on Xeon, 2 threads: "
        "that column compares machines, not mixers"]


def test_a_new_row_from_another_initialisation_is_noted():
    from bench.analysis.compare import init_notes
    from bench.core.rows import group_key
    from tests.records import record

    def run(arch, init=None):
        section = {"name": arch} | ({"init": init} if init else {})  # none: a committed record
        return record(config={"task": {"name": "linear_map"}, "arch": section,
                              "train": {"lr": 0.001}, "seed": 0})

    mixed = [run("transformer"), run("mine", "reference")]
    new_key = group_key(mixed[1].config)
    assert init_notes(mixed, {new_key}) == [
        "initialisation: the committed rows ran arch.init=torch, the new row "
        "arch.init=reference; the comparison then mixes the mixers with how they started "
        "(rerun with arch.init=torch to compare like with like)"]
    alike = [run("transformer"), run("mine", "torch")]
    assert init_notes(alike, {group_key(alike[1].config)}) == []


@pytest.mark.slow
def test_a_real_compare_against_the_committed_quickstart_board(cli, tmp_path):
    """End to end against the committed quickstart board (not a tiny one): its tests and
    tuning protocol apply to the merged board, its 24 finished jobs are reused untouched, and
    only the new row's 4 tuning and 8 reported runs train (an MLP-Mixer: they emerge in a few
    hundred steps)."""
    from pathlib import Path

    spec = Path(__file__).resolve().parents[3] / "leaderboards" / "quickstart.yaml"
    before = (spec.with_suffix("") / "results.sqlite").read_bytes()
    committed = finished_at(spec.with_suffix("") / "results.sqlite")
    out = tmp_path / "cmp"
    code, captured = cli("compare", "arch.name=mlp_mixer", "arch.d_model=32", "arch.n_layers=1",
                         "--against", str(spec), "--out", str(out), "--no-progress",
                         "--executor", "processes", "--workers", "2")
    assert code == 0, captured.err
    after = finished_at(out / "results.sqlite")
    assert {k: after[k] for k in committed} == committed
    assert len(after) == len(committed) + 4 + 8
    text = (out / "compare.md").read_text()
    assert text in captured.out
    rows = [line.split(" | ")[1] for line in text.splitlines() if line.startswith("| linear_map")]
    # the committed rows ran PyTorch's defaults, the new row the reference initialisation: said
    assert "initialisation: the committed rows ran arch.init=torch" in text
    assert rows[:3] == ["`mlp_mixer(init=torch)`", "`mlp_mixer(d_model=32, n_layers=1)`",
                        "`transformer(init=torch)`"]
    # the board's test runs on the merged board (the new row, at another width and depth, is a
    # series of its own there, so the committed comparison stands as it was)
    assert "## Tests" in text and "| mlp_mixer vs transformer | mlp_mixer sooner |" in text
    assert (spec.with_suffix("") / "results.sqlite").read_bytes() == before
