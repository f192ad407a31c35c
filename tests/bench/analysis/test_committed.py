"""The committed leaderboards re-render byte-identically from their results databases: job ids
and rows hash configs, not module paths, so refactoring the code never orphans a result."""

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = sorted(p.parent.name for p in (ROOT / "leaderboards").glob("*/leaderboard.md")
                   if (p.parent / "results.sqlite").exists())


def test_there_are_committed_leaderboards_to_check():
    assert "quickstart" in COMMITTED


@pytest.mark.slow
@pytest.mark.parametrize("name", COMMITTED)
def test_committed_leaderboard_renders_identically(name, cli, tmp_path):
    shutil.copy(ROOT / "leaderboards" / name / "results.sqlite", tmp_path / "results.sqlite")
    code, captured = cli("leaderboard", str(tmp_path))
    assert code == 0, captured.err
    for table in ("leaderboard.md", "leaderboard.csv"):
        assert (tmp_path / table).read_text() == \
            (ROOT / "leaderboards" / name / table).read_text(), f"{name}/{table} changed"
