"""`bench compare`'s preparation against every committed board, without training: the merged
board (committed rows plus the new one) passes every spec check, lists only the new row's jobs
as new, and reuses every committed job from the committed database."""

from pathlib import Path

import pytest

from bench.analysis.compare import prepare
from bench.core.errors import ConfigError
from bench.sweeps.results import FINISHED, ResultsDB
from bench.sweeps.spec import expand, load_spec

# every committed board: a spec whose results are committed with their table (a board still
# running commits its growing results.sqlite, and an interim table once it has findings)
BOARDS = sorted(p for p in Path("leaderboards").glob("*.yaml")
                if (p.with_suffix("") / "leaderboard.md").exists())
NEW = {"plug-in": ["arch.name=examples.custom_mixer:CausalConvMixer", "arch.kernel_size=4"],
       "built-in": ["arch.name=transformer", "arch.d_model=48", "arch.n_layers=1",
                 "arch.n_heads=3", "arch.head_dim=16"]}


def committed_rows(db: Path) -> set[str]:
    reader = ResultsDB(db, read_only=True)
    try:
        return {r["id"] for r in reader.rows("1 = 1")}
    finally:
        reader.close()


def complete(board: Path) -> bool:
    """Every reported job of the spec finished in its committed database (tuned or not)."""
    spec = load_spec(board)
    reader = ResultsDB(board.with_suffix("") / "results.sqlite", read_only=True)
    try:
        counts = reader.counts()
    finally:
        reader.close()
    return (not any(n for status, n in counts.items() if status not in FINISHED)
            and sum(counts.values()) >= len(expand(spec)))


@pytest.mark.parametrize("kind", NEW)
@pytest.mark.parametrize("board", BOARDS, ids=[b.stem for b in BOARDS])
def test_compare_prepares_against_every_committed_board(board, kind, tmp_path):
    if not complete(board):  # still running: refused in one line, nothing written
        with pytest.raises(ConfigError, match="finish it with bench sweep first"):
            prepare(board, NEW[kind], tmp_path / "cmp")
        assert not (tmp_path / "cmp").exists()
        return
    plan = prepare(board, NEW[kind], tmp_path / "cmp")
    spec = load_spec(board)
    assert plan.spec.archs == spec.archs and len(plan.spec.added) == 1
    assert plan.new_jobs and not set(plan.new_jobs) & set(plan.committed_jobs)
    # reused: every committed job is in the committed database (a tuned board's reported jobs
    # run at the rates its tuning runs chose, so those are matched through the tuning runs)
    n_tuning = len(spec.tune_seeds()) * len(spec.tune.get("lr", [])) * len(
        plan.committed_jobs) // (len(spec.seed_list()) + len(spec.tune_seeds())
                                 * len(spec.tune.get("lr", [])))
    reused = plan.committed_jobs[:n_tuning] if spec.tune else plan.committed_jobs
    assert set(reused) <= committed_rows(plan.committed_db)
    seeds = len(spec.seed_list()) + len(spec.tune_seeds()) * len(spec.tune.get("lr", []))
    assert len(plan.new_jobs) % seeds == 0  # whole rows: every seed (and tuning rate) of each
    assert not (tmp_path / "cmp").exists()  # preparation writes nothing
    for note in plan.notes:  # a test or plot the new row cannot join is named, not refused
        assert note.startswith("left out: the new row has no ")
