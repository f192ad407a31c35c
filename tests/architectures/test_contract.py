"""One contract for every registered mixer: shape, finiteness, backward, causality."""

import math

import pytest
import torch

from architectures import ARCHITECTURES, Backbone
from architectures.transformer import CausalSelfAttention, TransformerConfig

L, D = 12, 32


def small(name: str):
    return ARCHITECTURES[name](d_model=D, n_layers=2)


@pytest.fixture(params=sorted(ARCHITECTURES))
def mixer(request, jitter):
    torch.manual_seed(0)
    return jitter(small(request.param).mixer(L, torch.zeros(L, L), 0))


def test_shape_finite_and_backward(mixer):
    x = torch.randn(3, L, D, requires_grad=True)
    y = mixer(x)
    assert y.shape == x.shape and torch.isfinite(y).all()
    y.square().sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, p in mixer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_shorter_inputs_work(mixer):
    assert mixer(torch.randn(2, L - 5, D)).shape == (2, L - 5, D)


@pytest.mark.parametrize("j", [0, 5, L - 1])
def test_mixer_is_causal(mixer, j):
    x = torch.randn(2, L, D)
    changed = x.clone()
    changed[:, j] = torch.randn(2, D)
    y, y2 = mixer(x), mixer(changed)
    assert torch.allclose(y[:, :j], y2[:, :j], atol=1e-6)
    assert not torch.allclose(y[:, j:], y2[:, j:])  # the change is seen from j on


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_backbone_is_causal_end_to_end(name, jitter):
    torch.manual_seed(0)
    model = jitter(Backbone(small(name), vocab_size=3, seq_len=L, pattern=torch.zeros(L, L)))
    tokens = torch.randint(3, (2, L))
    changed = tokens.clone()
    changed[:, 7] = (changed[:, 7] + 1) % 3
    assert torch.allclose(model(tokens)[:, :7], model(changed)[:, :7], atol=1e-6)


def test_head_dim_is_decoupled_from_width():
    cfg = TransformerConfig(d_model=16, n_heads=128, head_dim=1)
    attn = cfg.mixer(L, torch.zeros(L, L))
    assert attn.qkv.weight.shape == (3 * 128, 16)
    assert attn(torch.randn(2, L, 16)).shape == (2, L, 16)


def test_recorded_attention_is_causal_and_normalised():
    attn = CausalSelfAttention(D, 4, 8, L, torch.zeros(L, L))
    x = torch.randn(2, L, D)
    fast = attn(x)
    attn.record_attention = True
    slow = attn(x)
    probs = attn.last_attention
    assert probs.shape == (2, 4, L, L)
    assert torch.allclose(fast, slow, atol=1e-5)  # SDPA and the explicit path agree
    assert torch.allclose(probs.sum(-1), torch.ones(2, 4, L))
    assert (probs.triu(1) == 0).all()


def test_attention_bias_moves_mass_onto_the_pattern():
    pattern = torch.zeros(L, L)
    pattern[torch.arange(1, L), torch.arange(L - 1)] = 1  # read the previous token
    x = torch.randn(2, L, D)
    masses = []
    for c in (0.0, 20.0):
        torch.manual_seed(0)
        attn = TransformerConfig(d_model=D, attention_bias=c).mixer(L, pattern)
        attn.record_attention = True
        attn(x)
        masses.append((attn.last_attention * pattern).sum(-1)[..., 1:].mean().item())
    assert masses[0] < 0.5 and masses[1] > 0.99
    torch.manual_seed(0)
    attn = TransformerConfig(d_model=D, attention_bias=20.0).mixer(L, pattern)
    y = attn(x)
    attn.record_attention = True
    assert torch.allclose(y, attn(x), atol=1e-5)  # SDPA with the bias mask agrees too


class _Bidirectional(torch.nn.Module):
    """A deliberately leaky mixer: every position sees the next token."""

    def __init__(self, d):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)

    def forward(self, x):
        return self.proj(torch.roll(x, shifts=-1, dims=1))


def random_token_loss(model, steps=80, vocab=2):
    """Train next-token prediction on uniform random tokens; return held-out loss."""
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        tokens = torch.randint(vocab, (32, L + 1), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1),
                                                 tokens[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    tokens = torch.randint(vocab, (256, L + 1), generator=gen)
    with torch.no_grad():
        logits = model(tokens[:, :-1])
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).item()


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_random_targets_stay_at_chance(name):
    """Leak control: nothing to learn, so a causal model cannot beat ln 2."""
    torch.manual_seed(0)
    model = Backbone(small(name), vocab_size=2, seq_len=L, pattern=torch.zeros(L, L))
    assert random_token_loss(model) > math.log(2) - 0.03


def test_leak_control_catches_a_leaky_mixer():
    torch.manual_seed(0)
    model = Backbone(small("transformer"), vocab_size=2, seq_len=L, pattern=torch.zeros(L, L))
    for block in model.blocks:
        block.mixer = _Bidirectional(D)
    assert random_token_loss(model) < 0.5 * math.log(2)
