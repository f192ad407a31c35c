"""How a freshly built model's weights start: `arch.init`.

- `reference` (the default): as each architecture's reference implementation starts its language
  model. Each config's `reference_init(model)` says which and cites it; the shared pieces are here:
  - GPT-2 / nanoGPT (`gpt2_`): every Linear and Embedding N(0, 0.02), biases 0, LayerNorms 1 and
    0, and the residual output projections (the mixer's and the MLP's last layer) at
    0.02 / sqrt(N) for N residual branches (nanoGPT's 2 n_layers where every block has an MLP);
  - the backbone of a plug-in follows GPT-2; its mixer keeps the initialisation it gives itself.
- `torch`: PyTorch's module defaults as built (token embedding N(0, 1), Linear Kaiming-uniform,
  learned positions N(0, 0.02)): what every board before 2026-12-07 ran. A stored record without
  the field reads as `torch`, and `torch` is left out of job ids, so those records keep theirs.
- `embedding`: `torch`, except the token embedding drawn N(0, 0.02): a measurement arm that moves
  only the token-to-position ratio, never a candidate default.

The LM head is not tied to the token embedding here (GPT-2, mamba_ssm and fla's GDN tie or may
tie it): it is drawn as the reference draws the tied matrix, N(0, 0.02), with a zero bias.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Literal

import torch
from torch import nn

Init = Literal["reference", "torch", "embedding"]
INITS: tuple[str, ...] = ("reference", "torch", "embedding")
STD = 0.02  # GPT-2's initializer_range, also fla's and mamba_ssm's embedding std


@torch.no_grad()
def initialise(model: nn.Module, init: str, config) -> None:  # (Backbone, ..., ArchConfig)
    """Apply `init` to a model built with PyTorch's defaults (`torch` draws nothing more, so its
    random stream, and every run it started, stays as it was)."""
    if init == "torch":
        return
    if init == "embedding":
        nn.init.normal_(model.embed.weight, std=STD)
        return
    if init != "reference":
        raise ValueError(f"init: must be one of {', '.join(INITS)}, got {init!r}")
    config.reference_init(model)


def backbone_parts(model: nn.Module) -> Iterator[nn.Module]:
    """Every module of the shared backbone that is not a token mixer: embedding, the blocks'
    norms and MLPs, the final norm and the head."""
    yield model.embed
    for block in model.blocks:
        yield block.norm
        if block.mlp is not None:
            yield block.mlp
    yield model.norm
    yield model.head


def residual_branches(model: nn.Module) -> int:
    """N, the residual branches the output projections are scaled by (GPT-2's 1 / sqrt(N))."""
    return sum(1 + (block.mlp is not None) for block in model.blocks)


@torch.no_grad()
def gpt2_(module: nn.Module, std: float = STD,
          also: tuple[type[nn.Module], ...] = ()) -> None:
    """GPT-2 / nanoGPT `_init_weights` on every submodule: Linear (and the types in `also`)
    and Embedding N(0, std), biases 0, LayerNorm 1 and 0; other modules untouched."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, *also)):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)
        elif isinstance(m, nn.LayerNorm):
            m.reset_parameters()


@torch.no_grad()
def gpt2_backbone(model: nn.Module, mixer_outputs: list[torch.Tensor] = ()) -> None:
    """GPT-2 on the backbone's parts (and the learned positions), with the MLPs' and the given
    mixer output projections at STD / sqrt(N): the built-in transformer's and every plug-in's
    backbone."""
    for part in backbone_parts(model):
        gpt2_(part)
    if model.pos is not None:
        nn.init.normal_(model.pos, std=STD)
    std = STD / math.sqrt(residual_branches(model))
    for weight in [*mixer_outputs, *mlp_outputs(model)]:
        nn.init.normal_(weight, std=std)


def mlp_outputs(model: nn.Module) -> list[torch.Tensor]:
    """The weights of the blocks' MLP output layers (GPT-2's mlp.c_proj, fla's down_proj,
    mamba_ssm's fc2)."""
    return [block.mlp[-1].weight for block in model.blocks if block.mlp is not None]


def mlp_inputs(model: nn.Module) -> list[nn.Linear]:
    """The blocks' MLP input layers (GPT-2's mlp.c_fc, fla's up_proj / RWKV-7's ffn.key)."""
    return [block.mlp[1] for block in model.blocks if block.mlp is not None]


@torch.no_grad()
def kaiming_rescaled_(weight: torch.Tensor, n: int) -> None:
    """PyTorch's Linear default (Kaiming-uniform, a = sqrt(5)) divided by sqrt(n): the residual
    rescaling of mamba_ssm's `_init_weights` (and fla's `rescale` strategy)."""
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
    weight /= math.sqrt(n)


@torch.no_grad()
def zero_biases(module: nn.Module, keep: tuple[torch.Tensor, ...] = ()) -> None:
    """Every Linear bias of `module` to 0, except the tensors in `keep`."""
    for m in module.modules():
        if isinstance(m, nn.Linear) and m.bias is not None and \
                not any(m.bias is k for k in keep):
            nn.init.zeros_(m.bias)
