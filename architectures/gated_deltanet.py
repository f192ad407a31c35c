"""Gated DeltaNet (Yang et al. 2024): a gated delta-rule linear recurrence per head.

The module creates exactly the parameters of `fla.layers.GatedDeltaNet` (names and shapes), so a
state dict loads into either. Two paths compute one function:
- fused: fla's chunked Triton kernel `chunk_gated_delta_rule`, on CUDA when fla imports;
- reference: fla's own pure-torch `naive_chunk_gated_delta_rule` (CPU, tests, small studies).
Per token: q, k, v = silu(short causal conv(proj(x))); q, k are L2-normalised; beta =
sigmoid(b_proj x) (x2 with negative eigenvalues allowed); the decay g = -exp(A_log) *
softplus(a_proj x + dt_bias); the output is RMS-normalised, gated by silu(g_proj x), projected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .backbone import (
    Backbone,
    GatedRMSNorm,
    RecurrentConfig,
    lazy_op,
    pick_path,
    require_fused,
    short_conv,
)
from .init import STD, gpt2_
from .protocols import ReportsKernelPath

# fla's ops, imported on first use: the fused kernel needs CUDA at run time, the naive op any device
fused_op = lazy_op("fla.ops.gated_delta_rule", "chunk_gated_delta_rule")
naive_op = lazy_op("fla.ops.gated_delta_rule.naive", "naive_chunk_gated_delta_rule")


@dataclass
class GatedDeltaNetConfig(RecurrentConfig):
    name: str = "gated_deltanet"
    n_heads: int = 2
    """heads H (fla: num_heads)"""
    head_dim: int = 32
    """key/query size per head (fla: head_dim)"""
    expand_v: float = 1.0
    """value size per head as a multiple of head_dim (fla: expand_v)"""
    conv_size: int = 4
    """kernel of the short causal convolutions on q, k, v"""
    allow_neg_eigval: bool = False
    """let beta reach 2, allowing negative eigenvalues of the state transition"""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_at_least(1, "n_heads", "head_dim", "conv_size")
        if self.expand_v <= 0 or not float(self.head_dim * self.expand_v).is_integer():
            raise ValueError(
                f"expand_v: head_dim * expand_v must be a positive integer, got {self.expand_v}"
            )
        require_fused(self.kernel, fused_op, "fla")

    def memory_per_layer(self, seq_len: int) -> int:
        dv = int(self.head_dim * self.expand_v)
        conv = (2 * self.head_dim + dv) * self.n_heads * (self.conv_size - 1)
        return self.n_heads * self.head_dim * dv + conv  # one K x V matrix per head + conv windows

    @torch.no_grad()
    def reference_init(self, model: Backbone) -> None:
        """fla's GatedDeltaNetForCausalLM (`GatedDeltaNetPreTrainedModel._init_weights`, fla
        0.6, initializer_range 0.02, no residual rescaling by default): every Linear and Conv1d
        (the short convolutions included) N(0, 0.02), biases 0, the embedding N(0, 0.02), norms
        1 and 0; A_log and dt_bias as the layer draws them."""
        gpt2_(model, also=(nn.Conv1d,))  # fla's rule is GPT-2's, its convolutions included
        if model.pos is not None:
            nn.init.normal_(model.pos, std=STD)

    def mixer(self, seq_len: int, pattern: torch.Tensor, layer_idx: int = 0) -> nn.Module:
        return GatedDeltaNet(self)


class GatedDeltaNet(ReportsKernelPath, nn.Module):
    def __init__(self, cfg: GatedDeltaNetConfig):
        super().__init__()
        d, H = cfg.d_model, cfg.n_heads
        self.kernel, self.allow_neg_eigval = cfg.kernel, cfg.allow_neg_eigval
        self.n_heads, self.head_k_dim = H, cfg.head_dim
        self.head_v_dim = int(cfg.head_dim * cfg.expand_v)
        key_dim, value_dim = H * self.head_k_dim, H * self.head_v_dim
        self.q_proj = nn.Linear(d, key_dim, bias=False)
        self.k_proj = nn.Linear(d, key_dim, bias=False)
        self.v_proj = nn.Linear(d, value_dim, bias=False)
        self.a_proj = nn.Linear(d, H, bias=False)
        self.b_proj = nn.Linear(d, H, bias=False)
        self.A_log = nn.Parameter(torch.empty(H).uniform_(0, 16).log())
        dt = torch.exp(torch.rand(H) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        dt = dt.clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
        self.q_conv1d = short_conv(key_dim, cfg.conv_size)
        self.k_conv1d = short_conv(key_dim, cfg.conv_size)
        self.v_conv1d = short_conv(value_dim, cfg.conv_size)
        self.g_proj = nn.Linear(d, value_dim, bias=False)
        self.o_norm = GatedRMSNorm(self.head_v_dim)
        self.o_proj = nn.Linear(value_dim, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        H = self.n_heads
        q = F.silu(self.q_conv1d(self.q_proj(x).transpose(1, 2))[..., :L]).transpose(1, 2)
        k = F.silu(self.k_conv1d(self.k_proj(x).transpose(1, 2))[..., :L]).transpose(1, 2)
        v = F.silu(self.v_conv1d(self.v_proj(x).transpose(1, 2))[..., :L]).transpose(1, 2)
        q, k = q.view(B, L, H, self.head_k_dim), k.view(B, L, H, self.head_k_dim)
        v = v.reshape(B, L, H, self.head_v_dim)  # (B, L, H, Dv)
        self.last_path = pick_path(self.kernel, x, fused_op)
        if self.last_path == "fused":
            o, _ = fused_op()(
                q=q, k=k, v=v, g=self.a_proj(x), beta=self.b_proj(x),
                use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                allow_neg_eigval=self.allow_neg_eigval, use_gate_in_kernel=True,
                A_log=self.A_log, dt_bias=self.dt_bias, state_v_first=True,
            )
        else:
            o = self.reference(x, q, k, v)
        gate = self.g_proj(x).view(B, L, H, self.head_v_dim)
        return self.o_proj(self.o_norm(o, gate).reshape(B, L, -1))

    def reference(self, x, q, k, v) -> torch.Tensor:
        """The same recurrence on fla's naive chunked op: (B, L, H, Dk|Dv) -> (B, L, H, Dv)."""
        beta = self.b_proj(x).sigmoid() * (2.0 if self.allow_neg_eigval else 1.0)  # (B, L, H)
        g = -self.A_log.float().exp() * F.softplus(self.a_proj(x).float() + self.dt_bias)
        q, k = F.normalize(q, dim=-1, eps=1e-6), F.normalize(k, dim=-1, eps=1e-6)
        o, _ = naive_op()(q, k, v, g, beta, chunk_size=16)
        return o.to(x.dtype)
