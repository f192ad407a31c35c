"""Planted leaks the gradient proof alone let through: each mixer reads the future (or another
sequence, or keeps state) only in some of the ways training and evaluation call it, and the
contract refuses every one by intervention, before anything trains."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from architectures.plugins import ContractError, check_mixer, config_for_module


class Causal(nn.Module):
    """A causal base: a running mean over the positions so far, then a projection."""

    def __init__(self, d_model: int, seq_len: int, layer_idx: int):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)
        self.calls = 0

    def causal(self, x):
        steps = torch.arange(1, x.shape[1] + 1, dtype=x.dtype)[None, :, None]
        return self.proj(x.cumsum(1) / steps)

    def future(self, x):  # (B, L, D): the next position's input, a leak
        return torch.cat([x[:, 1:], torch.zeros_like(x[:, :1])], 1)

    def forward(self, x):
        self.calls += 1
        return self.causal(x) + (self.future(x) if self.leaks(x) else 0)

    def leaks(self, x) -> bool:
        return False


class UnderNoGrad(Causal):  # what evaluation uses
    def leaks(self, x):
        return not torch.is_grad_enabled()


class AtRunBatch(Causal):  # only at the run's batch size
    def leaks(self, x):
        return x.shape[0] == 32


class OnOddCalls(Causal):
    def leaks(self, x):
        return self.calls % 2 == 1


class ThroughDetach(Causal):  # gradients cannot see it
    def forward(self, x):
        return self.causal(x) + self.future(x).detach()


class AcrossBatch(Causal):  # mixes the sequences of a batch
    def forward(self, x):
        return self.causal(x) + self.causal(x).mean(0, keepdim=True)


class StateWithAutograd(Causal):  # keeps state only while autograd is on
    def forward(self, x):
        out = self.causal(x)
        if torch.is_grad_enabled():
            if getattr(self, "last", None) is not None and self.last.shape == x.shape:
                out = out + self.last
            self.last = x.detach()
        return out


@pytest.mark.parametrize("cls", [UnderNoGrad, AtRunBatch, OnOddCalls, ThroughDetach,
                                 AcrossBatch, StateWithAutograd], ids=lambda c: c.__name__)
def test_every_planted_leak_is_refused(cls):
    config = config_for_module(cls, f"tests.{cls.__name__}")(d_model=8)
    with pytest.raises(ContractError) as e:
        check_mixer(config, 12, (32,))
    assert len(str(e.value).splitlines()) == 1


def test_the_causal_base_passes():
    check_mixer(config_for_module(Causal, "tests.Causal")(d_model=8), 12, (32,))


# --- generated: a read of input j by output i, switched on by one trick -----------------------
TRICKS = {  # when the planted read is active (and how it reads)
    "detach": lambda m, x: True,  # read through .detach(): gradients cannot see it
    "no_grad": lambda m, x: not torch.is_grad_enabled(),
    "eval": lambda m, x: not m.training,
    "train": lambda m, x: m.training,
    "batch": lambda m, x: x.shape[0] == RUN_BATCH,
    "calls": lambda m, x: m.calls % 3 == 0,
    "cross_batch": lambda m, x: True,  # reads another sequence's input j
    "random": lambda m, x: bool(torch.rand(()) < 0.5),
}
LEGAL_TRICKS = ("detach", "no_grad", "eval", "train", "batch", "random")  # stateless, one sequence
RUN_BATCH, LENGTH = 16, 12


def planted(i: int, j: int, trick: str) -> type[nn.Module]:
    """A mixer with dropout whose output i also reads input j when `trick` says so."""

    class Planted(nn.Module):
        def __init__(self, d_model: int, seq_len: int, layer_idx: int):
            super().__init__()
            self.proj, self.drop, self.calls = nn.Linear(d_model, d_model), nn.Dropout(0.1), 0

        def forward(self, x):
            self.calls += 1
            out = self.proj(self.drop(x))  # position-wise: causal
            if x.shape[1] > max(i, j) and TRICKS[trick](self, x):
                source = x.roll(1, 0) if trick == "cross_batch" else x
                source = source[:, j].detach() if trick == "detach" else source[:, j]
                out = out.clone()
                out[:, i] = out[:, i] + source
            return out

    Planted.__name__ = f"Planted_{i}_{j}_{trick}"
    return Planted


def _contract(cls) -> None:
    check_mixer(config_for_module(cls, f"tests.{cls.__name__}")(d_model=8), LENGTH, (RUN_BATCH,))


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), trick=st.sampled_from(sorted(TRICKS)))
def test_every_generated_leak_is_refused(data, trick):
    """Any later input j read by any earlier output i, by any trick, at any position pair of the
    run's length: the contract refuses it in one line (the call-count and random tricks that a
    contract could miss are also covered by the run's own check: tests/bench/training)."""
    j = data.draw(st.integers(1, LENGTH - 1), label="j")
    i = data.draw(st.integers(0, j - 1), label="i")
    with pytest.raises(ContractError) as e:
        _contract(planted(i, j, trick))
    assert len(str(e.value).splitlines()) == 1


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), trick=st.sampled_from(LEGAL_TRICKS))
def test_the_same_generator_reading_the_past_always_passes(data, trick):
    """The same mixers reading j <= i (the present or the past), dropout included, pass."""
    i = data.draw(st.integers(0, LENGTH - 1), label="i")
    j = data.draw(st.integers(0, i), label="j")
    _contract(planted(i, j, trick))


def test_the_issues_detached_plug_in_is_refused():
    class Detached(nn.Module):  # issue 59's: output 3 reads input 4 through .detach()
        def __init__(self, d_model: int, seq_len: int, layer_idx: int):
            super().__init__()
            self.lin = nn.Linear(d_model, d_model)

        def forward(self, x):
            y = self.lin(x).clone()
            if x.shape[1] > 4:
                y[:, 3] = y[:, 3] + x[:, 4].detach()
            return y

    with pytest.raises(ContractError, match=r"not causal .*changed output 3$"):
        _contract(Detached)


def test_a_mixer_that_drifts_with_its_calls_is_named_for_that():
    class Drifts(Causal):  # causal, but every 7th call gives another output
        def forward(self, x):
            self.calls += 1
            return self.causal(x) * (2.0 if self.calls % 7 == 0 else 1.0)

    with pytest.raises(ContractError, match="not repeatable|keeps state between calls"):
        _contract(Drifts)
