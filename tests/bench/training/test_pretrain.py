"""Two-phase runs: a warm-up on another task hands over the weights its transfer set names, the
target run counts its own steps only, job ids include the warm-up (and only a warm-up), and a
transfer that cannot be mapped is one line with nothing written."""

import json
import math

import lightning as L
import pytest
import torch

from bench.analysis.warmups import saved
from bench.core.errors import ConfigError
from bench.core.rows import job_id
from bench.sweeps.spec import expand, load_spec
from bench.training.config import load_run_config
from bench.training.lightning_module import EmergenceModule
from bench.training.pretrain import warm_up
from bench.training.run import build_run_task, trainer_options

TARGET = ["task.state_size=6", "task.sparsity=1", "task.n_states=2", "arch.d_model=32",
          "arch.n_layers=1", "train.eval_every=25", "train.eval_size=128",
          "train.batch_size=32", "train.warmup_steps=10", "seed=3"]
WARM = ["pretrain.task.name=dyck", "pretrain.task.length=12", "pretrain.steps=30",
        "pretrain.lr=0.01"]


def built(overrides):
    cfg = load_run_config(overrides)
    task = build_run_task(cfg)
    L.seed_everything(cfg.seed, verbose=False)
    return cfg, EmergenceModule(cfg.arch, cfg.train, task)


def test_job_ids_change_with_a_warm_up_and_only_with_one():
    scratch = load_run_config(TARGET)
    as_before = {k: v for k, v in scratch.to_dict().items() if k != "pretrain"}
    assert scratch.job_id() == job_id(as_before)  # results from before the field still match
    assert load_run_config([*TARGET, "pretrain=none"]).job_id() == scratch.job_id()
    warm = load_run_config([*TARGET, *WARM])
    longer = load_run_config([*TARGET, *WARM[:-2], "pretrain.steps=60", "pretrain.lr=0.01"])
    assert len({scratch.job_id(), warm.job_id(), longer.job_id()}) == 3


def test_the_body_transfers_and_everything_else_starts_as_from_scratch(tmp_path):
    cfg, module = built([*TARGET, *WARM])
    _, scratch = built(TARGET)
    before = {n: p.detach().clone() for n, p in module.model.named_parameters()}
    record = warm_up(cfg, module, tmp_path, {**trainer_options(cfg, False), "accelerator": "cpu"})
    body = [n for n in before if not n.startswith(("embed.", "pos", "head."))]
    assert record["transferred"] == body and record["transfer"] == "body"
    for name, param in module.model.named_parameters():
        fresh = dict(scratch.model.named_parameters())[name]
        if name in body:
            assert not torch.equal(param, before[name]), name  # the warm-up's weights
        else:
            assert torch.equal(param, fresh), name  # exactly the from-scratch initialisation
    assert record["steps"] == 30 and record["tokens"] == 30 * 32 * 12
    assert record["wall_time_s"] > 0 and record["heldout_token_acc"] is not None
    assert json.loads((tmp_path / "pretrain.json").read_text()) == record


def test_all_weights_transfer_between_tasks_of_one_shape(tmp_path):
    warm = ["pretrain.task.name=linear_map", "pretrain.task.state_size=6",
            "pretrain.task.sparsity=2", "pretrain.task.n_states=2", "pretrain.steps=20",
            "pretrain.transfer=all"]
    cfg, module = built([*TARGET, *warm])
    record = warm_up(cfg, module, tmp_path, {**trainer_options(cfg, False), "accelerator": "cpu"})
    assert record["transferred"] == [n for n, _ in module.model.named_parameters()]
    assert record["fresh_params"] == 0


def test_a_warmed_run_counts_target_steps_and_records_the_warm_up(tmp_path, cli):
    out = tmp_path / "run"
    code, captured = cli("run", *TARGET, *WARM, "train.max_steps=50", "--out", str(out),
                         "--no-progress")
    assert code == 0, captured.err
    result = json.loads((out / "result.json").read_text())
    assert result["steps"] == 50 and result["pretrain"]["steps"] == 30
    assert result["config"]["pretrain"]["task"]["name"] == "dyck"
    assert result["job_id"] == load_run_config([*TARGET, *WARM, "train.max_steps=50"]).job_id()


@pytest.mark.parametrize("extra, message", [
    (["pretrain.transfer=all"], "pretrain.transfer: embed.weight is (4, 32) in the warm-up "
     "model (dyck, vocab 4, length 11) and (2, 32) in the target's"),
    (["pretrain.transfer=mixer"], "pretrain.transfer: 'mixer' names no parameter of "
     "transformer"),
    (["pretrain.transfer=blocks[0"], "pretrain.transfer: must be all, body or a regular "
     "expression"),
    (["pretrain.steps=0"], "pretrain.steps: must be in 1.."),
    (["pretrain.lr=nan"], "pretrain.lr: must be"),
    (["pretrain.task.name=parity"], "pretrain.task.name: unknown 'parity'"),
    (["pretrain.task.length=13"], "pretrain.task.length: must be even"),
    (["arch.name=mlp_mixer", "pretrain.task.length=16"], "pretrain.transfer: blocks.0.mixer"),
])
def test_a_transfer_that_cannot_be_mapped_is_one_line_and_writes_nothing(tmp_path, cli, extra,
                                                                          message):
    out = tmp_path / "run"
    code, captured = cli("run", *TARGET, *WARM, *extra, "--out", str(out))
    assert code == 2
    assert captured.err.strip().count("\n") == 0 and message in captured.err, captured.err
    assert not out.exists()


