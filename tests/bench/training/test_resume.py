"""Resume checkpoints: a run killed mid-way continues from its last checkpoint to the result the
uninterrupted run has, and a checkpoint never leaks into another job."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from bench.core.errors import ConfigError
from bench.measures.run import train
from bench.sweeps.executors import execute
from bench.sweeps.results import ResultsDB
from bench.training.checkpoint import resume_path
from bench.training.config import load_run_config

RUN = ["task.state_size=8", "task.sparsity=1", "task.n_states=2", "arch.name=mlp_mixer",
       "arch.d_model=16", "train.eval_every=25", "train.eval_size=128", "train.probe_size=64",
       "train.warmup_steps=20", "train.lr=3e-3", "train.max_steps=150",
       "runtime.checkpoint_every=50", "emergence.stop_early=false",
       "trainer.log_every_n_steps=1"]  # a CSV row at every step: rows after a checkpoint exist
TIMINGS = {"wall_time_s", "steps_per_s", "tokens_per_s", "wall_time_to_emergence_s"}


@pytest.mark.slow
def test_a_killed_run_resumes_to_the_uninterrupted_result(tmp_path):
    whole = train(load_run_config(RUN), tmp_path / "whole", progress=False)
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "bench", "run", *RUN, "--out", str(killed)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not resume_path(killed).is_file() and proc.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # no handler runs: a preempted node
    proc.wait()
    assert not (killed / "result.json").exists(), "the run finished before it was killed"
    step = torch.load(resume_path(killed), weights_only=True)["emergence_bench"]["step"]
    assert 50 <= step < 150

    resumed = train(load_run_config(RUN), killed, progress=False)
    assert {k: v for k, v in resumed.items() if k not in TIMINGS} == \
        {k: v for k, v in whole.items() if k not in TIMINGS}  # curves, weights' outcome, all
    assert (killed / "metrics.csv").read_text() == (tmp_path / "whole" / "metrics.csv").read_text()
    assert sorted(p.name for p in killed.iterdir()) == ["metrics.csv", "result.json"]


def fake_checkpoint(run_dir, job_id):
    resume_path(run_dir).parent.mkdir(parents=True)
    torch.save({"emergence_bench": {"job_id": job_id, "step": 50}}, resume_path(run_dir))


def test_a_checkpoint_of_another_job_is_refused_before_anything_trains(tmp_path, cli):
    fake_checkpoint(tmp_path / "r", "0123456789ab")
    code, captured = cli("run", *RUN, "--out", str(tmp_path / "r"))
    assert code == 2
    assert captured.err.strip().splitlines() == [
        f"error: --out: {tmp_path / 'r'} holds a checkpoint of job 0123456789ab, not "
        f"{load_run_config(RUN).job_id()}; choose another directory or remove "
        f"{resume_path(tmp_path / 'r')}"]
    assert sorted(p.name for p in (tmp_path / "r").rglob("*")) == ["checkpoints", "resume.ckpt"]


def test_a_sweep_retry_keeps_the_run_directory_that_holds_a_checkpoint(tmp_path):
    """The executor clears an interrupted attempt's directory unless it can resume from it; here
    the checkpoint belongs to another job, so the retry fails with that error (it was kept)."""
    cfg = load_run_config(RUN)
    job = cfg.job_id()
    db = ResultsDB(tmp_path / ResultsDB.FILENAME, create=True)
    db.sync([cfg], {"name": "retry"})
    db.close()
    fake_checkpoint(tmp_path / "runs" / job, "0123456789ab")
    summary = execute(cfg.to_dict(), str(tmp_path))
    assert summary["status"] == "failed" and "holds a checkpoint of job 0123456789ab" in \
        summary["error"]


def test_an_unreadable_checkpoint_starts_the_run_over(tmp_path):
    run_dir = tmp_path / "r"
    resume_path(run_dir).parent.mkdir(parents=True)
    resume_path(run_dir).write_bytes(b"not a checkpoint")
    cfg = load_run_config([*RUN, "train.max_steps=30"])
    with pytest.warns(UserWarning, match="unreadable .* starts at step 0"):
        result = train(cfg, run_dir, progress=False)
    assert result["steps"] == 30 and result["curves"]["step"][0] == 0
    assert not resume_path(run_dir).parent.exists()  # removed with the finished run


def test_checkpointing_is_not_part_of_the_experiment():
    ids = {load_run_config([*RUN, f"runtime.checkpoint_every={k}"]).job_id() for k in (0, 50, 500)}
    assert len(ids) == 1
    with pytest.raises(ConfigError, match="runtime.checkpoint_every: must be in 0..100000000"):
        load_run_config(["runtime.checkpoint_every=-1"])


def test_the_result_names_no_checkpoint(tmp_path):
    result = train(load_run_config([*RUN, "train.max_steps=60"]), tmp_path / "r", progress=False)
    assert json.loads((tmp_path / "r" / "result.json").read_text()) == result
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["metrics.csv", "result.json"]
