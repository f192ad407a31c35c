"""A user's own mixer: by dotted path or registration, checked by the contract before training."""

import csv
import json
import textwrap

import pytest

from architectures import ARCHITECTURES, ContractError, check_mixer, register, resolve
from bench.core.errors import ConfigError
from bench.training.config import load_run_config

EXAMPLE = "examples.custom_mixer:CausalConvMixer"
TINY = ["task.state_size=4", "task.sparsity=1", "task.n_states=3", "arch.d_model=32",
        "train.eval_every=25", "train.eval_size=128", "train.batch_size=32"]

BAD_MIXERS = textwrap.dedent('''
    import torch
    from torch import nn

    class WrongShape(nn.Module):
        def __init__(self, d_model: int, seq_len: int, layer_idx: int):
            super().__init__()
            self.proj = nn.Linear(d_model, d_model + 1)

        def forward(self, x):
            return self.proj(x)

    class Leaky(nn.Module):
        """Reads the whole sequence: every output sees the future."""
        def __init__(self, d_model: int, seq_len: int, layer_idx: int, *, scale: float = 1.0):
            super().__init__()
            self.proj = nn.Linear(d_model, d_model)
            self.scale = scale

        def forward(self, x):
            return self.proj(x + self.scale * x.mean(1, keepdim=True))

    class NoSeqLen(nn.Module):
        def __init__(self, d_model: int):
            super().__init__()

    class MiddleLeak(nn.Module):
        """Causal everywhere but one middle position, which also reads the next input."""
        def __init__(self, d_model: int, seq_len: int, layer_idx: int):
            super().__init__()
            self.proj = nn.Linear(d_model, d_model)

        def forward(self, x):
            y = self.proj(x.cumsum(1))
            p = 3
            return torch.cat([y[:, :p], y[:, p:p + 1] + x[:, p + 1:p + 2], y[:, p + 1:]], 1)

    class EvalLeak(nn.Module):
        """Causal while training; in eval mode every output also reads the next input."""
        def __init__(self, d_model: int, seq_len: int, layer_idx: int):
            super().__init__()
            self.proj = nn.Linear(d_model, d_model)

        def forward(self, x):
            y = self.proj(x.cumsum(1))
            return y if self.training else y + 0.001 * x.roll(-1, 1)

    class BufferLeak(nn.Module):
        """Keeps the last batch it saw and mixes it into the next call."""
        def __init__(self, d_model: int, seq_len: int, layer_idx: int):
            super().__init__()
            self.proj = nn.Linear(d_model, d_model)
            self.register_buffer("last", torch.zeros(d_model))

        def forward(self, x):
            y = self.proj(x.cumsum(1)) + self.last
            self.last = x.detach().mean((0, 1))
            return y

    class CausalDropout(nn.Module):
        """Legal: a causal running mean with dropout (two forward passes differ)."""
        def __init__(self, d_model: int, seq_len: int, layer_idx: int, *, p: float = 0.3):
            super().__init__()
            self.proj = nn.Linear(d_model, d_model)
            self.drop = nn.Dropout(p)

        def forward(self, x):
            steps = torch.arange(1, x.shape[1] + 1, device=x.device)[None, :, None]
            return self.drop(self.proj(x.cumsum(1) / steps))

    class RaisesInInit(nn.Module):
        def __init__(self, d_model: int, seq_len: int, layer_idx: int):
            super().__init__()
            raise RuntimeError("needs a GPU")

    class RaisesInForward(nn.Module):
        def __init__(self, d_model: int, seq_len: int, layer_idx: int):
            super().__init__()

        def forward(self, x):
            raise KeyError("no such head")

    from architectures import RecordsAttention

    class OneHead(RecordsAttention, nn.Module):
        """Single-head causal attention that declares its probabilities."""
        def __init__(self, d_model: int, seq_len: int, layer_idx: int, *, keep: str = "probs"):
            super().__init__()
            self.qkv = nn.Linear(d_model, 3 * d_model)
            self.keep = keep

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, -1)
            L = x.shape[1]
            mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
            scores = (q @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf"))
            probs = (scores / q.shape[-1] ** 0.5).softmax(-1)  # (B, L, L)
            if self.keep == "probs":
                self.keep_attention(probs[:, None])
            elif self.keep == "no_heads":
                self.keep_attention(probs)
            else:  # the unmasked scores' softmax: reads the future
                self.keep_attention((q @ k.transpose(-1, -2)).softmax(-1)[:, None])
            return probs @ v
''')


def test_dotted_path_becomes_a_typed_config():
    cfg = load_run_config([f"arch.name={EXAMPLE}", "arch.kernel_size=6"])
    assert cfg.arch.kernel_size == 6 and cfg.arch.name == EXAMPLE
    with pytest.raises(ConfigError, match="arch.kernel_sise: unknown key"):
        load_run_config([f"arch.name={EXAMPLE}", "arch.kernel_sise=6"])
    with pytest.raises(ConfigError, match="arch.kernel_size: Value 'big'"):
        load_run_config([f"arch.name={EXAMPLE}", "arch.kernel_size=big"])
    check_mixer(cfg.arch, seq_len=12)  # the example honours the contract


def test_registration_call():
    from examples.custom_mixer import CausalConvMixer

    register("causal_conv_test", CausalConvMixer)
    try:
        cfg = load_run_config(["arch.name=causal_conv_test", "arch.kernel_size=2"])
        assert cfg.arch.kernel_size == 2 and resolve("causal_conv_test") is type(cfg.arch)
        with pytest.raises(ValueError, match="already registered"):
            register("causal_conv_test", CausalConvMixer)
    finally:
        ARCHITECTURES.pop("causal_conv_test")