def test_a_sweep_compares_warm_ups_as_an_axis(spec_file):
    warm = {"task": {"name": "dyck", "length": 12}, "steps": 30, "lr": 0.01}
    spec = load_spec(spec_file(archs=[{"name": "transformer", "d_model": 32, "n_layers": 1}],
                               pretrain=["none", warm],
                               tests=[{"compare": "pretrain.task.name", "against": "none"}]))
    jobs = expand(spec)
    assert [j.pretrain is None for j in jobs] == [True, True, False, False]
    assert jobs[2].pretrain.task.name == "dyck" and len({j.job_id() for j in jobs}) == 4
    bad = spec_file(pretrain=["none", {**warm, "transfer": "all"}])
    with pytest.raises(ConfigError, match=r"pretrain.transfer: pos is \(11, 32\) in the "
                       r"warm-up model \(dyck"):
        expand(load_spec(bad))


@pytest.mark.slow
def test_a_killed_warmed_run_resumes_without_warming_up_again(tmp_path, monkeypatch):
    """The resume checkpoint holds the transferred weights; the warm-up's record is read back."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from bench.measures.run import train
    from bench.training import run as run_module
    from bench.training.checkpoint import resume_path

    overrides = [*TARGET, *WARM, "arch.name=mlp_mixer", "pretrain.task.length=12",
                 "train.max_steps=150", "runtime.checkpoint_every=50", "emergence.stop_early=false",
                 "trainer.log_every_n_steps=1"]
    whole = train(load_run_config(overrides), tmp_path / "whole", progress=False)
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "bench", "run", *overrides, "--out",
                             str(killed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not resume_path(killed).is_file() and proc.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "result.json").exists(), "the run finished before it was killed"

    def no_second_warm_up(*args, **kwargs):
        raise AssertionError("warmed up again")

    monkeypatch.setattr(run_module, "warm_up", no_second_warm_up)
    resumed = train(load_run_config(overrides), killed, progress=False)
    timings = {"wall_time_s", "steps_per_s", "tokens_per_s", "wall_time_to_emergence_s",
               "pretrain"}
    assert {k: v for k, v in resumed.items() if k not in timings} == \
        {k: v for k, v in whole.items() if k not in timings}
    assert {k: v for k, v in resumed["pretrain"].items() if k != "wall_time_s"} == \
        {k: v for k, v in whole["pretrain"].items() if k != "wall_time_s"}


def test_a_warm_up_leaderboard_labels_its_rows_and_tests_the_warm_up(spec_file, cli):
    warm = {"task": {"name": "dyck", "length": 16}, "steps": 20, "lr": 0.01}  # L = 15 both
    path = spec_file(archs=[{"name": "mlp_mixer", "d_model": 32, "n_layers": 1}],
                     pretrain=["none", warm], train={**load_spec(spec_file()).train,
                                                     "max_steps": 100},
                     tests=[{"compare": "pretrain.task.name", "against": "none"}])
    assert cli("sweep", str(path), "--no-progress")[0] == 0
    markdown = (path.with_suffix("") / "leaderboard.md").read_text()
    rows = [line for line in markdown.splitlines()  # the main table's rows (a solve rate)
            if line.startswith("| linear_map") and "/2 (" in line]
    arch = "mlp_mixer(d_model=32, n_layers=1)"
    assert sum(f"`{arch}`" in r for r in rows) == 1
    assert sum(f"`{arch} after dyck(n_types=2, max_depth=4, length=16) x20 (lr 0.01, body)`"
               in r for r in rows) == 1
    assert "compare pretrain.task.name" in markdown and "dyck vs none" in markdown
    assert "| dyck | 20 | 10,240 |" in markdown  # the warm-up section: its cost per run


@pytest.mark.parametrize("scratch, warm, expect", [
    (1000, 400, ("+600", True)), (1000, 700, ("+300", False)), (500, 600, ("-100", False)),
    (math.inf, 1000, ("> 3,000", True)), (math.inf, 3800, ("> 200", None)),
    (900, math.inf, ("< -3,100", False)), (math.inf, math.inf, ("-", None)),
])
def test_steps_saved_and_repaid_are_bounds_where_a_median_is_past_the_budget(scratch, warm,
                                                                             expect):
    assert saved(scratch, warm, 4000, 500) == expect


def test_the_memory_check_counts_a_warm_up_longer_than_the_target(monkeypatch):
    from bench.training import memory

    cfg = load_run_config([*TARGET, "pretrain.task.name=dyck", "pretrain.task.length=512"])
    target, warm = memory.phases(cfg)
    assert target == memory.estimate(load_run_config(TARGET))
    assert "pretrain.task" in warm and sum(warm.values()) > 10 * sum(target.values())
    # free memory for the target alone: the warm-up does not fit, and says so in one line
    monkeypatch.setattr(memory, "available_bytes", lambda device: 2 * sum(target.values()))
    memory.check_memory(load_run_config(TARGET))
    with pytest.raises(ConfigError, match=r"^train.batch_size: the run needs about .* GiB"):
        memory.check_memory(cfg)
