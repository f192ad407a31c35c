"""In-context tasks: what a scored token must read is drawn with the sequence (a copied
segment's source, a key's value), so the ground-truth pattern is per sequence.

Each holds out a part of what its sequences are made of, chosen by a fixed hash salted by the
task instance (the places a copy may come from, the key-value bindings): no training sequence
uses a held-out one, and the evaluation counts only the scored targets that depend on one. A
model answers those by reading its context, not by recalling anything it was trained on.
"""

from __future__ import annotations

import math

import torch

from .base import EVAL_STREAM, SequenceTask, derive_seed
from .split import state_hash

HASH_CHUNK = 1 << 20  # indices hashed at once


class ContextTask(SequenceTask):
    """Base DataModule of the in-context tasks."""

    PER_SEQUENCE_PATTERN = True
    HELD_NAME = "parts"  # what the held-out things are called in `split_sizes`

    def held_table(self, *shape: int) -> torch.Tensor:
        """(*shape) bool: which of the items indexed by `shape` this instance holds out (a
        fixed hash of each index), on the CPU."""
        salt = derive_seed(self.instance_seed, EVAL_STREAM)
        first, rest = shape[0], shape[1:]
        # in slices of the first index: a hash of 2^24 indices at once holds ~1 GB of int64s
        step = max(1, HASH_CHUNK // max(1, math.prod(rest)))
        parts = []
        for start in range(0, first, step):
            axes = (torch.arange(start, min(start + step, first)),
                    *(torch.arange(n) for n in rest))
            grid = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1)
            parts.append(state_hash(grid, salt) < self.config.held_out)
        return torch.cat(parts)

    def held_counts(self) -> tuple[int, int]:
        """(items, held-out items)."""
        raise NotImplementedError

    def split_sizes(self) -> dict[str, int]:
        es = self.eval_set(torch.device("cpu"))
        total, held = self.held_counts()
        name = self.HELD_NAME
        return {name: total, f"held_out_{name}": held, f"training_{name}": total - held,
                "evaluated_sequences": int((~es.probe).sum()),
                "evaluated_targets": int(es.counted[~es.probe].sum()),
                "probe_sequences": int(es.probe.sum())}

    def split_text(self, split: dict[str, int]) -> str:
        name = self.HELD_NAME
        return (f"{split[f'held_out_{name}']:,} of {split[name]:,} {name} held out (never in a "
                f"training sequence); {split['evaluated_targets']:,} held-out targets evaluated "
                f"in {split['evaluated_sequences']:,} sequences")

    def attention_target(self) -> torch.Tensor:
        target = torch.zeros(self.seq_len, self.seq_len)
        target[self.scored_positions()] = self.patterns(self.eval_tokens()).mean(0)
        return target

    def check_split(self, what: str, remedy: str) -> None:
        """One line unless the instance holds out some but not all of its items."""
        total, held = self.held_counts()
        if not 0 < held < total:
            raise ValueError(f"held_out: at {self.config.held_out}, instance "
                             f"{self.instance_seed} holds out {held} of the {total} {what}; "
                             f"{remedy}")
