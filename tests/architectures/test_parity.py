"""The reference paths against independent implementations on the same weights (CPU)."""

import warnings

import pytest
import torch

import architectures.gated_deltanet as gdn_module
from architectures.gated_deltanet import GatedDeltaNetConfig
from architectures.mamba import MambaConfig, parallel_scan

warnings.filterwarnings("ignore", message=".*falling back.*")


def outputs_and_grads(module, x):
    x = x.clone().requires_grad_(True)
    y = module(x)
    y.pow(2).sum().backward()
    grads = {n: p.grad.clone() for n, p in module.named_parameters()}
    module.zero_grad()
    return y.detach(), x.grad, grads


def assert_same(a, b, atol):
    (ya, xa, ga), (yb, xb, gb) = a, b
    assert torch.allclose(ya, yb, atol=atol), (ya - yb).abs().max()
    assert torch.allclose(xa, xb, atol=atol)
    for name in ga:
        assert torch.allclose(ga[name], gb[name], atol=atol), name


def test_parallel_scan_matches_the_recurrence():
    a, b = torch.rand(2, 37, 3), torch.randn(2, 37, 3)
    h, expect = torch.zeros(2, 3), []
    for t in range(37):
        h = a[:, t] * h + b[:, t]
        expect.append(h)
    assert torch.allclose(parallel_scan(a, b), torch.stack(expect, 1), atol=1e-5)


def test_mamba_matches_transformers_mamba_mixer():
    transformers = pytest.importorskip("transformers")
    from transformers.models.mamba.modeling_mamba import MambaMixer

    torch.manual_seed(0)
    ours = MambaConfig(d_model=32, d_state=8).mixer(70, torch.zeros(1))
    hf_config = transformers.MambaConfig(hidden_size=32, state_size=8, expand=2, conv_kernel=4,
                                         time_step_rank=2, use_conv_bias=True, use_bias=False)
    theirs = MambaMixer(hf_config, layer_idx=0)
    theirs.load_state_dict(ours.state_dict())  # same names and shapes as mamba_ssm.Mamba
    x = torch.randn(2, 70, 32)
    assert_same(outputs_and_grads(ours, x), outputs_and_grads(theirs, x), atol=1e-4)


def test_gated_deltanet_chunked_reference_matches_fla_recurrent_op(monkeypatch):
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule

    torch.manual_seed(0)
    mixer = GatedDeltaNetConfig(d_model=32, n_heads=2, head_dim=8, expand_v=2.0).mixer(40, None)
    x = torch.randn(2, 40, 32)
    chunked = outputs_and_grads(mixer, x)

    def recurrent(q, k, v, g, beta, chunk_size):  # the chunked op takes (g, beta), this (beta, g)
        return naive_recurrent_gated_delta_rule(q, k, v, beta, g)

    monkeypatch.setattr(gdn_module, "naive_chunk_gated_delta_rule", recurrent)
    assert_same(chunked, outputs_and_grads(mixer, x), atol=1e-4)
    assert mixer.last_path == "reference"


def test_gated_deltanet_state_dict_matches_fla_layer():
    layers = pytest.importorskip("fla.layers")
    ours = GatedDeltaNetConfig(d_model=64, n_heads=2, head_dim=32, expand_v=1.0).mixer(8, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lib = layers.GatedDeltaNet(hidden_size=64, head_dim=32, num_heads=2, expand_v=1.0)
    shapes = {k: v.shape for k, v in ours.state_dict().items()}
    assert shapes == {k: v.shape for k, v in lib.state_dict().items()}
