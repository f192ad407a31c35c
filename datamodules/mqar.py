"""Multi-query associative recall (zoology's MQAR): recall the value bound to a key in context.

A sequence is `n_pairs` bindings k v (distinct keys), `gap` filler tokens, then `n_queries`
distinct keys of the bindings in a random order (every key by default), each followed by its
value. Tokens: 0 is the filler, 1 .. n_keys the keys, n_keys+1 .. n_keys+n_values the values.
Scored: the output at each query (it predicts the value), the same positions in every sequence.
The ground-truth pattern of a query is the position of its key's value among the bindings; the
task is deterministic (ceiling 1) and a reader of no context scores chance among the values.

Held out: bindings (key, value); no training sequence binds a held-out pair (each key's value is
drawn among the values it may take in training), and the evaluation counts the queries of
held-out bindings only. Training therefore teaches a prior against exactly those answers (the
pair never occurs in it): a model that has learned the training pairs scores below chance on
the held-out queries until it recalls from context, which must override that prior.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .base import EVAL_STREAM, join_tokens, make_generator
from .config import MQARConfig
from .context import ContextTask


class MQAR(ContextTask):
    config: MQARConfig
    HELD_NAME = "bindings"

    def __init__(self, config: MQARConfig, **kwargs: Any):
        super().__init__(config, **kwargs)
        self.vocab_size = config.vocab
        self.held = self.held_table(config.n_keys, config.n_values)  # (K, V) bindings
        self.check_split("key-value bindings", "change held_out or n_values")
        empty = (self.held.all(1)).nonzero().squeeze(1)
        if len(empty):
            raise ValueError(f"held_out: at {config.held_out}, instance {self.instance_seed} "
                             f"holds out every value of keys {(empty + 1).tolist()[:5]}; lower "
                             "held_out or raise n_values")
        # each key's training values, flat in key order: key k's are allowed[start[k]:][:count[k]]
        count = (~self.held).sum(1)  # (K,)
        allowed = ((~self.held).nonzero()[:, 1], count.cumsum(0) - count, count)
        self._allowed = {torch.device("cpu"): allowed}

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
        counted[:, self.scored_positions()] = self.is_held_out(self.scored_pairs(tokens))
        if not counted.any():
            raise ValueError(f"held_out: no query of the {len(tokens)} evaluation sequences "
                             f"asks a held-out binding at {self.config.held_out}; raise it")
        return tokens, counted

    def leaks(self, steps: range, device: torch.device = torch.device("cpu")) -> int:
        """Bindings of the training batches of `steps` that the evaluation counts."""
        es = self.eval_set(device)
        held = es.tokens[~es.probe]
        counted = es.counted[~es.probe][:, self.scored_positions().to(device)]
        code = lambda pairs: pairs[..., 0] * self.config.n_values + pairs[..., 1]  # noqa: E731
        scored = code(self.scored_pairs(held)[counted])
        found = 0
        for step in steps:
            tokens = join_tokens(self.train_batch(step, device))
            found += int(torch.isin(code(self.bindings(tokens)), scored).sum())
        return found

    @property
    def n_tokens(self) -> int:
        return self.config.length

    def query_start(self) -> int:
        return 2 * self.config.n_pairs + self.config.gap

    def loss_mask(self) -> torch.Tensor:
        mask = torch.zeros(self.seq_len, dtype=torch.bool)
        mask[self.query_start() :: 2] = True
        return mask

    # --- the generator -------------------------------------------------------------------------
    def _layout(self, keys: torch.Tensor, values: torch.Tensor,
                generator: torch.Generator) -> torch.Tensor:
        """Key and value indices (n, n_pairs) -> sequences (n, n_tokens)."""
        c, n, device = self.config, len(keys), keys.device
        key_tok, value_tok = keys + 1, values + 1 + c.n_keys
        asked = torch.rand(n, c.n_pairs, generator=generator, device=device).argsort(1)
        asked = asked[:, : c.queries]
        pairs = torch.stack([key_tok, value_tok], dim=-1).flatten(1)
        queries = torch.stack([key_tok.gather(1, asked), value_tok.gather(1, asked)],
                              dim=-1).flatten(1)
        filler = torch.zeros(n, c.gap, dtype=torch.long, device=device)
        return torch.cat([pairs, filler, queries], dim=1)

    def _keys(self, n: int, generator: torch.Generator) -> torch.Tensor:
        c = self.config
        return torch.rand(n, c.n_keys, generator=generator,
                          device=generator.device).argsort(1)[:, : c.n_pairs]

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        keys = self._keys(n, generator)
        values = torch.randint(self.config.n_values, keys.shape, generator=generator,
                               device=generator.device)
        return self._layout(keys, values, generator)

    def training_sequences(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """Each key's value uniform among the values it may take in training (without a
        (keys, n_values) table per batch: n_values may be large)."""
        keys = self._keys(n, generator)
        device = generator.device
        if device not in self._allowed:
            self._allowed[device] = tuple(x.to(device) for x in self._allowed[torch.device("cpu")])
        values, start, count = self._allowed[device]
        u = torch.rand(keys.shape, generator=generator, device=device, dtype=torch.float64)
        pick = (u * count[keys]).long().clamp_max(count[keys] - 1)
        return self._layout(keys, values[start[keys] + pick], generator)

    # --- what is scored and read ------------------------------------------------------------------
    def bindings(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, n_pairs, 2) the (key, value) table indices of the bindings."""
        k = self.config.n_keys
        pairs = tokens[:, : 2 * self.config.n_pairs].view(len(tokens), -1, 2)
        return torch.stack([pairs[..., 0] - 1, pairs[..., 1] - 1 - k], dim=-1)

    def scored_pairs(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, P, 2) the (key, value) indices each query asks."""
        k = self.config.n_keys
        at = self.scored_positions().to(tokens.device)
        return torch.stack([tokens[:, at] - 1, tokens[:, at + 1] - 1 - k], dim=-1)

    def patterns(self, tokens: torch.Tensor) -> torch.Tensor:
        """Row of query i: the position of its key's value among the bindings."""
        at = self.scored_positions().to(tokens.device)
        keys = tokens[:, : 2 * self.config.n_pairs : 2]  # (N, n_pairs)
        which = (tokens[:, at][:, :, None] == keys[:, None, :]).float().argmax(-1)  # (N, P)
        return F.one_hot(2 * which + 1, self.seq_len).float()

    def next_token_posterior(self, tokens: torch.Tensor) -> torch.Tensor:
        at = self.scored_positions() + 1
        if self.config.random_targets:
            return torch.full((len(tokens), len(at), self.vocab_size), 1 / self.vocab_size)
        return F.one_hot(tokens[:, at], self.vocab_size).float()

    # --- what `bench task` shows ----------------------------------------------------------------
    def summary(self) -> str:
        c = self.config
        return (f"{c.n_pairs} key-value pairs (keys 1..{c.n_keys}, values "
                f"{c.n_keys + 1}..{c.n_keys + c.n_values}), {c.gap} filler, {c.queries} "
                f"queries")

    def sample_rows(self, tokens: torch.Tensor) -> list[str]:
        t, q = tokens.tolist(), self.query_start()
        pairs = " ".join(f"{t[i]}:{t[i + 1]}" for i in range(0, 2 * self.config.n_pairs, 2))
        queries = " ".join(f"{t[i]}:{t[i + 1]}" for i in range(q, len(t), 2))
        return [f"  pairs: {pairs}", f"  filler: {self.config.gap}", f"  queries: {queries}"]

    def hidden(self) -> dict[str, Any]:
        return {"held_out_bindings": self.held.nonzero().tolist()}

    def rule_text(self, hidden: dict[str, Any]) -> list[str]:
        pairs = hidden["held_out_bindings"]
        k = self.config.n_keys
        shown = " ".join(f"{a + 1}:{b + 1 + k}" for a, b in pairs[:40])
        return [f"held-out bindings key:value ({len(pairs)}): {shown}"
                + (" ..." if len(pairs) > 40 else "")]
