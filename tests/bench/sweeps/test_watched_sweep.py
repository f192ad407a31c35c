"""A live sweep survives everyone who watches it: `bench status` and `load_results` polled in a
loop from other processes, and a second `bench sweep` on the same directory (refused in one
line), while the sweep runs its jobs in its own process (the local executor, where a worker's
database connection and the sweep's share one process)."""

import subprocess
import sys
import time

import pytest
import yaml

from bench.sweeps.results import ResultsDB
from tests.bench.conftest import TINY

SPEC = {**TINY, "name": "watched", "seeds": 4,
        "train": {**TINY["train"], "max_steps": 400, "eval_every": 20}}
LOAD = "import sys; from bench.api import load_results; load_results(sys.argv[1])"


@pytest.mark.slow  # CI's slowest (104 s there): readers polled in a loop beside a live sweep
def test_a_sweep_finishes_every_job_while_it_is_watched(tmp_path):
    spec = tmp_path / "watched.yaml"
    spec.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    out = tmp_path / "watched"
    bench = [sys.executable, "-m", "bench"]
    sweep = subprocess.Popen([*bench, "sweep", str(spec), "--out", str(out), "--no-progress"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    polls = refused = 0
    deadline = time.time() + 600
    while sweep.poll() is None and time.time() < deadline:
        if not (out / ResultsDB.FILENAME).exists():
            time.sleep(0.2)
            continue
        status = subprocess.run([*bench, "status", str(out)], capture_output=True, text=True)
        assert status.returncode == 0, status.stderr
        loaded = subprocess.run([sys.executable, "-c", LOAD, str(out)], capture_output=True,
                                text=True)
        assert loaded.returncode == 0 or "no finished" in loaded.stderr, loaded.stderr
        second = subprocess.run([*bench, "sweep", str(spec), "--out", str(out),
                                 "--no-progress"], capture_output=True, text=True)
        if sweep.poll() is None:  # while the first one runs, the second is refused
            assert second.returncode == 2 and "another sweep" in second.stderr, second.stderr
            refused += 1
        polls += 1
    _, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 0, err
    assert polls >= 2 and refused >= 1  # the readers really ran beside the live sweep
    db = ResultsDB(out / ResultsDB.FILENAME, read_only=True)
    try:
        counts = db.counts()
        integrity = db.conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()
    assert counts["pending"] == counts["running"] == counts["failed"] == 0
    assert sum(counts.values()) == 8 and integrity == "ok"
