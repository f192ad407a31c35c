"""Mamba (Gu & Dao 2023): the selective state-space mixer.

The module creates exactly the parameters of `mamba_ssm.Mamba` (in_proj, conv1d, x_proj, dt_proj,
A_log, D, out_proj), so a state dict loads into either. Two paths compute one function:
- fused: mamba_ssm's CUDA `selective_scan_fn`, on CUDA when mamba_ssm imports (the `gpu` extra);
- reference: a chunked scan in pure torch (parallel within chunks of 8 tokens), any device.
Per channel: h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t, y_t = C_t h_t + D x_t, gated by silu(z).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .backbone import Backbone, RecurrentConfig, lazy_op, pick_path, require_fused
from .init import STD, kaiming_rescaled_, mlp_outputs, residual_branches, zero_biases
from .protocols import ReportsKernelPath

# mamba_ssm's CUDA scan (the `gpu` extra), imported on first use; None without its extension
fused_op = lazy_op("mamba_ssm.ops.selective_scan_interface", "selective_scan_fn")


@dataclass
class MambaConfig(RecurrentConfig):
    name: str = "mamba"
    d_state: int = 16
    """state size N per channel"""
    d_conv: int = 4
    """kernel of the causal depthwise convolution"""
    expand: int = 2
    """inner width as a multiple of d_model"""
    dt_rank: int = 0
    """rank of the step-size projection; 0 = ceil(d_model / 16) as in mamba_ssm"""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_at_least(1, "d_state", "d_conv", "expand")
        self.require_at_least(0, "dt_rank")
        require_fused(self.kernel, fused_op, "mamba_ssm")

    def memory_per_layer(self, seq_len: int) -> int:
        d_inner = self.expand * self.d_model
        return d_inner * self.d_state + d_inner * (self.d_conv - 1)  # SSM state + conv window

    @torch.no_grad()
    def reference_init(self, model: Backbone) -> None:
        """mamba_ssm's MambaLMHeadModel (`_init_weights` in models/mixer_seq_simple.py, over
        the layer's own dt / A_log / D initialisation): the embedding N(0, 0.02); every Linear
        bias 0 but dt_proj's (`_no_reinit`); out_proj and the MLP's fc2 Kaiming-uniform / sqrt(
        n_residuals_per_layer x n_layer) (2 residuals a layer with an MLP, else 1); every other
        weight as PyTorch and the layer draw it. The head: mamba_ssm's tied embedding,
        N(0, 0.02)."""
        nn.init.normal_(model.embed.weight, std=STD)
        if model.pos is not None:
            nn.init.normal_(model.pos, std=STD)
        zero_biases(model, keep=tuple(block.mixer.dt_proj.bias for block in model.blocks))
        n = residual_branches(model)
        for weight in [block.mixer.out_proj.weight for block in model.blocks] + mlp_outputs(model):
            kaiming_rescaled_(weight, n)
        nn.init.normal_(model.head.weight, std=STD)

    def mixer(self, seq_len: int, pattern: torch.Tensor, layer_idx: int = 0) -> nn.Module:
        return Mamba(self)


CHUNK = 8  # tokens per step of the chunked scan: a few MB of state per chunk stay in cache


def _chunk_scan(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None = None,
                reverse: bool = False) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + b_t along dim 1 from h_{-1} = h0, in log2(c) steps (Hillis-Steele).

    With `reverse`, h_t = a_t * h_{t+1} + b_t from the end. Overwrites `b` and returns it.
    """
    a = a.clone()
    c = a.shape[1]
    if h0 is not None:
        b[:, -1 if reverse else 0] += a[:, -1 if reverse else 0] * h0
    offset = 1
    while offset < c:
        if reverse:
            b[:, :-offset] += a[:, :-offset] * b[:, offset:]  # the product is formed first
            a[:, :-offset] = a[:, :-offset] * a[:, offset:]
        else:
            b[:, offset:] += a[:, offset:] * b[:, :-offset]
            a[:, offset:] = a[:, offset:] * a[:, :-offset]
        offset *= 2
    return b


