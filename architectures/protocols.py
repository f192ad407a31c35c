"""What a mixer may offer beyond (B, L, D) -> (B, L, D), declared as small base classes.

A mixer inherits the ones it implements; the runner and the analysis ask `isinstance`, never
`hasattr`, and the plug-in contract (`check_mixer`) checks what each one promises, so a plug-in
that declares one gets the same treatment as a built-in:

- `RecordsAttention`: with `record_attention` set, the last forward keeps its attention
  probabilities (B, H, L, L) in `last_attention` (rows sum to 1, nothing above the diagonal).
  The runner then logs the attention mass on the ground-truth parents (`val/parent_mass`) and
  draws the learned maps.
- `PatchesAttention` (a `RecordsAttention`): its forward uses the probabilities
  `self.use_attention(probs)` returns, so `bench patch` can replace any head's attention with
  another checkpoint's or the ground truth's (the contract checks that a patch takes effect).
- `ReportsKernelPath`: `last_path` says which implementation the last forward ran ("fused" or
  "reference"); result.json records it as `kernel_path`.
- `UsesContext`: `forward(x, context)` also receives a dict shared by the blocks of one forward
  pass (RWKV-7 passes its first layer's values on through it).

The ground-truth pattern reaches a mixer only through its config's `mixer(seq_len, pattern,
layer_idx)`: the built-in attention uses it for the `attention_bias` intervention; plug-ins built
from an `nn.Module` never receive it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class RecordsAttention:
    record_attention: bool = False
    """set by the runner around evaluation passes"""
    last_attention: torch.Tensor | None = None
    """(B, H, L, L) probabilities of the last forward with `record_attention` set"""

    def keep_attention(self, probs: torch.Tensor) -> None:
        """Call from forward with the (B, H, L, L) probabilities; kept only when recording."""
        if self.record_attention:
            self.last_attention = probs.detach()


class PatchesAttention(RecordsAttention):
    attention_patch: Callable[[torch.Tensor], torch.Tensor] | None = None
    """set by `bench patch`: maps this forward's (B, H, L, L) probabilities to the ones used"""

    @property
    def needs_probs(self) -> bool:
        """Whether this forward must form the probabilities explicitly (not a fused kernel)."""
        return self.record_attention or self.attention_patch is not None

    def use_attention(self, probs: torch.Tensor) -> torch.Tensor:
        """Call from forward with the (B, H, L, L) probabilities and compute with what it
        returns: replaced where a patch is set, kept when recording."""
        if self.attention_patch is not None:
            probs = self.attention_patch(probs)
        self.keep_attention(probs)
        return probs


class ReportsKernelPath:
    last_path: str | None = None
    """"fused" or "reference": the implementation the last forward ran"""


class UsesContext:
    """Marker: `forward(x, context)` takes the dict the blocks of one forward pass share."""
