"""Leak-proof by construction: mixers that read the future only where the start-up contract does
not look (after many calls, at random, at a warm-up's length) pass the contract, train, and end
`leaked` because a decisive evaluation, recomputed with the future scrambled, changed; a leaked
run never counts as emerged and every table says so."""

import csv
import json

import pytest
import torch
from torch import nn

import architectures
from architectures.plugins import check_mixer, config_for_module
from bench.measures.run import train
from bench.training.config import load_run_config

BASE = ["task.state_size=8", "task.sparsity=1", "task.n_states=2", "arch.d_model=16",
        "train.eval_every=10", "train.max_steps=30", "train.eval_size=64",
        "train.probe_size=16", "train.batch_size=16"]


class Causal(nn.Module):
    """A running mean over the positions so far, then a projection; `leaks` adds the next
    position's input."""

    def __init__(self, d_model: int, seq_len: int, layer_idx: int):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        steps = torch.arange(1, x.shape[1] + 1, dtype=x.dtype, device=x.device)[None, :, None]
        out = self.proj(x.cumsum(1) / steps)
        if self.leaks(x):
            out = out + torch.cat([x[:, 1:], torch.zeros_like(x[:, :1])], 1)
        return out

    def leaks(self, x) -> bool:
        return False


class AfterManyCalls(Causal):  # past the contract's ~220 calls on its own instance
    def leaks(self, x):
        return self.calls > 250


class AfterTraining(Causal):  # after 40 train-mode calls at a batch above 8: the contract
    # makes about a dozen, a run one a training step
    def leaks(self, x):
        self.trained = getattr(self, "trained", 0) + (self.training and x.shape[0] > 8)
        return self.trained > 40


class AtRandom(Causal):  # about one call in ten, by the global generator (which the
    # contract fixes per call, as for dropout: there its draw never leaks)
    def leaks(self, x):
        return bool(torch.rand(()) < 0.1)


class AtWarmUpLength(Causal):  # the contract checked the target's length only
    def leaks(self, x):
        return x.shape[1] == 11


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(architectures, "ARCHITECTURES", dict(architectures.ARCHITECTURES))
    for cls in (Causal, AfterManyCalls, AtRandom, AtWarmUpLength):
        architectures.register(f"leaky_{cls.__name__}", cls)


def test_the_start_up_contract_lets_these_through():
    for cls in (AfterManyCalls, AtRandom, AtWarmUpLength):  # at the target's length, 15
        check_mixer(config_for_module(cls, f"tests.{cls.__name__}")(d_model=8), 15, (16,))


def test_a_mixer_that_leaks_after_many_calls_ends_leaked(registered, tmp_path):
    # 300 training steps and the evaluations' passes: well past 250 calls at the last one
    result = train(load_run_config([*BASE, "arch.name=leaky_AfterManyCalls",
                                    "train.max_steps=300", "train.eval_every=100"]),
                   tmp_path / "r", progress=False)
    assert result["status"] == "leaked"
    assert result["steps_to_emergence"] is None
    assert json.loads((tmp_path / "r" / "result.json").read_text())["status"] == "leaked"


def test_the_causal_base_is_never_flagged(registered, tmp_path):
    result = train(load_run_config([*BASE, "arch.name=leaky_Causal"]), tmp_path / "r",
                   progress=False)
    assert result["status"] in ("emerged", "censored")


def test_a_causal_mixer_under_mixed_precision_is_never_flagged(tmp_path):
    # the scrambled recomputation runs under the evaluation's autocast: outside it, bf16 logits
    # were compared with float32 ones and every causal mixer ended `leaked` at step 0
    result = train(load_run_config([*BASE, "trainer.precision=bf16-mixed"]), tmp_path / "r",
                   progress=False)
    assert result["status"] in ("emerged", "censored")


def test_a_mixer_that_leaks_at_random_is_caught_where_it_leaked(registered, tmp_path):
    # a decisive evaluation is checked against its own scored pass: when that pass leaked, the
    # scrambled recomputation (which leaks only one time in ten) differs
    statuses = [train(load_run_config([*BASE, "arch.name=leaky_AtRandom", f"seed={s}",
                                       "train.max_steps=60"]), tmp_path / str(s),
                      progress=False)["status"] for s in range(3)]
    assert "leaked" in statuses and "emerged" not in statuses


def test_a_warm_up_length_is_checked_before_training(registered, tmp_path):
    from bench.core.errors import ConfigError

    cfg = load_run_config([*BASE, "arch.name=leaky_AtWarmUpLength", "pretrain.task.name=linear_map",
                           "pretrain.task.state_size=6", "pretrain.task.n_states=2",
                           "pretrain.steps=10"])
    with pytest.raises(ConfigError, match="not causal"):
        train(cfg, tmp_path / "r", progress=False)
    assert not (tmp_path / "r").exists()  # refused before anything was written


def test_a_sweep_marks_a_leaking_row_on_its_table(registered, tmp_path, cli):
    spec = tmp_path / "leaky.yaml"
    spec.write_text("""name: leaky
task: {name: linear_map, state_size: 8, sparsity: 1, n_states: 2}
archs:
  - {name: leaky_AfterManyCalls, d_model: 16}
seeds: 1
train: {max_steps: 300, eval_every: 100, eval_size: 64, probe_size: 16, batch_size: 16}
""")
    code, captured = cli("sweep", str(spec), "--out", str(tmp_path / "out"), "--executor",
                         "local")
    assert code == 0, captured.err
    table = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "0/1 (0%), **1 leaked**" in table and "the mixer read the future" in table
    with open(tmp_path / "out" / "leaderboard.csv") as f:
        row = next(csv.DictReader(f))
    assert (row["leaked"], row["emerged"]) == ("1", "0")
    code, captured = cli("status", str(tmp_path / "out"))
    assert "1 leaked" in captured.out


class OneLatePair(Causal):  # after the contract: scored output 9 reads input 12 only
    def forward(self, x):
        self.calls += 1
        steps = torch.arange(1, x.shape[1] + 1, dtype=x.dtype, device=x.device)[None, :, None]
        out = self.proj(x.cumsum(1) / steps)
        if self.calls > 250:
            out = out.clone()
            out[:, 9] = out[:, 9] + x[:, 12].detach()
        return out


def test_a_censored_run_that_leaks_at_one_position_pair_ends_leaked(monkeypatch, tmp_path):
    """The run's own check covers every scored cut at the last evaluation, so a read between
    one pair of positions is caught however short the run and whatever its outcome (the
    threshold is out of reach here: the run could only end censored). A read that reaches no
    scored output (output 2 of input 5 here, x_0's tokens) buys nothing and is not a run's to
    catch; the contract refuses it before any run."""
    monkeypatch.setattr(architectures, "ARCHITECTURES", dict(architectures.ARCHITECTURES))
    architectures.register("leaky_pair", OneLatePair)
    result = train(load_run_config([*BASE, "arch.name=leaky_pair", "train.max_steps=300",
                                    "train.eval_every=100", "train.lr=1e-6"]),
                   tmp_path / "r", progress=False)
    assert result["status"] == "leaked"
