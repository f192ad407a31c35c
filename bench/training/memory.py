"""What a run will hold in memory, estimated before anything is allocated.

The terms are upper-end estimates in bytes, each named by the config field that drives it, so a
run that cannot fit stops with one line instead of an allocator traceback (or swapping):
parameters with their gradients and AdamW state (counted on the meta device: nothing allocated),
training activations, the evaluation's chunked forward passes, and the task's hidden rule; for
a run with a warm-up, the larger of its two phases.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

import torch

from architectures import Backbone
from architectures.backbone import RecurrentConfig
from architectures.plugins import one_line
from datamodules.base import EVAL_TOKENS

from ..core.errors import ConfigError

if TYPE_CHECKING:
    from .config import RunConfig

FLOAT = 4  # bytes: training runs in float32 (mixed precision only lowers the estimate)
SAFETY = 2  # allocator slack, autograd's saved tensors beyond the counted ones


def activations_per_sequence(cfg: RunConfig, mixer_params: int) -> int:
    """Floats one training sequence keeps for the backward pass: every block's residual stream,
    norms and MLP (about (16 + 4 x mlp_ratio) x D per token), the mixer's projections (its
    parameters per layer / D outputs per token, twice), plus an attention mixer's (H, L, L)
    scores, probabilities and their gradients, plus a recurrent reference's chunked states."""
    arch, L = cfg.arch, cfg.task.seq_len
    per_layer = L * arch.d_model * (16 + 4 * arch.mlp_ratio)
    per_layer += 2 * L * (mixer_params // arch.d_model)
    per_layer += 3 * arch.score_matrices(L) * L * L
    if isinstance(arch, RecurrentConfig):  # a reference keeps a state per chunk of ~16 tokens
        per_layer += (arch.memory_per_layer(L) or 0) * L // 16
    return arch.n_layers * per_layer + L * cfg.task.vocab * 3  # + logits, softmax, gradient


def parameter_count(cfg: RunConfig) -> tuple[int, int]:
    """(the model's parameters, the largest mixer's), built on the meta device (no memory is
    allocated)."""
    L = cfg.task.seq_len
    pattern = torch.zeros(L, L, device="meta")
    try:
        with torch.device("meta"):
            model = Backbone(cfg.arch, cfg.task.vocab, L, pattern)
    except Exception as e:  # a plug-in's constructor is user code: one line, whatever it raised
        raise ConfigError(f"arch.name: mixer '{cfg.arch.name}' failed to build: {one_line(e)}") \
            from None
    mixers = [sum(p.numel() for p in block.mixer.parameters()) for block in model.blocks]
    return sum(p.numel() for p in model.parameters()), max(mixers, default=0)


def estimate(cfg: RunConfig) -> dict[str, int]:
    """Bytes per term, keyed by the config field that drives the term."""
    L = cfg.task.seq_len
    params, mixer_params = parameter_count(cfg)
    per_sequence = activations_per_sequence(cfg, mixer_params) * FLOAT
    # sequences per evaluation forward pass: a chunk of the set, or all of a small one
    eval_rows = max(1, min(EVAL_TOKENS // L, cfg.train.eval_size + cfg.train.probe_size))
    return {
        "arch": params * FLOAT * 4,  # weights, gradients, two AdamW moments
        "train.batch_size": cfg.train.batch_size * per_sequence * SAFETY,
        "train.eval_size": eval_rows * per_sequence // 3  # no gradients kept
        + (cfg.train.eval_size + cfg.train.probe_size) * (L + 1) * 8,
        "task": cfg.task.table_bytes(),
    }


def available_bytes(device: str) -> int | None:
    """Free memory where the run will train: the GPU's, else this machine's; None if unknown."""
    if device == "cuda":
        return torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else None
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def run_device(cfg: RunConfig) -> str:
    """Where the run will train: cuda or cpu (Lightning's `auto` picks a visible GPU)."""
    accelerator = str(cfg.runtime.accelerator)
    gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    return "cuda" if gpu else "cpu"


def phases(cfg: RunConfig) -> list[dict[str, int]]:
    """The estimate of each phase: the target run, and a warm-up (pretrain) before it, which
    trains its own model on its own task while the target model's weights already exist."""
    target = estimate(cfg)
    if cfg.pretrain is None:
        return [target]
    warm = estimate(dataclasses.replace(cfg, task=cfg.pretrain.task, pretrain=None))
    warm = {("pretrain.task" if k == "task" else k): v for k, v in warm.items()}
    warm["arch"] += target["arch"] // 4  # the target's weights, no gradients or moments yet
    return [target, warm]


def check_memory(cfg: RunConfig) -> dict[str, int]:
    """The estimate of the larger phase, or a one-line ConfigError naming its largest term's
    field when the total exceeds the free memory where the run will train."""
    device = run_device(cfg)
    terms = max(phases(cfg), key=lambda t: sum(t.values()))
    free, total = available_bytes(device), sum(terms.values())
    if free is not None and total > free:
        field = max(terms, key=terms.get)
        raise ConfigError(
            f"{field}: the run needs about {total / 2**30:.1f} GiB ({field}: "
            f"{terms[field] / 2**30:.1f} GiB), more than the {free / 2**30:.1f} GiB free on "
            f"{device}; lower it")
    return terms