def test_example_mixer_trains_and_appears_in_a_leaderboard(tmp_path, cli):
    out = tmp_path / "run"
    code, _ = cli("run", *TINY, f"arch.name={EXAMPLE}",
                    "arch.kernel_size=8", "train.max_steps=50", "--out", str(out), "--no-progress")
    assert code == 0 and (out / "result.json").exists()

    spec = tmp_path / "plug.yaml"
    spec.write_text(textwrap.dedent(f"""
        name: plug
        task: {{name: linear_map, state_size: 4, sparsity: 1, n_states: 3}}
        archs:
          - {{name: "{EXAMPLE}", d_model: 32, kernel_size: 8}}
          - {{name: mlp_mixer, d_model: 32}}
        seeds: 1
        train: {{max_steps: 40, eval_every: 20, eval_size: 64, batch_size: 16}}
    """))
    code, _ = cli("sweep", str(spec))
    assert code == 0
    rows = list(csv.DictReader((tmp_path / "plug" / "leaderboard.csv").open()))
    assert f"{EXAMPLE}(d_model=32, kernel_size=8)" in {r["architecture"] for r in rows}


@pytest.mark.parametrize("cls,message", [
    ("WrongShape", "must map (B, L, D) = (2, 11, 64) to the same shape, got (2, 11, 65)"),
    ("Leaky", "is not causal: output 0 depends on input 1"),
    ("MiddleLeak", "(train mode) is not causal: output 3 depends on input 4"),
    ("EvalLeak", "(eval mode) is not causal: output 0 depends on input 1"),
    ("BufferLeak", "keeps state between calls"),
    ("RaisesInForward", "failed in forward: KeyError: 'no such head'"),
    ("RaisesInInit", "mixer 'bad_mixers:RaisesInInit' failed to build: RuntimeError: needs a GPU"),
    ("NoSeqLen", "the constructor must take d_model, seq_len, layer_idx; missing layer_idx, "
                 "seq_len"),
])
def test_contract_breakers_are_rejected_before_training(cls, message, tmp_path, monkeypatch, cli):
    (tmp_path / "bad_mixers.py").write_text(BAD_MIXERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    code, captured = cli("run", "task.state_size=4", "task.n_states=3",
                           f"arch.name=bad_mixers:{cls}", "--out", str(out))
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: arch.name:") and message in lines[0]
    assert not out.exists()


def test_a_plugin_that_declares_its_attention_gets_parent_mass_like_the_builtin(
        tmp_path, monkeypatch, cli):
    (tmp_path / "bad_mixers.py").write_text(BAD_MIXERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    code, captured = cli("run", *TINY, "arch.name=bad_mixers:OneHead", "train.max_steps=25",
                         "--out", str(out), "--no-progress")
    assert code == 0, captured.err
    result = json.loads((out / "result.json").read_text())
    mass = result["curves"]["val/parent_mass"]
    assert len(mass) >= 2 and all(0 <= m <= 1 for m in mass)
    assert result["learned_patterns"]  # its maps are drawn like the built-in attention's


@pytest.mark.parametrize("keep,message", [
    ("no_heads", "declares RecordsAttention but kept (2, 11, 11), not (B, H, L, L)"),
    ("future", "its kept attention is not causal probabilities"),
])
def test_a_declared_protocol_is_checked_by_the_contract(keep, message, tmp_path, monkeypatch):
    (tmp_path / "bad_mixers.py").write_text(BAD_MIXERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_run_config(["arch.name=bad_mixers:OneHead", f"arch.keep={keep}"])
    with pytest.raises(ContractError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_mixer(cfg.arch, seq_len=11)


def test_a_legal_mixer_with_dropout_passes_the_causality_proof(tmp_path, monkeypatch):
    (tmp_path / "bad_mixers.py").write_text(BAD_MIXERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    check_mixer(load_run_config(["arch.name=bad_mixers:CausalDropout"]).arch, seq_len=11)


def test_resolve_rejects_what_is_not_a_mixer(tmp_path, monkeypatch):
    with pytest.raises(ContractError, match="expected an nn.Module or ArchConfig subclass"):
        resolve("json:dumps")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "broken_syntax.py").write_text("def f(:\n")
    with pytest.raises(ContractError, match="broken_syntax:M: importing it raised SyntaxError"):
        resolve("broken_syntax:M")
    (tmp_path / "raises_on_import.py").write_text("raise RuntimeError('no GPU here')\n")
    with pytest.raises(ContractError, match="raised RuntimeError: no GPU here"):
        resolve("raises_on_import:M")
    with pytest.raises(ContractError, match="cannot import"):
        resolve("no_such_module:Mixer")


def test_a_module_plug_in_declares_its_state_per_layer():
    from torch import nn as tnn

    from architectures.plugins import config_for_module

    class Windowed(tnn.Module):
        def __init__(self, d_model: int, seq_len: int, layer_idx: int, *, window: int = 3):
            super().__init__()
            self.lin = tnn.Linear(d_model, d_model)

        @staticmethod
        def state_per_layer(d_model: int, seq_len: int, window: int) -> int:
            return d_model * min(window, seq_len)

        def forward(self, x):
            return self.lin(x)

    cfg = config_for_module(Windowed, "tests.Windowed")(d_model=8, window=5)
    assert cfg.memory_per_layer(4) == 32 and cfg.memory_per_layer(40) == 40
    plain = config_for_module(type("Plain", (Windowed,), {"state_per_layer": None}), "p")()
    assert plain.memory_per_layer(10) is None
