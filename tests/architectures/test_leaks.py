"""Planted leaks the gradient proof alone let through: each mixer reads the future (or another
sequence, or keeps state) only in some of the ways training and evaluation call it, and the
contract refuses every one by intervention, before anything trains."""

import pytest
import torch
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
