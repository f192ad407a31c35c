"""Leaderboard columns are data: a new statistic is one entry, and the table and the CSV follow."""

import csv

from bench.analysis import columns
from bench.analysis.columns import Column
from bench.analysis.leaderboard import write_leaderboard
from tests.records import record


def test_a_new_column_is_one_entry_in_the_table_and_the_csv(tmp_path, monkeypatch):
    runs = [record(job_id=str(s), status="emerged", steps_to_emergence=100 * (s + 1),
                   budget_steps=1000, steps=100 * (s + 1), steps_per_s=10.0, n_params=5,
                   config={"seed": s, "task": {"name": "linear_map", "state_size": 4},
                           "arch": {"name": "mlp_mixer"}, "train": {"lr": 0.01, "eval_every": 50}})
            for s in range(3)]
    longest = Column("longest_steps", lambda runs, km: max(r.steps for r in runs),
                     header="longest run", cell=lambda r: f"{r['longest_steps']:,}",
                     table_rank=13.5)
    monkeypatch.setattr(columns, "COLUMNS", [*columns.COLUMNS, longest])
    write_leaderboard(tmp_path, "t", runs, {"arch_defaults": {"mlp_mixer": {}}})
    table = (tmp_path / "leaderboard.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| task"))
    assert "| steps/s | longest run | config |" in header
    assert "| 10.0 | 300 | `" in table
    with (tmp_path / "leaderboard.csv").open() as f:
        (row,) = csv.DictReader(f)
    assert row["longest_steps"] == "300" and list(row)[-1] == "longest_steps"
