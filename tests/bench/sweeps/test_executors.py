"""Every executor gives the same results; faults are recorded; a SIGKILLed sweep resumes exactly."""

import csv
import importlib.util
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from bench.cli import main
from tests.bench.conftest import TINY

ROOT = Path(__file__).resolve().parents[3]
ONE_ARCH = [{"name": "mlp_mixer", "d_model": 32, "n_layers": 1}]


def outcomes(out) -> list[tuple]:
    db = sqlite3.connect(out / "results.sqlite")
    try:
        return db.execute("SELECT id, status, steps_to_emergence, steps FROM jobs "
                          "WHERE in_spec = 1 ORDER BY position").fetchall()
    finally:
        db.close()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Runs in this process use one thread, as every worker of the processes executor does on
    2 cores: a different thread count changes the last digits of every step, and on some CPUs
    (AMD EPYC here, 2026-12-01) that moves a seed's emergence step by evaluations."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# Columns read off the curves' exact values: executors that run with other thread counts (slurm,
# ray) move the last digits, and a value near the 10% line moves the plateau's end (width, gap).
THREAD_SENSITIVE = ("steps_per_s", "median_width", "width_note", "gap", "train_acc",
                    "heldout_acc")


def table(out) -> list[dict]:
    """The leaderboard without its timing and curve-sensitive columns."""
    rows = list(csv.DictReader((out / "leaderboard.csv").open()))
    return [{k: v for k, v in r.items() if k not in THREAD_SENSITIVE} for r in rows]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The tiny sweep, run uninterrupted in this process by the local executor."""
    path = tmp_path_factory.mktemp("reference") / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, "seeds": 3}))
    argv, sys.argv = sys.argv, ["bench", "sweep", str(path), "--no-progress"]
    try:
        main()
    except SystemExit as e:
        assert not e.code
    finally:
        sys.argv = argv
    return path


def test_processes_executor_matches_local(reference, cli, tmp_path):
    out = tmp_path / "p"
    code, _ = cli("sweep", str(reference), "--out", str(out), "--executor", "processes",
                  "--workers", "2", "--no-progress")
    assert code == 0
    ref = reference.with_suffix("")
    assert outcomes(out) == outcomes(ref) and table(out) == table(ref)
    workers = {w for (w,) in sqlite3.connect(out / "results.sqlite").execute(
        "SELECT worker FROM jobs")}
    assert len(workers) == 2 and str(os.getpid()) not in " ".join(workers)  # two other processes


def test_workers_spread_over_the_gpus_several_per_device_and_share_the_cores():
    from bench.sweeps.executors import placement

    gpus = ["2", "5"]  # e.g. CUDA_VISIBLE_DEVICES=2,5
    assert [placement(k, 4, gpus, 16) for k in range(4)] == [("2", 4), ("5", 4), ("2", 4),
                                                             ("5", 4)]
    assert placement(0, 3, [], 2) == (None, 1)  # CPU only: at least one thread each


@pytest.mark.parametrize("cluster, threads", [("local", 4), ("slurm", 0)])
def test_a_local_slurm_array_shares_the_cores_and_a_cluster_task_keeps_its_own(
        monkeypatch, tmp_path, cluster, threads):
    """Array tasks on this machine get #cores / workers threads, as the processes executor's
    workers (else two tasks at torch's default oversubscribe the cores and run at another thread
    count than a processes sweep); on a cluster the task's own allocation decides (0)."""
    from bench.sweeps import executors

    submitted = {}

    class Array:  # submitit's executor: records what would be submitted, runs nothing
        def map_array(self, fn, *columns):
            submitted.update(fn=fn, columns=columns)
            return []

    monkeypatch.setattr(executors, "_slurm_executor", lambda *args: Array())
    monkeypatch.setattr(executors.os, "cpu_count", lambda: 8)
    assert list(executors.run_slurm([{"a": 1}, {"a": 2}], tmp_path, 2,
                                    {"cluster": cluster})) == []
    assert submitted["fn"] is executors._execute_with_threads
    assert submitted["columns"][2] == [threads, threads]


@pytest.mark.slow
def test_slurm_executor_runs_a_job_array_through_submitit(spec_file, cli, tmp_path):
    path = spec_file(archs=ONE_ARCH)
    local, out = tmp_path / "local", tmp_path / "slurm"
    assert cli("sweep", str(path), "--out", str(local), "--no-progress")[0] == 0
    code, _ = cli("sweep", str(path), "--out", str(out), "--executor", "slurm", "--workers", "2",
                  "-O", "cluster=local", "-O", "timeout_min=10", "--no-progress")
    assert code == 0 and outcomes(out) == outcomes(local)
    assert any((out / "slurm").rglob("*_log.out"))  # submitit's per-task logs


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed")
def test_ray_executor_on_a_local_instance(spec_file, cli, tmp_path):
    path = spec_file(archs=ONE_ARCH)
    local, out = tmp_path / "local", tmp_path / "ray"
    assert cli("sweep", str(path), "--out", str(local), "--no-progress")[0] == 0
    code, _ = cli("sweep", str(path), "--out", str(out), "--executor", "ray", "--workers", "2",
                  "--no-progress")
    import ray

    ray.shutdown()
    assert code == 0 and outcomes(out) == outcomes(local)


FAULTY = '''
import torch
from torch import nn


class Faulty(nn.Module):
    """Causal (token-wise) and fine for a few steps, then raises while training."""

    def __init__(self, d_model: int, seq_len: int, layer_idx: int, *, fail_after: int = 80):
        super().__init__()
        self.proj, self.fail_after, self.calls = nn.Linear(d_model, d_model), fail_after, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and torch.is_grad_enabled():
            self.calls += 1
            if self.calls > self.fail_after:
                raise RuntimeError("simulated fault in the mixer")
        return self.proj(x)
'''


def test_a_job_that_raises_is_recorded_and_the_sweep_goes_on(spec_file, cli, tmp_path,
                                                               monkeypatch):
    (tmp_path / "faulty_mixer.py").write_text(textwrap.dedent(FAULTY))
    monkeypatch.syspath_prepend(str(tmp_path))
    path = spec_file(seeds=1, archs=[{"name": "faulty_mixer:Faulty", "d_model": 32},
                                     *ONE_ARCH])
    code, captured = cli("sweep", str(path), "--no-progress")
    assert code == 1
    assert "1 job(s) failed" in captured.err and "1 failed" in captured.out
    rows = sqlite3.connect(path.with_suffix("") / "results.sqlite").execute(
        "SELECT arch, status, error FROM jobs ORDER BY position").fetchall()
    assert rows[0][1] == "failed" and "RuntimeError: simulated fault in the mixer" in rows[0][2]
    assert rows[1][1] in ("emerged", "censored") and rows[1][2] is None
    code, captured = cli("status", str(path.with_suffix("")))
    assert "failed: " in captured.out and "simulated fault in the mixer" in captured.out
    # the leaderboard holds the job that finished
    assert [r["architecture"] for r in table(path.with_suffix(""))] == [
        "mlp_mixer(d_model=32, n_layers=1)"]


def _sweep(spec, out) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bench", "sweep", str(spec), "--out", str(out),
                             "--no-progress"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})  # as the reference


