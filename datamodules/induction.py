"""Induction, A B ... A -> B: the first token, random tokens, then copied segments.

A sequence of `length` tokens is token 0 (the same first token in every sequence, where attention
sinks park), `prefix` random tokens from 1 .. V-1, then `n_repeats` segments of `segment` tokens,
each a copy of the run of random tokens at a uniformly drawn place (its source). Inside a copy,
the token after the current one is the one that followed it at the source: an induction head
reads it. Scored: the outputs at a copy's first `segment - 1` tokens (each predicts the next
copied token), the same positions in every sequence; the copy's own first token is
unpredictable and not scored.

The ground-truth pattern of the output at p is the induction rule, read off the sequence: every
earlier position q whose previous token equals token p (the token after each earlier occurrence
of the current one; the source is among them). The Bayes ceiling keeps the sources consistent
with the copy so far (uniform over every place) and predicts their mixture: below 1 where the
current token occurs more than once among the random tokens.

Held out: places a copy may come from. The random tokens never recur between sequences, so
what a small model could memorise is positional: copying from a fixed distance. A training copy
never comes from a held-out place, and every evaluation copy does, so a reader of positions
learned in training fails there while an induction head (which reads content) does not. No
token or bigram is withheld, so the training distribution teaches no prior against the answers.
"""

from __future__ import annotations

from typing import Any

import torch

from .base import EVAL_STREAM, join_tokens, make_generator
from .config import InductionConfig
from .context import ContextTask


class Induction(ContextTask):
    config: InductionConfig
    HELD_NAME = "copy sources"

    def __init__(self, config: InductionConfig, **kwargs: Any):
        super().__init__(config, **kwargs)
        self.vocab_size = config.vocab_size
        self.held = self.held_table(self.n_sources)  # (O,) places a copy may come from
        self.check_split("places a copy may come from", "change held_out or lengthen the "
                         "random tokens (length)")

    @property
    def n_sources(self) -> int:
        """Places a copy may start at among the random tokens."""
        return self.config.prefix - self.config.segment + 1

    def held_counts(self) -> tuple[int, int]:
        return self.n_sources, int(self.held.sum())

    # --- layout -------------------------------------------------------------------------------
    @property
    def n_tokens(self) -> int:
        return self.config.length

    def copy_starts(self) -> list[int]:
        """Token index of each copy's first token."""
        c = self.config
        return [1 + c.prefix + j * c.segment for j in range(c.n_repeats)]

    def loss_mask(self) -> torch.Tensor:
        mask = torch.zeros(self.seq_len, dtype=torch.bool)
        for start in self.copy_starts():
            mask[start : start + self.config.segment - 1] = True
        return mask

    # --- the generator --------------------------------------------------------------------------
    def _sequences(self, n: int, sources: torch.Tensor,
                   generator: torch.Generator) -> torch.Tensor:
        """`n` sequences whose copies each start at one of `sources` (offsets into the random
        tokens), drawn uniformly."""
        c, device = self.config, generator.device
        prefix = torch.randint(1, self.vocab_size, (n, c.prefix), generator=generator,
                               device=device)
        pick = torch.randint(len(sources), (n, c.n_repeats), generator=generator, device=device)
        offsets = sources.to(device)[pick]
        at = offsets[..., None] + torch.arange(c.segment, device=device)  # (n, r, m)
        copies = prefix.gather(1, at.flatten(1))
        first = torch.zeros(n, 1, dtype=torch.long, device=device)
        return torch.cat([first, prefix, copies], dim=1)

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        return self._sequences(n, torch.arange(self.n_sources), generator)

    def training_sequences(self, n: int, generator: torch.Generator) -> torch.Tensor:
        return self._sequences(n, (~self.held).nonzero().squeeze(1), generator)

    def held_out_sequences(self) -> tuple[torch.Tensor, torch.Tensor]:
        """`eval_size` sequences whose every copy comes from a held-out place; every scored
        target counts."""
        tokens = self._sequences(self.eval_size, self.held.nonzero().squeeze(1),
                                 make_generator(self.instance_seed, EVAL_STREAM, 1,
                                                torch.device("cpu")))
        return tokens, self.loss_mask().expand(len(tokens), -1).clone()

    def sources_matching(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, n_repeats, O) bool: the places each copy's tokens equal."""
        c = self.config
        windows = tokens[:, 1 : 1 + c.prefix].unfold(1, c.segment, 1)  # (N, O, m)
        copies = torch.stack([tokens[:, s : s + c.segment] for s in self.copy_starts()], dim=1)
        return (windows[:, None] == copies[:, :, None]).all(-1)

    def leaks(self, steps: range, device: torch.device = torch.device("cpu")) -> int:
        """Training copies that match a held-out place and no training place (so they came
        from a held-out one)."""
        held = self.held.to(device)
        found = 0
        for step in steps:
            match = self.sources_matching(join_tokens(self.train_batch(step, device)))
            found += int(((match & held).any(-1) & ~(match & ~held).any(-1)).sum())
        return found

    # --- what is scored and read ------------------------------------------------------------------
    def patterns(self, tokens: torch.Tensor) -> torch.Tensor:
        """Row p: every earlier position q >= 2 whose previous token is token p."""
        at = self.scored_positions().to(tokens.device)
        L = self.seq_len
        q = torch.arange(L, device=tokens.device)
        previous = torch.cat([tokens.new_full((len(tokens), 1), -1), tokens[:, : L - 1]], dim=1)
        match = previous[:, None, :] == tokens[:, at][:, :, None]  # (N, P, L)
        return (match & (q[None, None, :] < at[None, :, None])
                & (q >= 2)[None, None, :]).float()

    def next_token_posterior(self, tokens: torch.Tensor) -> torch.Tensor:
        c, V = self.config, self.vocab_size
        N = len(tokens)
        if c.random_targets:
            return torch.full((N, int(self.loss_mask().sum()), V), 1 / V)
        windows = tokens[:, 1 : 1 + c.prefix].unfold(1, c.segment, 1)  # (N, O, m) sources
        out = []
        for start in self.copy_starts():
            copy = tokens[:, start : start + c.segment]  # (N, m)
            consistent = (windows == copy[:, None, :]).long().cumprod(-1)  # matches so far
            for k in range(c.segment - 1):
                # each consistent source votes for the token that follows it: (N, V)
                mix = torch.zeros(N, V, device=tokens.device)
                mix.scatter_add_(1, windows[:, :, k + 1], consistent[:, :, k].float())
                out.append(mix / mix.sum(-1, keepdim=True))
        return torch.stack(out, dim=1)

    # --- what `bench task` shows ----------------------------------------------------------------
    def summary(self) -> str:
        c = self.config
        return (f"the first token 0, {c.prefix} random tokens of 1..{c.vocab_size - 1}, then "
                f"{c.n_repeats} copied segments of {c.segment}")

    def sample_rows(self, tokens: torch.Tensor) -> list[str]:
        c, t = self.config, tokens.tolist()
        rows = [f"  first: {t[0]}", "  random: " + " ".join(map(str, t[1 : 1 + c.prefix]))]
        for j, start in enumerate(self.copy_starts()):
            rows.append(f"  copy {j}: " + " ".join(map(str, t[start : start + c.segment])))
        return rows

    def hidden(self) -> dict[str, Any]:
        return {"held_out_sources": self.held.nonzero().squeeze(1).tolist()}

    def rule_text(self, hidden: dict[str, Any]) -> list[str]:
        held = hidden["held_out_sources"]
        return [f"held-out copy sources (offsets into the random tokens, of 0..{self.n_sources - 1}"
                f"): {' '.join(map(str, held))}"]
