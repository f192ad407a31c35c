"""Dyck-k: balanced brackets of k types, a pre-pretraining corpus with a known pattern.

A sequence is exactly `length` tokens, balanced at the end and never deeper than `max_depth`.
Tokens 0..k-1 open a bracket of that type, k..2k-1 close one. Left to right: at depth 0 a
bracket opens (its type uniform); where the depth is `max_depth`, or the tokens left only
suffice to close what is open, the innermost bracket closes; otherwise it opens with probability
`p_open`. With k = 2, length 8: `( [ ] ) [ ( ) ]` is tokens 0 1 3 2 1 0 2 3.

Every next token is trained (a language model's loss). Scored: the positions whose next token is
*determined*, a forced close, whose answer is the closer of the innermost open bracket; that
bracket's position is the ground-truth pattern (per sequence). The Bayes ceiling is 1 there.

Held out: stacks, the types of the open brackets outer to inner, at depth >= 2, by a fixed hash
salted by the instance. Training sequences never hold one (an opening that would make a held-out
stack picks another type, or closes when every type would), so no stack below one occurs either.
The evaluation draws sequences freely and counts the forced closes inside a held-out stack: a
model that memorised stacks seen in training fails there; one that reads the matching bracket
does not.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import torch

from .base import EVAL_STREAM, MAX_ROUNDS, derive_seed, join_tokens, make_generator
from .config import DyckConfig
from .context import ContextTask
from .split import all_states, state_hash


class Trace(NamedTuple):
    """What a left-to-right reader knows after each token of (N, n) sequences, each (N, n)."""

    depth: torch.Tensor  # open brackets
    top_type: torch.Tensor  # type of the innermost open bracket (-1 at depth 0)
    top_pos: torch.Tensor  # its position (-1 at depth 0)
    held: torch.Tensor  # bool: the stack is, or lies below, a held-out stack
    forced: torch.Tensor  # bool: the next token is determined (a forced close)


class Dyck(ContextTask):
    config: DyckConfig
    HELD_NAME = "stacks"

    def __init__(self, config: DyckConfig, **kwargs: Any):
        super().__init__(config, **kwargs)
        self.vocab_size = config.vocab
        self.check_split("stacks of depth 2 and more", "change held_out or max_depth")

    # --- the split ------------------------------------------------------------------------------
    # A stack is coded as the base-(k+1) number of its types + 1, the outermost least
    # significant: with k = 2, the stack "( [" (types 0, 1) is 1 + 2*3 = 7. Every code up to
    # (k+1)^D is enumerated once, so reading whether a stack is held out is one lookup.
    @functools.cached_property
    def held(self) -> torch.Tensor:
        """((k+1)^D,) bool: the code of a stack of depth >= 2 that is held out (a fixed hash of
        its types, salted by the instance)."""
        c = self.config
        digits = all_states(c.n_types + 1, c.max_depth).flip(1)  # (codes, D) outer first
        depth = (digits > 0).sum(1)
        valid = (digits > 0).long().cumprod(1).sum(1) == depth  # no gap below the top
        salt = derive_seed(self.instance_seed, EVAL_STREAM)
        return (state_hash(digits, salt) < self.config.held_out) & (depth >= 2) & valid

    def held_counts(self) -> tuple[int, int]:
        c = self.config
        total = sum(c.n_types ** d for d in range(2, c.max_depth + 1))
        return total, int(self.held.sum())

    # --- layout ---------------------------------------------------------------------------------
    @property
    def n_tokens(self) -> int:
        return self.config.length

    def loss_mask(self) -> torch.Tensor:
        return torch.ones(self.seq_len, dtype=torch.bool)  # every next token is trained

    def probe_counted(self, tokens: torch.Tensor) -> torch.Tensor:
        """The probe counts what the evaluation counts: the determined (forced) closes."""
        return self.trace(tokens).forced[:, :-1]

    # --- the generator --------------------------------------------------------------------------
    def _generate(self, n: int, generator: torch.Generator, training: bool) -> torch.Tensor:
        """`n` sequences; with `training`, none holds a held-out stack."""
        c, device = self.config, generator.device
        k, D = c.n_types, c.max_depth
        power = (k + 1) ** torch.arange(D + 1, device=device)
        held = self.held.to(device)
        code = torch.zeros(n, dtype=torch.long, device=device)  # the stack
        depth = torch.zeros(n, dtype=torch.long, device=device)
        tokens = torch.empty(n, c.length, dtype=torch.long, device=device)
        for i in range(c.length):
            left = c.length - i
            must_close = (depth == left) | (depth == D)
            opens = (depth == 0) | (~must_close & (torch.rand(n, generator=generator,
                                                              device=device) < c.p_open))
            score = torch.rand(n, k, generator=generator, device=device)  # a uniform type
            place = power[depth.clamp_max(D - 1)]  # the digit an opening sets
            if training:  # only types whose stack is not held out
                grown = code[:, None] + place[:, None] * torch.arange(1, k + 1, device=device)
                # (n, k); a stack of depth 1 is never held out; at depth D nothing opens
                allowed = ~held[grown.clamp_max(len(held) - 1)]
                score = score.masked_fill(~allowed, -1.0)
                opens &= allowed.any(1)
            kind = score.argmax(1)
            top_place = power[(depth - 1).clamp_min(0)]
            top = code // top_place % (k + 1) - 1
            tokens[:, i] = torch.where(opens, kind, k + top)
            code = torch.where(opens, code + place * (kind + 1), code - top_place * (top + 1))
            depth = depth + torch.where(opens, 1, -1)
        return tokens

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        return self._generate(n, generator, training=False)

    def training_sequences(self, n: int, generator: torch.Generator) -> torch.Tensor:
        return self._generate(n, generator, training=True)

    def held_out_sequences(self) -> tuple[torch.Tensor, torch.Tensor]:
        """`eval_size` free sequences with at least one forced close inside a held-out stack;
        those closes are what counts."""
        gen = make_generator(self.instance_seed, EVAL_STREAM, 1, torch.device("cpu"))
        kept: list[torch.Tensor] = []
        have = 0
        for _ in range(MAX_ROUNDS):
            tokens = self.sample(2 * self.eval_size, gen)
            tokens = tokens[self.counted(tokens).any(1)][: self.eval_size - have]
            kept.append(tokens)
            have += len(tokens)
            if have == self.eval_size:
                tokens = torch.cat(kept)
                return tokens, self.counted(tokens)
        raise ValueError(f"held_out: {MAX_ROUNDS} rounds found {have} of {self.eval_size} "
                         f"sequences that close a held-out stack at {self.config.held_out}; "
                         "raise it or max_depth")

    def counted(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, L) bool: forced closes inside a held-out stack."""
        t = self.trace(tokens)
        return (t.forced & t.held)[:, :-1]

    def trace(self, tokens: torch.Tensor) -> Trace:
        """Read (N, n) sequences left to right (a loop over positions, vectorised over rows)."""
        c = self.config
        k, D = c.n_types, c.max_depth
        N, n = tokens.shape
        device = tokens.device
        rows = torch.arange(N, device=device)
        power = (k + 1) ** torch.arange(D + 1, device=device)
        held_code = self.held.to(device)
        code = torch.zeros(N, dtype=torch.long, device=device)
        where = torch.full((N, D + 1), -1, dtype=torch.long, device=device)  # per level
        below = torch.zeros(N, D + 1, dtype=torch.bool, device=device)  # per level
        depth = torch.zeros(N, dtype=torch.long, device=device)
        out = torch.empty(4, N, n, dtype=torch.long, device=device)
        for i in range(n):
            tok = tokens[:, i]
            opens = (tok < k) & (depth < D)  # clamped: a malformed sequence stays in range
            closes = (tok >= k) & (depth > 0)
            top_place = power[(depth - 1).clamp_min(0)]
            code = torch.where(opens, code + power[depth.clamp_max(D - 1)] * (tok + 1),
                               torch.where(closes, code - top_place * (code // top_place
                                                                       % (k + 1)), code))
            depth = depth + opens.long() - closes.long()
            where[rows, depth] = torch.where(opens, i, where[rows, depth])
            below[rows, depth] = torch.where(
                opens, below[rows, (depth - 1).clamp_min(0)] | held_code[code],
                below[rows, depth])
            top_place = power[(depth - 1).clamp_min(0)]
            out[0, :, i] = depth
            out[1, :, i] = torch.where(depth > 0, code // top_place % (k + 1) - 1, -1)
            out[2, :, i] = torch.where(depth > 0, where[rows, depth], -1)
            out[3, :, i] = (below[rows, depth] & (depth > 0)).long()
        left = n - 1 - torch.arange(n, device=device)  # tokens after this one
        forced = (out[0] > 0) & ((out[0] == left) | (out[0] == D))
        return Trace(out[0], out[1], out[2], out[3].bool(), forced)

    def leaks(self, steps: range, device: torch.device = torch.device("cpu")) -> int:
        """Training sequences that hold a held-out stack: 0 unless the split is broken."""
        return sum(int(self.trace(join_tokens(self.train_batch(s, device))).held.any(1).sum())
                   for s in steps)

    # --- what is scored and read ------------------------------------------------------------------
    def patterns(self, tokens: torch.Tensor) -> torch.Tensor:
        """Row p: the position of the innermost open bracket after token p (none at depth 0)."""
        top = self.trace(tokens).top_pos[:, :-1]  # (N, L)
        q = torch.arange(self.seq_len, device=tokens.device)
        return (q[None, None, :] == top[:, :, None]).float()

    def candidates(self, pattern: torch.Tensor) -> torch.Tensor:
        """Every position up to the row's own (the innermost bracket may be the current
        token)."""
        q = torch.arange(pattern.shape[-1], device=pattern.device)
        return (q[None, :] <= q[:, None]).expand(pattern.shape)

    def next_token_posterior(self, tokens: torch.Tensor) -> torch.Tensor:
        """The free generator's next-token distribution (the evaluation draws from it): a forced
        close is certain, depth 0 opens a uniform type, elsewhere open (uniform type) with
        p_open or close the innermost bracket."""
        c, V, k = self.config, self.vocab_size, self.config.n_types
        t = self.trace(tokens)
        N, L = len(tokens), self.seq_len
        if c.random_targets:
            return torch.full((N, L, V), 1 / V)
        depth, top, forced = t.depth[:, :-1], t.top_type[:, :-1], t.forced[:, :-1]
        post = torch.zeros(N, L, V)
        p_open = torch.where(depth == 0, 1.0, torch.where(forced, 0.0, c.p_open))
        post[..., :k] = (p_open / k)[..., None]
        close = torch.nn.functional.one_hot((k + top).clamp_min(0), V).float()
        return post + close * (1 - p_open)[..., None]

    # --- what `bench task` shows ----------------------------------------------------------------
    def summary(self) -> str:
        c = self.config
        return (f"{c.length} brackets of {c.n_types} types, balanced, at most {c.max_depth} "
                "deep; scored at the forced closes")

    def sample_rows(self, tokens: torch.Tensor) -> list[str]:
        k = self.config.n_types
        if k > 4:
            return [" ".join(map(str, tokens.tolist()))]
        glyph = "([{<"[:k] + ")]}>"[:k]
        forced = self.trace(tokens[None]).forced[0].tolist()
        marks = "".join("^" if f else " " for f in forced[:-1])
        return ["  " + "".join(glyph[t] for t in tokens.tolist()),
                "   " + marks + "   (^: the next token is forced)"]

    def hidden(self) -> dict[str, Any]:
        k, D = self.config.n_types, self.config.max_depth
        codes = self.held.nonzero().squeeze(1)
        digits = codes[:, None] // (k + 1) ** torch.arange(D) % (k + 1)  # (M, D) outer first
        return {"held_out_stacks": [[d - 1 for d in row if d] for row in digits.tolist()]}

    def rule_text(self, hidden: dict[str, Any]) -> list[str]:
        stacks = hidden["held_out_stacks"]
        glyph = "([{<" if self.config.n_types <= 4 else None
        shown = " ".join("".join(glyph[t] if glyph else f"{t}," for t in s)
                         for s in stacks[:32])
        more = f" ... ({len(stacks)} in all)" if len(stacks) > 32 else ""
        return [f"held-out stacks (open types, outer to inner): {shown}{more}"]