def _finished(out) -> int:
    try:
        # read-only: connecting read-write would create an empty file the sweep then trips on
        db = sqlite3.connect(f"file:{out / 'results.sqlite'}?mode=ro", uri=True, timeout=1)
        try:
            n = db.execute("SELECT count(*) FROM jobs WHERE status IN ('emerged', 'censored')")
            return n.fetchone()[0]
        finally:
            db.close()
    except sqlite3.OperationalError:  # not created yet
        return 0


@pytest.mark.slow
def test_a_sweep_killed_with_sigkill_resumes_to_exactly_the_uninterrupted_results(reference,
                                                                                 tmp_path):
    out, rng = tmp_path / "killed", random.Random(0)
    # kill 1: just after the first job is recorded (plus a random fraction of a second)
    proc, deadline = _sweep(reference, out), time.time() + 300
    while _finished(out) < 1 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(rng.uniform(0, 0.5))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = _finished(out)
    assert 1 <= first < 6, "the kill must land mid-sweep"
    # kill 2: at an arbitrary moment of the rerun (starting up, training or writing)
    proc = _sweep(reference, out)
    time.sleep(rng.uniform(2, 6))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # the last rerun finishes the sweep
    assert _sweep(reference, out).wait(timeout=300) == 0
    ref = reference.with_suffix("")
    assert outcomes(out) == outcomes(ref)  # none lost, none duplicated, same outcomes
    assert table(out) == table(ref)


