"""The results database: concurrent writers, and refusing files it did not make."""

import multiprocessing as mp
import random
import sqlite3

import pytest

from bench.core.errors import ConfigError
from bench.sweeps.results import ResultsDB
from bench.training.config import load_run_config

N_WORKERS, PER_WORKER = 6, 15


def _jobs(n: int):
    return [load_run_config({"seed": s}) for s in range(n)]


def _worker(path: str, ids: list[str]) -> None:
    db = ResultsDB(path)
    for job_id in ids:
        db.claim(job_id)
        db.finish(job_id, {"status": "emerged", "steps_to_emergence": 10, "steps": 20,
                           "wall_time_s": 1.0, "steps_per_s": 20.0, "versions": {"x": "1"}})
    db.close()


def test_many_processes_write_at_once_and_nothing_is_lost(tmp_path):
    path = tmp_path / "results.sqlite"
    jobs = _jobs(N_WORKERS * PER_WORKER)
    db = ResultsDB(path, create=True)
    db.sync(jobs, {"name": "concurrent"})
    ids = [j.job_id() for j in jobs]
    ctx = mp.get_context("fork")  # the workers only touch SQLite; fork starts them fast
    procs = [ctx.Process(target=_worker, args=(str(path), ids[i::N_WORKERS]))
             for i in range(N_WORKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * N_WORKERS
    assert db.counts()["emerged"] == len(ids)
    rows = db.rows()
    assert [r["id"] for r in rows] == ids and all(r["attempts"] == 1 for r in rows)
    assert db.meta("name") == "concurrent"


def _refused_and_untouched(path, message: str) -> None:
    before = path.read_bytes()
    with pytest.raises(ConfigError, match=message):
        ResultsDB(path, create=True)
    assert path.read_bytes() == before


def test_a_file_that_is_not_sqlite_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "results.sqlite"
    path.write_bytes(b"these are not the results you are looking for\n" * 10)
    _refused_and_untouched(path, "not an SQLite file .corrupt or foreign.; refusing")


def test_a_foreign_sqlite_database_is_refused_and_left_alone(tmp_path):
    path = tmp_path / "results.sqlite"
    other = sqlite3.connect(path)
    other.execute("CREATE TABLE invoices (id INTEGER)")
    other.commit()
    other.close()
    _refused_and_untouched(path, "an SQLite database of something else")


def test_a_truncated_database_is_a_clear_error(tmp_path):
    path = tmp_path / "results.sqlite"
    db = ResultsDB(path, create=True)
    db.sync(_jobs(3), {"name": "x"})
    db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = path.read_bytes()
    path.write_bytes(data[:100] + b"\x00" * 50 + data[150:1500])
    with pytest.raises(ConfigError, match="results.sqlite: not a readable results database"):
        ResultsDB(path).rows()


def _finished_db(path):
    db = ResultsDB(path, create=True)
    jobs = _jobs(40)
    db.sync(jobs, {"name": "x"})
    for job in jobs:
        db.finish(job.job_id(), {"status": "emerged", "steps_to_emergence": 10, "steps": 20,
                                 "wall_time_s": 1.0, "steps_per_s": 20.0, "versions": {}})
    db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db


@pytest.mark.parametrize("command", ["status", "leaderboard"])
def test_garbage_pages_behind_a_good_header_are_one_line_and_left_alone(command, tmp_path, cli):
    board = tmp_path / "board"
    path = board / "results.sqlite"
    board.mkdir()
    _finished_db(path).close()
    data = bytearray(path.read_bytes())
    rng = random.Random(0)
    data[8192:] = bytes(rng.randrange(256) for _ in range(len(data) - 8192))  # pages 3 on
    path.write_bytes(bytes(data))
    code, captured = cli(command, str(board))
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(
        f"error: {path}: a damaged results database"), lines
    assert path.read_bytes() == bytes(data)
    assert sorted(p.name for p in board.iterdir() if p.suffix != ".sqlite-wal"
                  and not p.name.endswith("-shm")) == ["results.sqlite"]


def test_a_row_whose_result_is_not_json_is_a_damaged_database(tmp_path):
    db = _finished_db(tmp_path / "results.sqlite")
    db.conn.execute("UPDATE jobs SET result = 'garbage' WHERE position = 3")
    with pytest.raises(ConfigError, match="a damaged results database .a result that is not JSON"):
        db.results()
