"""The one backbone every architecture shares; only the token mixer changes.

embedding (+ learned absolute positions where the mixer needs them) -> n_layers pre-norm blocks
of (mixer, optional MLP) -> final norm -> LM head. A mixer maps (B, L, D) -> (B, L, D) causally.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from .init import INITS, Init, gpt2_backbone, initialise
from .protocols import UsesContext

MAX_SIZE = 2**16  # any integer field of an architecture
MAX_LAYERS = 1024


@dataclass
class ArchConfig:
    """Fields every architecture has; each architecture's config subclasses this."""

    name: str = ""
    d_model: int = 64
    """model width D"""
    n_layers: int = 2
    """number of blocks"""
    mlp_ratio: int = 4
    """hidden width of each block's MLP as a multiple of D; 0 drops the MLP"""
    positional: bool = True
    """add learned absolute position embeddings to the token embeddings"""
    init: Init = "reference"
    """how the weights start: reference (the architecture's reference implementation, see
    architectures/init.py), torch (PyTorch's module defaults: the boards before 2026-12-07) or
    embedding (torch with the token embedding at N(0, 0.02): a measurement arm)"""

    def __post_init__(self) -> None:
        if self.init not in INITS:
            raise ValueError(f"init: must be one of {', '.join(INITS)}, got {self.init!r}")
        self.require_at_least(1, "d_model", "n_layers")
        self.require_at_least(0, "mlp_ratio")
        for f in fields(self):  # every size has a ceiling (memory is estimated before a run)
            value, high = getattr(self, f.name), MAX_LAYERS if f.name == "n_layers" else MAX_SIZE
            if isinstance(value, int) and not isinstance(value, bool) and value > high:
                raise ValueError(f"{f.name}: must be <= {high}, got {value}")

    def require_at_least(self, minimum: int, *fields: str) -> None:
        """One-line ValueError naming the first of `fields` below `minimum`."""
        for field in fields:
            if getattr(self, field) < minimum:
                raise ValueError(f"{field}: must be >= {minimum}, got {getattr(self, field)}")

    def memory_per_layer(self, seq_len: int) -> int | None:
        """Numbers one layer keeps per sequence to produce the next token after `seq_len` tokens
        (a recurrent state, or a cache that grows with the context); None where unknown."""
        return None

    def score_matrices(self, seq_len: int) -> int:
        """(L, L) score matrices one layer computes per sequence (attention heads; 0 for mixers
        without them): the memory estimate counts them before a run allocates."""
        return 0

    def mixer(self, seq_len: int, pattern: torch.Tensor, layer_idx: int) -> nn.Module:
        """A new token mixer for block `layer_idx`, inputs up to `seq_len` long.

        `pattern` is the task's (L, L) ground truth, for mixers that use it.
        """
        raise NotImplementedError

    def reference_init(self, model: Backbone) -> None:
        """`init=reference` on a built model: the backbone as GPT-2 / nanoGPT starts it; the
        mixer keeps its own initialisation (a plug-in's default). Each built-in overrides this
        with its reference implementation's, and names it."""
        gpt2_backbone(model)


@dataclass
class RecurrentConfig(ArchConfig):
    """Shared by the mixers that have a fused library kernel and a pure-torch reference."""

    positional: bool = False
    kernel: Literal["auto", "fused", "reference"] = "auto"
    """auto: the library's fused kernel on CUDA, the pure-torch reference elsewhere"""


class Block(nn.Module):
    """x + mixer(norm(x)), then x + MLP(norm(x)) when the block has one.

    A `UsesContext` mixer also receives `context`, a dict shared by the blocks of one forward
    pass (RWKV-7 passes its first layer's values on through it).
    """

    def __init__(self, d_model: int, mixer: nn.Module, mlp_ratio: int):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.mixer = mixer
        self.mlp = None
        if mlp_ratio:
            self.mlp = nn.Sequential(
                nn.LayerNorm(d_model),
                nn.Linear(d_model, mlp_ratio * d_model),
                nn.GELU(),
                nn.Linear(mlp_ratio * d_model, d_model),
            )

    def forward(self, x: torch.Tensor, context: dict | None = None) -> torch.Tensor:
        h = self.norm(x)
        x = x + (self.mixer(h, context) if isinstance(self.mixer, UsesContext) else
                 self.mixer(h))
        if self.mlp is not None:
            x = x + self.mlp(x)
        return x


class Backbone(nn.Module):
    """Token ids (B, L) -> next-token logits (B, L, V)."""

    def __init__(self, config: ArchConfig, vocab_size: int, seq_len: int, pattern: torch.Tensor):
        super().__init__()
        d = config.d_model
        self.embed = nn.Embedding(vocab_size, d)
        self.pos = nn.Parameter(0.02 * torch.randn(seq_len, d)) if config.positional else None
        self.blocks = nn.ModuleList(
            Block(d, config.mixer(seq_len, pattern, i), config.mlp_ratio)
            for i in range(config.n_layers)
        )
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab_size)
        initialise(self, config.init, config)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)  # (B, L, D)
        if self.pos is not None:
            x = x + self.pos[: tokens.shape[1]]
        context: dict = {}
        for block in self.blocks:
            x = block(x, context)
        return self.head(self.norm(x))


# --- pieces the recurrent mixers share ----------------------------------------------------------


def short_conv(channels: int, kernel_size: int, bias: bool = False) -> nn.Conv1d:
    """Depthwise causal conv on (B, C, L); keep the first L outputs (fla's ShortConvolution)."""
    return nn.Conv1d(channels, channels, kernel_size, padding=kernel_size - 1, groups=channels,
                     bias=bias)


class GatedRMSNorm(nn.Module):
    """RMS-normalise the last dim, scale by `weight`, gate by silu(g) (fla's FusedRMSNormGated)."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return (y * F.silu(g.float())).to(x.dtype)


def lazy_op(module: str, name: str) -> Callable[[], Any]:
    """`module.name` imported on first call, None where it does not import. fla's import alone
    takes seconds (Triton), and only the mixers that run its ops should pay it."""

    @functools.cache
    def load() -> Any:
        try:
            with warnings.catch_warnings():  # fla warns on import where Triton has no GPU
                warnings.simplefilter("ignore", UserWarning)
                return getattr(importlib.import_module(module), name)
        except ImportError:
            return None

    return load


def require_fused(choice: str, kernel: Callable[[], Any], library: str) -> None:
    """A config asking for the fused path needs the library kernel and CUDA."""
    if choice == "fused" and (not torch.cuda.is_available() or kernel() is None):
        raise ValueError(f"kernel: 'fused' needs CUDA and {library}; allowed here: auto, reference")


def pick_path(choice: str, x: torch.Tensor, kernel: Callable[[], Any]) -> str:
    """`fused` for the library kernel, `reference` for the pure-torch path."""
    if choice == "reference" or not x.is_cuda or kernel() is None:
        if choice == "fused":
            raise RuntimeError("kernel='fused' needs a CUDA input and the library kernel")
        return "reference"
    return "fused"
