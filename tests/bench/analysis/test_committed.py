"""The committed leaderboards re-render byte-identically from their results databases: job ids
and rows hash configs, not module paths, so refactoring the code never orphans a result."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
COMMITTED = sorted(p.parent.name for p in (ROOT / "leaderboards").glob("*/leaderboard.md")
                   if (p.parent / "results.sqlite").exists())


def test_there_are_committed_leaderboards_to_check():
    assert "quickstart" in COMMITTED


@pytest.mark.slow
@pytest.mark.parametrize("name", COMMITTED)
def test_committed_leaderboard_renders_identically(name, cli, tmp_path, monkeypatch):
    from bench.analysis import plots

    # every figure is still built from the database; only its layout and PNG encoding (most of
    # the time, and checked by the figure tests) are skipped: the tables are what must match
    monkeypatch.setattr(plots, "_save", lambda fig, path, **kw: (plots.pyplot().close(fig),
                                                                Path(path).touch()))
    shutil.copy(ROOT / "leaderboards" / name / "results.sqlite", tmp_path / "results.sqlite")
    code, captured = cli("leaderboard", str(tmp_path))
    assert code == 0, captured.err
    for table in ("leaderboard.md", "leaderboard.csv"):
        assert (tmp_path / table).read_text() == \
            (ROOT / "leaderboards" / name / table).read_text(), f"{name}/{table} changed"


@pytest.mark.parametrize("name", [n for n in ("quickstart", "circuits") if n in COMMITTED])
def test_rendering_a_committed_leaderboard_loads_no_torch(name, tmp_path):
    """Every committed database records its ground-truth patterns, architecture defaults and head
    screens, so the tables and every figure the board shows come from the database alone."""
    shutil.copy(ROOT / "leaderboards" / name / "results.sqlite", tmp_path / "results.sqlite")
    audit = ("import sys; from bench.cli import main\n"
             f"sys.argv = ['bench', 'leaderboard', {str(tmp_path)!r}]\n"
             "try: main()\nexcept SystemExit: pass\n"
             "print(sorted(m for m in ('torch', 'lightning', 'fla') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", audit], capture_output=True, text=True, check=True)
    figures = re.findall(r"^!\[[^]]*\]\(([\w.]+\.png)\)$",
                         (ROOT / "leaderboards" / name / "leaderboard.md").read_text(), re.M)
    assert "attention.png" in figures
    assert [f for f in figures if not (tmp_path / f).exists()] == []
    assert done.stdout.strip().splitlines()[-1] == "[]"
