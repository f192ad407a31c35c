"""Mamba (Gu & Dao 2023): the selective state-space mixer.

The module creates exactly the parameters of `mamba_ssm.Mamba` (in_proj, conv1d, x_proj, dt_proj,
A_log, D, out_proj), so a state dict loads into either. Two paths compute one function:
- fused: mamba_ssm's CUDA `selective_scan_fn`, on CUDA when mamba_ssm imports (the `gpu` extra);
- reference: a log-depth parallel scan in pure torch (no per-token loop), on any device.
Per channel: h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t, y_t = C_t h_t + D x_t, gated by silu(z).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from .backbone import ArchConfig, fused_available, pick_path

try:
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
except ImportError:  # no CUDA extension here: the reference path runs
    selective_scan_fn = None


@dataclass
class MambaConfig(ArchConfig):
    name: str = "mamba"
    positional: bool = False
    d_state: int = 16
    """state size N per channel"""
    d_conv: int = 4
    """kernel of the causal depthwise convolution"""
    expand: int = 2
    """inner width as a multiple of d_model"""
    dt_rank: int = 0
    """rank of the step-size projection; 0 = ceil(d_model / 16) as in mamba_ssm"""
    kernel: Literal["auto", "fused", "reference"] = "auto"
    """auto: mamba_ssm's fused scan on CUDA, the reference elsewhere"""

    def __post_init__(self) -> None:
        super().__post_init__()
        for field in ("d_state", "d_conv", "expand"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field}: must be >= 1, got {getattr(self, field)}")
        if self.dt_rank < 0:
            raise ValueError(f"dt_rank: must be >= 0 (0 = auto), got {self.dt_rank}")
        if self.kernel == "fused" and not fused_available(selective_scan_fn):
            raise ValueError(
                "kernel: 'fused' needs CUDA and mamba_ssm; allowed here: auto, reference"
            )

    def mixer(self, seq_len: int, pattern: torch.Tensor) -> nn.Module:
        return Mamba(self)


def _scan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + b_t along dim 1 (h_{-1} = 0), in log2(L) steps (Hillis-Steele)."""
    a, b = a.clone(), b.clone()
    offset, L = 1, a.shape[1]
    while offset < L:
        b[:, offset:] += a[:, offset:] * b[:, :-offset]  # the product is formed before the add
        a[:, offset:] = a[:, offset:] * a[:, :-offset]
        offset *= 2
    return b


class _LinearScan(torch.autograd.Function):
    """The scan with a hand-written backward: itself a scan, backwards in time."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        h = _scan(a, b)
        ctx.save_for_backward(a, h)
        return h

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, h = ctx.saved_tensors
        # dL/dh_t = grad_t + a_{t+1} dL/dh_{t+1}
        a_next = torch.cat([a[:, 1:], torch.zeros_like(a[:, :1])], dim=1)
        gh = _scan(a_next.flip(1), grad.flip(1)).flip(1)
        h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)
        return gh * h_prev, gh


def parallel_scan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """h_t = a_t * h_{t-1} + b_t along dim 1, differentiable in a and b."""
    return _LinearScan.apply(a, b)


class Mamba(nn.Module):
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
        self.last_path: str | None = None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        L = hidden.shape[1]
        x, z = self.in_proj(hidden).chunk(2, dim=-1)  # each (B, L, D_in)
        x = F.silu(self.conv1d(x.transpose(1, 2))[..., :L])  # (B, D_in, L)
        dt, B, C = self.x_proj(x.transpose(1, 2)).split(
            [self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = dt @ self.dt_proj.weight.T  # (B, L, D_in), bias added with the softplus
        A = -torch.exp(self.A_log.float())
        self.last_path = pick_path(self.kernel, hidden, selective_scan_fn)
        if self.last_path == "fused":
            y = selective_scan_fn(
                x, dt.transpose(1, 2), A, B.transpose(1, 2), C.transpose(1, 2), self.D.float(),
                z=z.transpose(1, 2), delta_bias=self.dt_proj.bias.float(), delta_softplus=True,
            ).transpose(1, 2)
        else:
            y = self.reference(x.transpose(1, 2), dt, A, B, C) * F.silu(z)
        return self.out_proj(y)

    def reference(self, x, dt, A, B, C) -> torch.Tensor:
        """Selective scan: x, dt (B, L, D_in); B, C (B, L, N) -> y (B, L, D_in)."""
        delta = F.softplus(dt + self.dt_proj.bias)  # (B, L, D_in)
        decay = torch.exp(delta.unsqueeze(-1) * A)  # (B, L, D_in, N)
        drive = (delta * x).unsqueeze(-1) * B.unsqueeze(2)  # (B, L, D_in, N)
        h = parallel_scan(decay, drive)
        return (h * C.unsqueeze(2)).sum(-1) + self.D * x
