"""Causal softmax attention with the head size decoupled from the model width.

`n_heads` x `head_dim` need not equal `d_model`, so 128 heads of size 1 are a valid config.
`attention_bias` = c adds c x (the task's ground-truth pattern) to the attention logits: the
intervention that hands the model the sparse pattern. Set `record_attention` on a mixer to keep
its attention probabilities (B, H, L, L) of the last forward in `last_attention`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .backbone import ArchConfig, Backbone
from .init import gpt2_, gpt2_backbone
from .protocols import PatchesAttention


@dataclass
class TransformerConfig(ArchConfig):
    name: str = "transformer"
    n_heads: int = 4
    """attention heads H"""
    head_dim: int = 16
    """size of each head's queries, keys and values (independent of d_model)"""
    attention_bias: float = 0.0
    """c: add c x the ground-truth pattern to the attention logits (0 = no intervention)"""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.require_at_least(1, "n_heads", "head_dim")

    def memory_per_layer(self, seq_len: int) -> int:
        return 2 * self.n_heads * self.head_dim * seq_len  # the key-value cache

    def score_matrices(self, seq_len: int) -> int:
        return self.n_heads

    def reference_init(self, model: Backbone) -> None:
        """GPT-2 / nanoGPT (transformers' GPT2PreTrainedModel._init_weights, nanoGPT's
        model.py): every weight N(0, 0.02), biases 0, the attention and MLP output projections
        at 0.02 / sqrt(2 n_layers)."""
        for block in model.blocks:
            gpt2_(block.mixer)
        gpt2_backbone(model, [block.mixer.out.weight for block in model.blocks])

    def mixer(self, seq_len: int, pattern: torch.Tensor, layer_idx: int = 0) -> nn.Module:
        return CausalSelfAttention(
            self.d_model, self.n_heads, self.head_dim, seq_len, self.attention_bias * pattern
        )


class CausalSelfAttention(PatchesAttention, nn.Module):
    def __init__(self, d_model: int, n_heads: int, head_dim: int, seq_len: int, bias: torch.Tensor):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, head_dim
        self.qkv = nn.Linear(d_model, 3 * n_heads * head_dim, bias=False)
        self.out = nn.Linear(n_heads * head_dim, d_model, bias=False)
        causal = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
        logits_bias = bias.float().masked_fill(~causal, float("-inf"))  # (L, L)
        self.register_buffer("logits_bias", logits_bias, persistent=False)
        self.plain_causal = bias.is_meta or not bool(bias.any())  # meta: counting parameters

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        H, Dh = self.n_heads, self.head_dim
        q, k, v = self.qkv(x).view(B, L, 3, H, Dh).permute(2, 0, 3, 1, 4)  # each (B, H, L, Dh)
        bias = self.logits_bias[:L, :L].to(q.dtype)
        if self.needs_probs:  # recorded or patched: the probabilities formed explicitly
            scores = (q @ k.transpose(-1, -2)) * Dh**-0.5 + bias  # (B, H, L, L)
            y = self.use_attention(scores.softmax(dim=-1)) @ v
        elif self.plain_causal:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return self.out(y.transpose(1, 2).reshape(B, L, H * Dh))  # (B, L, D)