def test_processes_place_each_worker_on_its_gpu_and_the_trainer_takes_it(monkeypatch, tmp_path):
    """A faked two-GPU machine: workers see GPUs 0, 1, 0, ... and a run's Trainer defaults to
    accelerator auto (Lightning's choice: the GPU the worker sees), one device."""
    import multiprocessing

    import lightning as L
    import torch

    from bench.sweeps import executors
    from bench.training.config import load_run_config
    from bench.training.run import build_trainer

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # restored after the test
    monkeypatch.setattr(executors, "_die_with_parent", lambda: None)
    threads = torch.get_num_threads()
    slot, seen = multiprocessing.Value("i", 0), []
    try:
        for _ in range(3):
            executors._init_worker(slot, 3, ["0", "1"])
            seen.append(os.environ["CUDA_VISIBLE_DEVICES"])
    finally:
        torch.set_num_threads(threads)
    assert seen == ["0", "1", "0"]
    captured = {}
    monkeypatch.setattr(L, "Trainer", lambda **kwargs: captured.update(kwargs))
    build_trainer(load_run_config([]), tmp_path, [], progress=False)
    assert captured["accelerator"] == "auto" and captured["devices"] == 1
    build_trainer(load_run_config(["runtime.accelerator=gpu"]), tmp_path, [], progress=False)
    assert captured["accelerator"] == "gpu"


REGISTERING = textwrap.dedent('''
    import multiprocessing

    from architectures import register
    from examples.custom_mixer import CausalConvMixer

    if {fail_in_workers} and multiprocessing.parent_process() is not None:
        raise ImportError("my_mixers is not installed on this node")
    register("{name}", CausalConvMixer)
''')


@pytest.mark.slow
@pytest.mark.parametrize("fail_in_workers", [False, True])
def test_a_registered_plugin_reaches_every_worker(fail_in_workers, spec_file, cli, tmp_path,
                                                   monkeypatch):
    """`plugins: [module]` is imported in every worker, so a name registered there works under
    the processes executor; a module that fails to import in a worker fails its jobs with the
    error, and the sweep still records every job."""
    name = f"causal_conv_{int(fail_in_workers)}"
    module = f"my_mixers_{int(fail_in_workers)}"
    (tmp_path / f"{module}.py").write_text(REGISTERING.format(name=name,
                                                              fail_in_workers=fail_in_workers))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(ROOT))  # examples/ for the mixer
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{ROOT}")
    spec = spec_file(archs=[{"name": name, "d_model": 32, "n_layers": 1}], plugins=[module],
                     train={**TINY["train"], "max_steps": 40})
    out = tmp_path / "out"
    from architectures import ARCHITECTURES

    before = dict(ARCHITECTURES)
    try:
        code, captured = cli("sweep", str(spec), "--out", str(out), "--executor", "processes",
                             "--workers", "2", "--no-progress")
    finally:  # the registration ran in this process too: later tests see the plain registry
        ARCHITECTURES.clear()
        ARCHITECTURES.update(before)
    rows = sqlite3.connect(out / "results.sqlite").execute(
        "SELECT status, error, config FROM jobs").fetchall()
    assert len(rows) == 2
    if fail_in_workers:
        assert code == 1 and "cannot import (my_mixers is not installed on this node)" in (
            captured.out + captured.err)
        assert all(s == "failed" and "not installed on this node" in e for s, e, _ in rows)
    else:
        assert code == 0 and all(s in ("emerged", "censored") for s, _, _ in rows)
        assert f"`{name}(d_model=32, n_layers=1)`" in (out / "leaderboard.md").read_text()


def test_plugins_are_not_part_of_a_job_id(tmp_path, monkeypatch):
    from bench.training.config import load_run_config

    (tmp_path / "empty_plugin.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    plain = load_run_config(["arch.d_model=32"])
    with_plugin = load_run_config(["arch.d_model=32", "plugins=[empty_plugin]"])
    assert with_plugin.plugins == ["empty_plugin"] and with_plugin.job_id() == plain.job_id()
