"""The pieces of the held-out split that know nothing of a task: a fixed hash of whole states, the
enumeration of a small state space, and evaluation chunks that every rank can share."""

from __future__ import annotations

import torch

MASK31 = (1 << 31) - 1


def state_hash(states: torch.Tensor, salt: int) -> torch.Tensor:
    """(..., S) long tokens -> (...) float in [0, 1): a fixed hash of each whole state.

    A 31-bit multiplicative hash with a murmur-style finaliser, in int64 arithmetic that never
    overflows (every product stays below 2^62), so it is the same on any device."""
    h = torch.full(states.shape[:-1], salt & MASK31, dtype=torch.long, device=states.device)
    for i in range(states.shape[-1]):
        h = ((h * 1000003) ^ states[..., i]) & MASK31
    for _ in range(2):
        h = ((h ^ (h >> 16)) * 0x45D9F3B) & MASK31
    return (h ^ (h >> 16)).double() / (1 << 31)


def all_states(vocab: int, size: int) -> torch.Tensor:
    """(vocab^size, size): every state once, in lexicographic order (vocab=2, size=2: 00 01 10
    11)."""
    digits = vocab ** torch.arange(size - 1, -1, -1)
    return (torch.arange(vocab**size)[:, None] // digits) % vocab


def chunk_bounds(n: int, size: int, world: int) -> list[tuple[int, int]]:
    """Slices of `n` rows of at most `size`, none with fewer rows than ranks (merged back)."""
    bounds = [(a, min(a + size, n)) for a in range(0, n, size)]
    if len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < world:
        bounds[-2:] = [(bounds[-2][0], n)]
    return bounds
