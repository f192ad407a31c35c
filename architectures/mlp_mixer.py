"""Causal MLP-Mixer token mixing: a learned, input-independent (L, L) mixing matrix per group.

Channels are split into `n_heads` groups; group h mixes positions with its own lower-triangular
matrix W_h, so output p is sum_{q <= p} W_h[p, q] x[q]. The pattern is fixed once learned: fast on
a fixed positional pattern, unable to choose it per sequence. Non-linearity comes from the block's
MLP. The matrix is sized for the task's sequence length; position embeddings are not needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from .backbone import ArchConfig, Backbone
from .init import gpt2_backbone


@dataclass
class MLPMixerConfig(ArchConfig):
    name: str = "mlp_mixer"
    positional: bool = False
    n_heads: int = 1
    """channel groups, each with its own token-mixing matrix (must divide d_model)"""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_heads < 1 or self.d_model % self.n_heads:
            raise ValueError(
                f"n_heads: must be >= 1 and divide d_model ({self.d_model}), got {self.n_heads}"
            )

    def memory_per_layer(self, seq_len: int) -> int:
        return seq_len * self.d_model  # every past input is read again

    @torch.no_grad()
    def reference_init(self, model: Backbone) -> None:
        """timm's MlpMixer (`timm.models.mlp_mixer._init_weights`, the default, non-JAX
        variant), the most used public implementation: the token-mixing matrices and every
        channel Linear xavier-uniform, the token- and channel-MLP biases N(0, 1e-6), other biases
        0; the causal mask as before. Embedding, norms and head: the shared GPT-2 backbone
        (timm's image stem and zero classifier head have no counterpart here)."""
        gpt2_backbone(model)
        for block in model.blocks:
            mix = block.mixer
            for h in range(mix.weight.shape[0]):
                nn.init.xavier_uniform_(mix.weight[h])  # (L, L): U(+-sqrt(3 / L))
            nn.init.normal_(mix.bias, std=1e-6)
            nn.init.xavier_uniform_(mix.proj.weight)
            nn.init.zeros_(mix.proj.bias)
            for layer in (block.mlp or [])[1::2]:  # Linear, GELU, Linear after the norm
                nn.init.xavier_uniform_(layer.weight)
                nn.init.normal_(layer.bias, std=1e-6)

    def mixer(self, seq_len: int, pattern: torch.Tensor, layer_idx: int = 0) -> nn.Module:
        return CausalTokenMixing(self.d_model, self.n_heads, seq_len)


class CausalTokenMixing(nn.Module):
    def __init__(self, d_model: int, n_heads: int, seq_len: int):
        super().__init__()
        self.n_heads = n_heads
        self.weight = nn.Parameter(torch.randn(n_heads, seq_len, seq_len) / math.sqrt(seq_len))
        self.bias = nn.Parameter(torch.zeros(n_heads, seq_len, 1))
        self.register_buffer("mask", torch.ones(seq_len, seq_len).tril(), persistent=False)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, D = x.shape
        w = (self.weight[:, :L, :L] * self.mask[:L, :L])  # (H, L, L), zero above the diagonal
        xh = x.view(B, L, self.n_heads, D // self.n_heads).transpose(1, 2)  # (B, H, L, D/H)
        y = w @ xh + self.bias[:, :L]  # (B, H, L, D/H)
        return self.proj(y.transpose(1, 2).reshape(B, L, D))
