"""The Python API: the functions the commands call, usable from a script or a notebook."""

import subprocess
import sys
from pathlib import Path

import pytest

from bench.api import load_results, train
from bench.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_load_results_gives_one_row_per_run_with_the_tables_numbers():
    df = load_results(ROOT / "leaderboards" / "quickstart")
    assert len(df) == 24 and df.tuning.sum() == 8  # 2 archs x (2 rates x 2 tuning + 8 seeds)
    reported = df[~df.tuning]
    assert reported.groupby("arch").size().to_dict() == {"mlp_mixer": 8, "transformer": 8}
    # every reported seed emerged, so the plain median is the table's Kaplan-Meier median
    assert (reported.status == "emerged").all()
    assert reported.groupby("arch").steps_to_emergence.median().to_dict() == {
        "mlp_mixer": 100, "transformer": 425}
    assert set(reported["task.state_size"]) == {12} and "arch.n_heads" in df.columns


def test_train_returns_the_result_and_writes_the_run(tmp_path):
    result = train({"task": {"state_size": 4, "n_states": 3},
                    "arch": {"name": "mlp_mixer", "d_model": 16, "n_layers": 1},
                    "train": {"max_steps": 20, "eval_every": 10, "eval_size": 32}},
                   out=tmp_path / "run")
    assert result["status"] in ("emerged", "censored") and result["steps"] <= 20
    assert (tmp_path / "run" / "result.json").exists()
    with pytest.raises(ConfigError, match="arch.d_model: must be >= 1"):
        train(["arch.d_model=0"], out=tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


def test_importing_the_api_loads_no_torch():
    code = ("import sys, bench.api; "
            "print(sorted(m for m in ('torch', 'lightning', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_command_but_the_inspection_tools_goes_through_the_api():
    # the CLI parses and prints; bench.api does (ls, task: the registries; perf: a tool)
    import ast

    import bench.api

    tree = ast.parse((ROOT / "bench" / "cli.py").read_text())
    commands = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
                "app.command" in ast.unparse(d) for d in node.decorator_list):
            commands[node.name] = {a.name for n in ast.walk(node) if isinstance(n, ast.ImportFrom)
                                   and n.module == "api" for a in n.names}
    assert set(commands) >= {"run", "sweep", "reproduce", "compare", "leaderboard", "status",
                             "patch", "circuits", "site", "describe", "ls", "task", "perf"}
    for name, imported in commands.items():
        if name in ("ls", "task", "perf"):
            continue
        assert imported, f"bench {name} does not call bench.api"
        assert all(callable(getattr(bench.api, a)) for a in imported)


def test_the_api_renders_and_reports_a_committed_board(tmp_path):
    import shutil

    from bench.api import leaderboard, status

    board = tmp_path / "quickstart"
    board.mkdir()
    shutil.copy(ROOT / "leaderboards" / "quickstart" / "results.sqlite", board)
    path = leaderboard(board)
    assert path.read_text() == (ROOT / "leaderboards" / "quickstart" / "leaderboard.md").read_text()
    report = status(board)
    assert report["counts"]["emerged"] == 24 and "quickstart" in report["text"]
    with pytest.raises(ConfigError, match="no finished runs|no results database|holds no"):
        leaderboard(tmp_path / "nothing")
