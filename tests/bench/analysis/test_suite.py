"""`bench suite`: a mixer against every cell of a suite tier in one resumable command, its cost
told first, its contract checked before anything is written; the suite's own rows train into the
cells' committed directories; the smoke tier reports runs and maps, a scored tier the scorecard."""

import sqlite3
from pathlib import Path

import pytest
import yaml

from tests.architectures.test_plugins import BAD_MIXERS
from tests.bench.conftest import TINY

CELL = {**TINY, "archs": [{"name": "transformer", "d_model": 32, "n_layers": 1},
                          {"name": "mlp_mixer", "d_model": 32, "n_layers": 1}],
        "seeds": 2, "train": {**TINY["train"], "max_steps": 60}}
SUITE = {"name": "mini", "tiers": {
    "smoke": {"cells": ["cells/a.yaml", "cells/b.yaml"]},
    "scored": {"cells": ["cells/a.yaml", "cells/b.yaml"]},
    "later": {"pending": "pilots first"}}}
NEW = ["arch.name=mlp_mixer", "arch.d_model=16", "arch.n_layers=1"]
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """A two-cell suite whose own rows have been trained (its committed directories)."""
    from bench.api import suite as run_suite

    root = tmp_path_factory.mktemp("suite")
    (root / "cells").mkdir()
    for name, size in (("a", 8), ("b", 6)):
        cell = {**CELL, "name": f"cell_{name}", "task": {**CELL["task"], "state_size": size}}
        (root / "cells" / f"{name}.yaml").write_text(yaml.safe_dump(cell, sort_keys=False))
    path = root / "suite.yaml"
    path.write_text(yaml.safe_dump(SUITE, sort_keys=False))
    report = run_suite(path, "smoke")["report"]
    assert report == root / "suite" / "smoke" / "smoke.md"
    return path


def finished_at(db) -> dict[str, float]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT id, finished_at FROM jobs"))


def test_the_suites_own_rows_train_into_the_cells_committed_directories(suite):
    for cell in ("a", "b"):
        assert len(finished_at(suite.parent / "cells" / cell / "results.sqlite")) == 4
    text = (suite.parent / "suite" / "smoke" / "smoke.md").read_text()
    assert "| a | transformer(d_model=32, n_layers=1) | 2 |" in text
    assert "| b | mlp_mixer(d_model=32, n_layers=1) | 2 |" in text
    assert "| 2 of 2 |" in text  # the maps measured


def test_a_mixer_trains_only_its_runs_in_every_cell_and_a_rerun_resumes(suite, cli, tmp_path):
    committed = finished_at(suite.parent / "cells" / "a" / "results.sqlite")
    out = tmp_path / "mine"
    args = ["suite", *NEW, "--suite", str(suite), "--out", str(out), "--no-progress"]
    code, captured = cli(*args)
    assert code == 0, captured.err
    assert captured.err.startswith("plan: 4 job(s) to train")  # 2 cells x 2 seeds, first
    after = finished_at(out / "a" / "results.sqlite")
    assert {k: after[k] for k in committed} == committed and len(after) == 6
    smoke = (out / "smoke.md").read_text()
    assert smoke.count("| mlp_mixer(d_model=16, n_layers=1) | 2 |") == 2  # in either cell
    assert "no verdict" in smoke
    code, captured = cli(*args)  # the same command again: nothing left to train
    assert code == 0 and captured.err.startswith("plan: 0 job(s) to train")
    assert finished_at(out / "a" / "results.sqlite") == after
    # bench site renders the user's suite directory: its report, then each cell's table
    code, captured = cli("site", "--root", str(ROOT), "--out", str(tmp_path / "site"), "--dir",
                         str(out))
    assert code == 0, captured.err
    page = (tmp_path / "site" / "mine.html").read_text()
    assert "maps measured" in page and "<summary>cell a</summary>" in page
    assert "<summary>cell b</summary>" in page


def test_a_scored_tier_writes_the_scorecard(suite, cli, tmp_path):
    out = tmp_path / "scored"
    code, captured = cli("suite", *NEW, "--suite", str(suite), "--tier", "scored", "--out",
                         str(out), "--no-progress")
    assert code == 0, captured.err
    card = (out / "scorecard.md").read_text()
    assert "## Mixers, ranked" in card and "Holm over the suite's 4 comparisons" in card
    for mixer in ("mlp_mixer(d_model=16, n_layers=1)", "mlp_mixer(d_model=32, n_layers=1)"):
        assert f"| {mixer} | 2 |" in card  # ranked, each over both cells
    assert (out / "scorecard.png").is_file() and (out / "scorecard.json").is_file()
    assert captured.out == card + "\n"


def test_bad_requests_are_one_line_and_write_nothing(suite, cli, tmp_path, monkeypatch):
    (tmp_path / "bad_mixers.py").write_text(BAD_MIXERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    for args, message in [
        (["--tier", "huge"], "--tier: unknown 'huge'; allowed: smoke, scored, later"),
        (["--tier", "later"], "--tier: later has no cells yet (pilots first)"),
        (["arch.name=bad_mixers:Leaky", "arch.d_model=32"], "arch.name: "),
        (["arch.name=mlp_mixer", "arch.d_model=32", "arch.n_layers=1"], "is already a row of"),
    ]:
        code, captured = cli("suite", *NEW[:0], *args, "--suite", str(suite), "--out", str(out),
                             "--no-progress")
        lines = [line for line in captured.err.strip().splitlines()
                 if not line.startswith(("plan:", "  row "))]
        assert code == 2 and len(lines) == 1 and message in lines[0], captured.err
        assert not out.exists()
    code, captured = cli("suite", *NEW, "--suite", str(suite), "--out", str(out), "--estimate")
    assert code == 0 and captured.err.startswith("plan: 4 job(s)") and not out.exists()