class SelectiveScan(torch.autograd.Function):
    """y_t = C_t . h_t with h_t = exp(delta_t A) h_{t-1} + delta_t x_t B_t, per channel.

    delta, x: (B, L, D); A: (D, N); B, C: (B, L, N) -> y (B, L, D). Runs over chunks of CHUNK
    tokens, each a parallel scan, so the (B, L, D, N) states are never all held at once; the
    backward pass recomputes each chunk's states from the chunk boundaries saved in forward.
    """

    @staticmethod
    def forward(ctx, delta, A, x, B, C):
        Bsz, L, D = x.shape
        h = x.new_zeros(Bsz, D, A.shape[1])
        starts, ys = [], []
        for t in range(0, L, CHUNK):
            sl = slice(t, t + CHUNK)
            a = torch.exp(delta[:, sl, :, None] * A)  # (B, c, D, N)
            b = (delta[:, sl] * x[:, sl])[..., None] * B[:, sl, None, :]
            starts.append(h)
            hs = _chunk_scan(a, b, h)  # (B, c, D, N)
            ys.append((hs * C[:, sl, None, :]).sum(-1))
            h = hs[:, -1]
        ctx.save_for_backward(delta, A, x, B, C, torch.stack(starts, 1))
        return torch.cat(ys, 1)

    @staticmethod
    def backward(ctx, gy):
        delta, A, x, B, C, starts = ctx.saved_tensors
        L = x.shape[1]
        g_delta, g_x = torch.zeros_like(delta), torch.zeros_like(x)
        g_B, g_C, g_A = torch.zeros_like(B), torch.zeros_like(C), torch.zeros_like(A)
        carry = torch.zeros_like(starts[:, 0])  # dL/dh flowing back into the next chunk's start
        for i, t in reversed(list(enumerate(range(0, L, CHUNK)))):
            sl = slice(t, t + CHUNK)
            dx = delta[:, sl] * x[:, sl]
            a = torch.exp(delta[:, sl, :, None] * A)
            b = dx[..., None] * B[:, sl, None, :]
            hs = _chunk_scan(a, b, starts[:, i])
            g_C[:, sl] = (gy[:, sl, :, None] * hs).sum(2)
            direct = gy[:, sl, :, None] * C[:, sl, None, :]  # (B, c, D, N)
            # dL/dh_t = direct_t + a_{t+1} dL/dh_{t+1}, with the last step fed by the carry
            a_next = torch.cat([a[:, 1:], torch.ones_like(a[:, :1])], 1)
            direct[:, -1] += carry
            gh = _chunk_scan(a_next, direct, reverse=True)
            h_prev = torch.cat([starts[:, i, None], hs[:, :-1]], 1)
            g_a = gh * h_prev * a  # through a = exp(delta A)
            g_dx = (gh * B[:, sl, None, :]).sum(-1)
            g_B[:, sl] = (gh * dx[..., None]).sum(2)
            g_delta[:, sl] = (g_a * A).sum(-1) + g_dx * x[:, sl]
            g_x[:, sl] = g_dx * delta[:, sl]
            g_A += (g_a * delta[:, sl, :, None]).sum((0, 1))
            carry = gh[:, 0] * a[:, 0]
        return g_delta, g_A, g_x, g_B, g_C


class Mamba(ReportsKernelPath, nn.Module):
    def __init__(self, cfg: MambaConfig):
        super().__init__()
        d = cfg.d_model
        self.d_inner, self.d_state = cfg.expand * d, cfg.d_state
        self.dt_rank = cfg.dt_rank or math.ceil(d / 16)
        self.kernel = cfg.kernel
        self.in_proj = nn.Linear(d, 2 * self.d_inner, bias=False)
        self.conv1d = nn.Conv1d(self.d_inner, self.d_inner, cfg.d_conv, groups=self.d_inner,
                                padding=cfg.d_conv - 1)
        self.x_proj = nn.Linear(self.d_inner, self.dt_rank + 2 * cfg.d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, self.d_inner)
        nn.init.uniform_(self.dt_proj.weight, -self.dt_rank**-0.5, self.dt_rank**-0.5)
        dt = torch.exp(torch.rand(self.d_inner) * (math.log(0.1) - math.log(0.001))
                       + math.log(0.001)).clamp(min=1e-4)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
        A = torch.arange(1, cfg.d_state + 1, dtype=torch.float32).repeat(self.d_inner, 1)
        self.A_log = nn.Parameter(torch.log(A))  # (D_in, N)
        self.D = nn.Parameter(torch.ones(self.d_inner))
        self.out_proj = nn.Linear(self.d_inner, d, bias=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        L = hidden.shape[1]
        x, z = self.in_proj(hidden).chunk(2, dim=-1)  # each (B, L, D_in)
        x = F.silu(self.conv1d(x.transpose(1, 2))[..., :L])  # (B, D_in, L)
        dt, B, C = self.x_proj(x.transpose(1, 2)).split(
            [self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = dt @ self.dt_proj.weight.T  # (B, L, D_in), bias added with the softplus
        A = -torch.exp(self.A_log.float())
        self.last_path = pick_path(self.kernel, hidden, fused_op)
        if self.last_path == "fused":
            y = fused_op()(
                x, dt.transpose(1, 2), A, B.transpose(1, 2), C.transpose(1, 2), self.D.float(),
                z=z.transpose(1, 2), delta_bias=self.dt_proj.bias.float(), delta_softplus=True,
            ).transpose(1, 2)
        else:
            y = self.reference(x.transpose(1, 2), dt, A, B, C) * F.silu(z)
        return self.out_proj(y)

    def reference(self, x, dt, A, B, C) -> torch.Tensor:
        """Selective scan: x, dt (B, L, D_in); B, C (B, L, N) -> y (B, L, D_in)."""
        delta = F.softplus(dt + self.dt_proj.bias)  # (B, L, D_in)
        return SelectiveScan.apply(delta, A, x, B, C) + self.D * x
