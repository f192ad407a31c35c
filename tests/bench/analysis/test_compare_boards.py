"""`bench compare`'s preparation against every committed board, without training: the merged
board (committed rows plus the new one) passes every spec check, lists only the new row's jobs
as new, and reuses every committed job from the committed database."""

from pathlib import Path

import pytest

from bench.analysis.compare import prepare
from bench.sweeps.results import ResultsDB
from bench.sweeps.spec import load_spec

# every committed board: a spec whose results are committed with their table (a board still
# running has only its growing results.sqlite, and nothing to compare against yet)
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


@pytest.mark.parametrize("kind", NEW)
@pytest.mark.parametrize("board", BOARDS, ids=[b.stem for b in BOARDS])
def test_compare_prepares_against_every_committed_board(board, kind, tmp_path):
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
