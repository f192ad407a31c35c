"""Multi-query associative recall (MQAR): recall the value bound to a key in context.

**layout: zoology** (the default) follows zoology's `multiquery_ar` (HazyResearch/zoology,
zoology/data/multiquery_ar.py) point by point: vocabulary V, 0 the blank, keys 1 .. V/2 - 1,
values V/2 .. V - 1; a sequence of `length` input tokens opens with `n_pairs` bindings k v
(distinct keys, distinct values), then a query region of (length - 2*n_pairs)/2 slots of two
tokens; each key is queried once, at slot i (0-based, key j at the j-th slot drawn) drawn
without replacement with weight (i + 1)^(power_a - 1), its key at the slot's first token; every
other token of the region is blank, or with `random_non_queries` a uniform random token of the
whole vocabulary. Only the query keys are scored: the output there predicts the key's value
(the next input is a blank or noise, not the answer). Where it differs from zoology:
- training draws a fresh batch every step from (seed, step), where zoology trains on a fixed
  set of examples; the evaluation set is fixed;
- held-out bindings (below) are ours: a training sequence draws each key's value among those
  it may take in training, one key after another, distinct from the values already drawn;
- noise never equals one of the sequence's keys at an empty slot (zoology's may, with
  probability about n_pairs/V, and leaves it unscored), so the queries can be read off the
  tokens, and the token after a query key is never its answer (zoology's is, with probability
  1/V; a causal mixer cannot read it either way);
- a stored sequence has length + 1 tokens (the last one is never read) so that every task
  shares one layout of inputs and targets; only the scored targets differ from the next token.
The scored positions are every slot's first token (fixed); the training loss and the
evaluation read the query slots of each sequence (`train_counted`, `counted`).

**layout: block** is the variant the committed recall board ran: `n_pairs` bindings (values
i.i.d.), `gap` fillers, then `n_queries` distinct keys in one block in random order, each
followed by its value (k v k v ...); tokens 1 .. n_keys the keys, then the values.

The ground-truth pattern of a query is the position of its key's value among the bindings; the
task is deterministic (ceiling 1) and a reader of no context scores chance among the values.

Held out: bindings (key, value); no training sequence binds a held-out pair, and the evaluation
counts the queries of held-out bindings only. Training therefore teaches a prior against exactly
those answers (the pair never occurs in it): a model that has learned the training pairs scores
below chance on the held-out queries until it recalls from context, which must override it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .base import EVAL_STREAM, MAX_ROUNDS, Batch, join_tokens, make_generator
from .config import MQARConfig
from .context import ContextTask


def distinct(n: int, k: int, high: int, generator: torch.Generator,
             allowed: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """(n, k) draws from 0 .. high - 1, distinct within a row, one column after another: column
    j uniform among the values not drawn in columns < j (and that `allowed` (n, k) -> bool
    accepts in column j), by redrawing refused ones. Without `allowed`, each row is a uniform
    draw without replacement (numpy's choice(replace=False)), at far less cost than sorting
    `high` random numbers per row when k is much smaller than high."""
    device = generator.device
    out = torch.randint(high, (n, k), generator=generator, device=device)
    for j in range(k):
        for _ in range(MAX_ROUNDS * 4):
            bad = (out[:, j : j + 1] == out[:, :j]).any(-1)
            if allowed is not None:
                bad |= ~allowed(out)[:, j]
            if not bad.any():
                break
            redraw = torch.randint(high, (n,), generator=generator, device=device)
            out[:, j] = torch.where(bad, redraw, out[:, j])
        else:
            raise ValueError(f"vocabulary: {k} distinct draws among {high} not found in "
                             f"{MAX_ROUNDS * 4} rounds; raise the vocabulary or lower n_pairs")
    return out


class MQAR(ContextTask):
    config: MQARConfig
    HELD_NAME = "bindings"

    def __init__(self, config: MQARConfig, **kwargs: Any):
        super().__init__(config, **kwargs)
        c = config
        self.zoology = c.layout == "zoology"
        self.vocab_size = c.vocab
        self.held = self.held_table(c.key_count, c.value_count)  # (K, V) bindings
        self.check_split("key-value bindings", "change held_out or the vocabulary")
        count = (~self.held).sum(1)  # (K,) training values of each key
        # zoology draws distinct values: every key needs one left after the others' draws
        need = c.n_pairs if self.zoology else 1
        short = (count < need).nonzero().squeeze(1)
        if len(short):
            raise ValueError(f"held_out: at {c.held_out}, instance {self.instance_seed} leaves "
                             f"keys {(short + 1).tolist()[:5]} fewer than {need} training "
                             "values; lower held_out or raise the vocabulary")
        # block: each key's training values, flat in key order: key k's are
        # allowed[start[k]:][:count[k]] (zoology reads the table itself, `_free`)
        self._allowed = {} if self.zoology else {torch.device("cpu"): (
            (~self.held).nonzero()[:, 1], count.cumsum(0) - count, count)}
        self._free: dict[torch.device, torch.Tensor] = {}  # (K, V) training values, zoology

    def held_counts(self) -> tuple[int, int]:
        return self.held.numel(), int(self.held.sum())

    def is_held_out(self, pairs: torch.Tensor) -> torch.Tensor:
        """(..., 2) (key, value) indices -> (...) bool."""
        held = self.held.to(pairs.device)
        return held[pairs[..., 0], pairs[..., 1]]

    def held_out_sequences(self) -> tuple[torch.Tensor, torch.Tensor]:
        """`eval_size` sequences of the generator; a query counts when its binding is held
        out."""
        tokens = self.sample(self.eval_size, make_generator(self.instance_seed, EVAL_STREAM, 1,
                                                            torch.device("cpu")))
        counted = torch.zeros(len(tokens), self.seq_len, dtype=torch.bool)
        counted[:, self.scored_positions()] = (self.asked(tokens)
                                               & self.is_held_out(self.scored_pairs(tokens)))
        if not counted.any():
            raise ValueError(f"held_out: no query of the {len(tokens)} evaluation sequences "
                             f"asks a held-out binding at {self.config.held_out}; raise it")
        return tokens, counted

    def leaks(self, steps: range, device: torch.device = torch.device("cpu")) -> int:
        """Bindings of the training batches of `steps` that the evaluation counts."""
        es = self.eval_set(device)
        held = es.tokens[~es.probe]
        counted = es.counted[~es.probe][:, self.scored_positions().to(device)]
        code = lambda pairs: pairs[..., 0] * self.config.value_count + pairs[..., 1]  # noqa: E731
        scored = code(self.scored_pairs(held)[counted])
        found = 0
        for step in steps:
            tokens = join_tokens(self.train_batch(step, device))
            found += int(torch.isin(code(self.bindings(tokens)), scored).sum())
        return found

    @property
    def n_tokens(self) -> int:
        return self.config.n_tokens

    def context_end(self) -> int:
        """The first position after the bindings (zoology: of the query region)."""
        c = self.config
        return 2 * c.n_pairs + (0 if self.zoology else c.gap)

    def loss_mask(self) -> torch.Tensor:
        """zoology: the first token of every query slot; block: every query."""
        mask = torch.zeros(self.seq_len, dtype=torch.bool)
        end = self.context_end() + (2 * self.config.slots if self.zoology else self.seq_len)
        mask[self.context_end() : end : 2] = True
        return mask

    # --- the generator -------------------------------------------------------------------------
    def _keys(self, n: int, generator: torch.Generator) -> torch.Tensor:
        c = self.config
        return distinct(n, c.n_pairs, c.key_count, generator)

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        c, device = self.config, generator.device
        keys = self._keys(n, generator)
        if self.zoology:  # distinct values, uniform
            values = distinct(n, c.n_pairs, c.value_count, generator)
        else:
            values = torch.randint(c.value_count, keys.shape, generator=generator, device=device)
        return self._layout(keys, values, generator)

    def training_sequences(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Each key's value uniform among the values it may take in training (zoology: redrawn
        while it repeats an earlier key's value), without a (keys, values) table per batch in
        the block layout (its value count may be large)."""
        keys = self._keys(n, generator)
        device = generator.device
        if self.zoology:
            if device not in self._free:
                self._free[device] = (~self.held).to(device)
            free = self._free[device]
            values = distinct(n, self.config.n_pairs, self.config.value_count, generator,
                              allowed=lambda v: free[keys, v])
            return self._layout(keys, values, generator)
        if device not in self._allowed:
            self._allowed[device] = tuple(x.to(device) for x in self._allowed[torch.device("cpu")])
        values, start, count = self._allowed[device]
        u = torch.rand(keys.shape, generator=generator, device=device, dtype=torch.float64)
        pick = (u * count[keys]).long().clamp_max(count[keys] - 1)
        return self._layout(keys, values[start[keys] + pick], generator)

    def _layout(self, keys: torch.Tensor, values: torch.Tensor,
                generator: torch.Generator) -> torch.Tensor:
        """Key and value indices (n, n_pairs) -> sequences (n, n_tokens)."""
        c = self.config
        key_tok, value_tok = keys + 1, values + c.value_base
        pairs = torch.stack([key_tok, value_tok], dim=-1).flatten(1)
        if self.zoology:
            return self._zoology(pairs, key_tok, value_tok, generator)
        n, device = len(keys), keys.device
        asked = torch.rand(n, c.n_pairs, generator=generator, device=device).argsort(1)
        asked = asked[:, : c.queries]
        queries = torch.stack([key_tok.gather(1, asked), value_tok.gather(1, asked)],
                              dim=-1).flatten(1)
        filler = torch.zeros(n, c.gap, dtype=torch.long, device=device)
        return torch.cat([pairs, filler, queries], dim=1)

    def slot_weights(self) -> torch.Tensor:
        """(slots,) zoology's power law: slot i (0-based) weighs (i + 1)^(power_a - 1)."""
        c = self.config
        i = torch.arange(1, c.slots + 1, dtype=torch.float64)
        w = i ** (c.power_a - 1)
        return w / w.sum()

    def _zoology(self, pairs: torch.Tensor, key_tok: torch.Tensor, value_tok: torch.Tensor,
                 generator: torch.Generator) -> torch.Tensor:
        c, (n, P), device = self.config, key_tok.shape, key_tok.device
        weights = self.slot_weights().float().to(device).expand(n, -1)
        slot = torch.multinomial(weights, P, replacement=False, generator=generator)  # (n, P)
        tokens = torch.zeros(n, c.n_tokens, dtype=torch.long, device=device)
        tokens[:, : 2 * P] = pairs
        at = 2 * P + 2 * slot  # key j's query position
        tokens.scatter_(1, at, key_tok)
        if c.random_non_queries:
            blank = tokens == 0
            blank[:, -1] = False  # the stored extra token (never an input) stays blank
            start = 2 * P
            in_slot = torch.zeros_like(blank)
            in_slot[:, start : start + 2 * c.slots : 2] = True
            answer = torch.zeros_like(tokens)  # at the token after each query: its value
            answer.scatter_(1, at + 1, value_tok)
            todo = blank.clone()
            for _ in range(MAX_ROUNDS):
                noise = torch.randint(c.vocab_size, tokens.shape, generator=generator,
                                      device=device)
                tokens = torch.where(todo, noise, tokens)
                is_key = (tokens[:, :, None] == key_tok[:, None, :]).any(-1)
                todo = blank & ((in_slot & is_key) | ((answer > 0) & (tokens == answer)))
                if not todo.any():
                    break
            else:
                raise ValueError(f"vocab_size: noise avoiding the sequence's keys was not found "
                                 f"in {MAX_ROUNDS} rounds; raise vocab_size")
        return tokens

    def replacement_values(self) -> torch.Tensor:
        """(L, V) bool, read off the layout rather than a sample (the vocabulary may be large):
        any key at a binding's key, any value at its value; zoology: blank or any key at a
        slot's first token, blank at its second (every token with `random_non_queries`); block:
        blank in the gap, keys and values alternating in the queries."""
        c, pairs = self.config, 2 * self.config.n_pairs
        keys = slice(1, 1 + c.key_count)
        values = slice(c.value_base, c.value_base + c.value_count)
        valid = torch.zeros(self.seq_len, self.vocab_size, dtype=torch.bool)
        valid[0:pairs:2, keys] = True
        valid[1:pairs:2, values] = True
        if self.zoology and c.random_non_queries:
            valid[pairs:] = True
        elif self.zoology:
            valid[pairs:, 0] = True
            valid[pairs::2, keys] = True
        else:
            start = pairs + c.gap
            valid[pairs:start, 0] = True
            valid[start::2, keys] = True
            valid[start + 1 :: 2, values] = True
        return valid

    # --- what is scored and read ------------------------------------------------------------------
    def asked(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, P) bool: the scored positions of `tokens` that hold a query (zoology: a slot
        holding one of the sequence's keys; block: every one)."""
        at = self.scored_positions().to(tokens.device)
        if not self.zoology:
            return torch.ones(len(tokens), len(at), dtype=torch.bool, device=tokens.device)
        keys = tokens[:, : 2 * self.config.n_pairs : 2]
        return (tokens[:, at][:, :, None] == keys[:, None, :]).any(-1)

    def _which(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, P) the binding each scored position's token is the key of (0 where none)."""
        at = self.scored_positions().to(tokens.device)
        keys = tokens[:, : 2 * self.config.n_pairs : 2]  # (N, n_pairs)
        return (tokens[:, at][:, :, None] == keys[:, None, :]).float().argmax(-1)

    def split(self, tokens: torch.Tensor) -> Batch:
        """zoology: the target at a query key is its value (the next input is not); every other
        target is the next token."""
        batch = super().split(tokens)
        if not self.zoology:
            return batch
        at = self.scored_positions().to(tokens.device)
        values = tokens[:, 1 : 2 * self.config.n_pairs : 2].gather(1, self._which(tokens))
        targets = batch.targets.clone()
        targets[:, at] = torch.where(self.asked(tokens), values, targets[:, at])
        return batch._replace(targets=targets)

    def train_counted(self, tokens: torch.Tensor) -> torch.Tensor | None:
        if not self.zoology:
            return None
        return self.probe_counted(tokens)

    def probe_counted(self, tokens: torch.Tensor) -> torch.Tensor:
        counted = torch.zeros(len(tokens), self.seq_len, dtype=torch.bool, device=tokens.device)
        counted[:, self.scored_positions().to(tokens.device)] = self.asked(tokens)
        return counted

    def bindings(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, n_pairs, 2) the (key, value) table indices of the bindings."""
        pairs = tokens[:, : 2 * self.config.n_pairs].view(len(tokens), -1, 2)
        return torch.stack([pairs[..., 0] - 1, pairs[..., 1] - self.config.value_base], dim=-1)

    def scored_pairs(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, P, 2) the (key, value) indices each scored position asks (meaningless, but in
        range, where it holds no query)."""
        c = self.config
        at = self.scored_positions().to(tokens.device)
        key = (tokens[:, at] - 1).clamp(0, c.key_count - 1)
        value = (self.split(tokens).targets[:, at] - c.value_base).clamp(0, c.value_count - 1)
        return torch.stack([key, value], dim=-1)

    def patterns(self, tokens: torch.Tensor) -> torch.Tensor:
        """Row of a query: the position of its key's value among the bindings (zero rows
        where a scored position holds no query)."""
        pattern = F.one_hot(2 * self._which(tokens) + 1, self.seq_len).float()
        return pattern * self.asked(tokens)[..., None]

    def next_token_posterior(self, tokens: torch.Tensor) -> torch.Tensor:
        at = self.scored_positions()
        if self.config.random_targets:
            return torch.full((len(tokens), len(at), self.vocab_size), 1 / self.vocab_size)
        return F.one_hot(self.split(tokens).targets[:, at], self.vocab_size).float()

    # --- what `bench task` shows ----------------------------------------------------------------
    def summary(self) -> str:
        c = self.config
        keys = f"keys 1..{c.key_count}, values {c.value_base}..{c.value_base + c.value_count - 1}"
        if not self.zoology:
            return (f"{c.n_pairs} key-value pairs ({keys}), {c.gap} filler, {c.queries} "
                    f"queries (block layout: each query followed by its answer)")
        rest = "random tokens" if c.random_non_queries else "blank 0"
        return (f"zoology layout: {c.n_pairs} key-value pairs ({keys}; distinct), then "
                f"{c.slots} query slots of two tokens; each key queried once at a slot drawn "
                f"with weight (i+1)^({c.power_a:g}-1); the rest {rest}; scored at the query "
                "keys")

    def sample_rows(self, tokens: torch.Tensor) -> list[str]:
        c, t = self.config, tokens.tolist()
        pairs = " ".join(f"{t[i]}:{t[i + 1]}" for i in range(0, 2 * c.n_pairs, 2))
        if not self.zoology:
            q = self.context_end()
            queries = " ".join(f"{t[i]}:{t[i + 1]}" for i in range(q, len(t), 2))
            return [f"  pairs: {pairs}", f"  filler: {c.gap}", f"  queries: {queries}"]
        asked = self.asked(tokens[None])[0].tolist()
        target = self.split(tokens[None]).targets[0].tolist()
        at = self.scored_positions().tolist()
        slots = []
        for j, (p, q) in enumerate(zip(at, asked)):
            slots.append(f"[{t[p]}->{target[p]}] {t[p + 1]}" if q else f"{t[p]} {t[p + 1]}")
        return [f"  pairs: {pairs}",
                f"  query slots ([key->answer], {c.n_pairs} of {c.slots}): " + " | ".join(slots)]

    def hidden(self) -> dict[str, Any]:
        return {"held_out_bindings": self.held.nonzero().tolist()}

    def rule_text(self, hidden: dict[str, Any]) -> list[str]:
        pairs = hidden["held_out_bindings"]
        base = self.config.value_base
        shown = " ".join(f"{a + 1}:{b + base}" for a, b in pairs[:40])
        return [f"held-out bindings key:value ({len(pairs)}): {shown}"
                + (" ..." if len(pairs) > 40 else "")]
