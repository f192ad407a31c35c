"""Parameter counts and recurrent state sizes against hand-computed values."""

import pytest
import torch

from architectures import ARCHITECTURES

L = 23


def mixer_params(name, layer_idx=0, **fields):
    mixer = ARCHITECTURES[name](d_model=64, **fields).mixer(L, torch.zeros(L, L), layer_idx)
    return sum(p.numel() for p in mixer.parameters())


@pytest.mark.parametrize("name,fields,layer,params", [
    # qkv 64x(3*4*16) + out 64x64
    ("transformer", dict(n_heads=4, head_dim=16), 0, 64 * 192 + 64 * 64),
    # 128 heads of size 1 work: qkv 64x384 + out 128x64
    ("transformer", dict(n_heads=128, head_dim=1), 0, 64 * 384 + 128 * 64),
    # L x L mixing weight + L biases per head, then a D x D projection with bias
    ("mlp_mixer", dict(n_heads=1), 0, 23 * 23 + 23 + 64 * 64 + 64),
    # in_proj 64x128, conv 64x4+64, x_proj 64x(4+2*16), dt_proj 4x64+64, A_log 64x16, D 64,
    # out_proj 64x64
    ("mamba", dict(expand=1, d_state=16), 0,
     8192 + 320 + 64 * 36 + 320 + 1024 + 64 + 4096),
    # q, k, v, g 64x64 each, a/b 64x2 each, A_log 2, dt_bias 2, convs 3x64x4, o_norm 32, o 64x64
    ("gated_deltanet", dict(n_heads=2, head_dim=32, expand_v=1.0), 0,
     4 * 4096 + 256 + 4 + 768 + 32 + 4096),
    # 6 token-shift mixes, k_k, k_a, r_k, r/k/v/o 64x64, w/a LoRAs 64x8+8x64+64, g LoRA without
    # bias, GroupNorm weight and bias; layer 1 adds the value LoRA
    ("rwkv", dict(head_dim=16, low_rank_dim=8), 0,
     6 * 64 + 128 + 64 + 4 * 4096 + 2 * 1088 + 1024 + 128),
    ("rwkv", dict(head_dim=16, low_rank_dim=8), 1,
     6 * 64 + 128 + 64 + 4 * 4096 + 3 * 1088 + 1024 + 128),
])
def test_mixer_parameter_counts(name, fields, layer, params):
    assert mixer_params(name, layer, **fields) == params


@pytest.mark.parametrize("name,fields,state", [
    ("transformer", dict(n_heads=4, head_dim=16), 2 * 4 * 16 * L),  # keys and values of L tokens
    ("mlp_mixer", dict(), L * 64),
    ("mamba", dict(expand=1, d_state=16, d_conv=4), 64 * 16 + 64 * 3),
    ("gated_deltanet", dict(n_heads=2, head_dim=32, expand_v=1.0, conv_size=4),
     2 * 32 * 32 + (32 + 32 + 32) * 2 * 3),
    ("rwkv", dict(head_dim=16), 4 * 16 * 16 + 64),
])
def test_state_size_per_layer(name, fields, state):
    assert ARCHITECTURES[name](d_model=64, **fields).memory_per_layer(L) == state
