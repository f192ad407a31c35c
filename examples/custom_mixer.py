"""A token mixer of your own, trained by `bench` without a fork (the whole path, from writing
it to reading its row of a leaderboard: examples/README.md and examples/walkthrough.py).

A plug-in mixer is an nn.Module whose constructor takes (d_model, seq_len, layer_idx) and
keyword fields with defaults and int/float/bool/str annotations (they become `arch.*` fields),
and whose forward maps (B, L, D) -> (B, L, D) causally: output p may read inputs 0..p only.

By dotted path, from the repository root:
    bench run arch.name=examples.custom_mixer:CausalConvMixer arch.kernel_size=8
By registration, in your own script:
    from architectures import register
    register("causal_conv", CausalConvMixer)
    ... then arch.name=causal_conv, e.g. `python examples/custom_mixer.py run arch.name=causal_conv`
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CausalConvMixer(nn.Module):
    """A depthwise causal convolution over the last `kernel_size` positions, then a projection."""

    def __init__(self, d_model: int, seq_len: int, layer_idx: int, *, kernel_size: int = 4):
        super().__init__()
        self.kernel_size = kernel_size
        self.weight = nn.Parameter(torch.randn(d_model, 1, kernel_size) / kernel_size**0.5)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.pad(x.transpose(1, 2), (self.kernel_size - 1, 0))  # left padding keeps it causal
        h = F.conv1d(h, self.weight, groups=x.shape[-1])  # (B, D, L)
        return self.proj(F.gelu(h.transpose(1, 2)))


if __name__ == "__main__":
    from architectures import register
    from bench.cli import main

    register("causal_conv", CausalConvMixer)
    main()
