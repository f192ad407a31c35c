"""Ctrl-C stops a sweep cleanly: a real SIGINT to the whole process group (as a terminal sends
it) of a `processes` sweep stops every worker within seconds, puts the running jobs back to
pending with their resume checkpoints, prints one line and exits 130; the same command resumes."""

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# random targets: nothing to learn, so no run emerges and stops before the Ctrl-C
SPEC = """name: sig
task: {name: linear_map, state_size: 12, sparsity: 2, n_states: 2, random_targets: true}
archs:
  - {name: transformer, d_model: 16, n_layers: 1}
seeds: 3
train: {max_steps: 100000, eval_every: 100, checkpoint_every: 20, eval_size: 64}
"""


def as_a_terminal_starts_it() -> None:
    """A foreground job of an interactive shell has SIGINT at its default; a job started in the
    background by a non-interactive shell (CI, `nohup ... &`) inherits it ignored, and Python then
    keeps it ignored: such a sweep rightly ignores Ctrl-C, so the test restores the default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sweep(tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench", "sweep", "s.yaml", "--out", "out", "--executor",
         "processes", "--workers", "2", "--no-progress"], cwd=tmp_path, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        preexec_fn=as_a_terminal_starts_it,
        env={**os.environ, "PYTHONPATH": str(ROOT)})


def statuses(tmp_path: Path) -> list[str]:
    """The job statuses of the sweep in `tmp_path`/out, or of the sweep directory `tmp_path`."""
    db = tmp_path / "out" / "results.sqlite"
    db = db if db.exists() or not (tmp_path / "results.sqlite").exists() else \
        tmp_path / "results.sqlite"
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [s for (s,) in conn.execute("SELECT status FROM jobs")]


def wait_for(predicate, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if predicate():
                return
        except sqlite3.OperationalError:  # the sweep is creating it
            pass
        time.sleep(0.5)
    raise AssertionError("timed out")


@pytest.mark.slow
def test_ctrl_c_stops_the_workers_requeues_and_a_rerun_resumes(tmp_path):
    (tmp_path / "s.yaml").write_text(SPEC)
    proc = sweep(tmp_path)
    wait_for(lambda: statuses(tmp_path).count("running") >= 2, 180)
    runs = tmp_path / "out" / "runs"
    wait_for(lambda: any(runs.glob("*/checkpoints/resume.ckpt")), 120)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    start = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - start < 60  # seconds, not a hang (a loaded CI machine: margin)
    assert proc.returncode == 130, err
    # after the plan it printed first: its line, no traceback
    # (multiprocessing's resource tracker may add its own warning about the terminated
    # workers' semaphores after it)
    assert any(re.fullmatch(r"interrupted: [23] running job\(s\) back to pending .*", line)
               for line in err.strip().splitlines())
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert set(statuses(tmp_path)) == {"pending"}
    assert any(runs.glob("*/checkpoints/resume.ckpt"))  # the resume checkpoints are kept
    rerun = sweep(tmp_path)  # resumes: the same jobs run again
    wait_for(lambda: "running" in statuses(tmp_path), 180)
    os.killpg(rerun.pid, signal.SIGINT)
    rerun.communicate(timeout=60)
    assert rerun.returncode == 130


MUTE = """
from torch import nn


class Mute(nn.Module):
    \"\"\"Causal and trainable, but reads nothing: a mixer that never emerges.\"\"\"

    def __init__(self, d_model: int, seq_len: int, layer_idx: int):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        return 0.0 * self.proj(x)
"""
CELL = """name: cell
task: {name: linear_map, state_size: 8, sparsity: 1, n_states: 2}
archs:
  - {name: transformer, d_model: 32, n_layers: 1}
seeds: 2
train: {max_steps: 100000, batch_size: 32, lr: 0.01, eval_every: 50, eval_size: 64}
runtime: {checkpoint_every: 20}
"""


@pytest.mark.slow
def test_ctrl_c_stops_a_suite_run_and_the_same_command_resumes_it(tmp_path):
    """The suite's (and so compare's) runs stop as a sweep's: the built-in rows emerge at once,
    the mute mixer never does, Ctrl-C ends the command with its line and 130."""
    from bench.api import suite

    (tmp_path / "mute.py").write_text(MUTE)
    (tmp_path / "cells").mkdir()
    (tmp_path / "cells" / "a.yaml").write_text(CELL)
    (tmp_path / "suite.yaml").write_text("name: s\ntiers: {smoke: {cells: [cells/a.yaml]}}\n")
    suite(tmp_path / "suite.yaml")  # the suite's own rows: they emerge and stop early
    command = [sys.executable, "-m", "bench", "suite", "arch.name=mute:Mute", "arch.d_model=32",
               "arch.n_layers=1", "--suite", "suite.yaml", "--out", "mine", "--executor",
               "processes", "--workers", "2", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{tmp_path}"}

    def start() -> subprocess.Popen:
        return subprocess.Popen(command, cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=as_a_terminal_starts_it, env=env)

    cell = tmp_path / "mine" / "a"
    for attempt in range(2):  # the second: the same command resumes, then stops again
        proc = start()
        wait_for(lambda: statuses(cell).count("running") >= 2, 180)
        wait_for(lambda: any((cell / "runs").glob("*/checkpoints/resume.ckpt")), 120)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert any(line.startswith("interrupted: 2 running job(s) back to pending")
                   for line in err.splitlines()), err
        assert "Traceback" not in err
        assert sorted(statuses(cell)) == ["emerged", "emerged", "pending", "pending"]
