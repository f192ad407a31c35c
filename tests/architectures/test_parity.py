"""The reference paths against independent implementations on the same weights (CPU)."""

import warnings

import pytest
import torch

import architectures.gated_deltanet as gdn_module
from architectures.gated_deltanet import GatedDeltaNetConfig
from architectures.mamba import MambaConfig, SelectiveScan
from architectures.rwkv import RWKV7Config

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


@pytest.mark.parametrize("L", [1, 8, 37])
def test_selective_scan_matches_a_token_by_token_loop(L):
    """Outputs and all five gradients against autograd through the plain recurrence."""
    torch.manual_seed(L)
    inputs = [torch.rand(2, L, 3) + 0.1, -torch.rand(3, 4) - 0.5, torch.randn(2, L, 3),
              torch.randn(2, L, 4), torch.randn(2, L, 4)]

    def loop(delta, A, x, B, C):
        h, ys = torch.zeros(2, 3, 4, dtype=x.dtype), []
        for t in range(L):
            drive = (delta[:, t] * x[:, t])[..., None] * B[:, t, None]
            h = torch.exp(delta[:, t, :, None] * A) * h + drive
            ys.append((h * C[:, t, None]).sum(-1))
        return torch.stack(ys, 1)

    results = []
    for f in (SelectiveScan.apply, loop):
        leaves = [t.double().requires_grad_(True) for t in inputs]
        y = f(*leaves)
        y.pow(2).sum().backward()
        results.append([y.detach()] + [t.grad for t in leaves])
    for ours, ref in zip(*results):
        assert torch.allclose(ours, ref, atol=1e-9)


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

    monkeypatch.setattr(gdn_module, "naive_op", lambda: recurrent)
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


def test_rwkv7_chunked_reference_matches_fla_recurrent_op(monkeypatch, jitter):
    from fla.ops.generalized_delta_rule.dplr.naive import dplr_recurrence

    import architectures.rwkv as rwkv_module

    torch.manual_seed(0)
    model_cfg = RWKV7Config(d_model=32, head_dim=8, n_layers=2)
    mixers = [jitter(model_cfg.mixer(40, None, i)) for i in range(2)]

    def both(x):
        context = {}
        return mixers[1](mixers[0](x, context), context)  # layer 1 reads layer 0's values

    class Pair(torch.nn.ModuleList):
        def forward(self, x):
            return both(x)

    pair = Pair(mixers)
    x = torch.randn(2, 37, 32)  # not a whole number of chunks
    chunked = outputs_and_grads(pair, x)

    def recurrent(q, k, v, alpha, beta, gk, output_final_state, chunk_size):
        return dplr_recurrence(q, k, v, alpha, beta, gk, output_final_state=output_final_state)

    monkeypatch.setattr(rwkv_module, "naive_op", lambda: recurrent)
    assert_same(chunked, outputs_and_grads(pair, x), atol=1e-4)


def test_rwkv7_state_dict_matches_fla_layer():
    layers = pytest.importorskip("fla.layers")
    for layer_idx in (0, 1):
        ours = RWKV7Config(d_model=64, head_dim=16).mixer(8, None, layer_idx)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lib = layers.RWKV7Attention(hidden_size=64, head_dim=16, layer_idx=layer_idx,
                                        num_hidden_layers=2)
        ours_sd, lib_sd = ours.state_dict(), lib.state_dict()
        assert {k: v.shape for k, v in ours_sd.items()} == {k: v.shape for k, v in lib_sd.items()}
        for name in ("x_r", "x_w", "k_k", "k_a", "r_k", "w_lora.lora.2.bias", "g_norm.weight"):
            assert torch.allclose(ours_sd[name], lib_sd[name], atol=1e-5), name  # same init
