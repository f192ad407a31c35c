"""Cellular automata on a ring: each state is the previous one after k applications of a rule.

A rule is a lookup table from the K^(2r+1) window contents to a colour. The pool of N rules is
fixed by the task seed; every sequence uses one rule drawn from the pool, so for N > 1 the model
must infer the active rule from the context. Token x_{t+1}[i] reads x_t[i-kr .. i+kr] (mod S).
"""

from __future__ import annotations

from typing import Any

import torch

from .config import CellularAutomatonConfig
from .states import StateSequenceTask


def draw_rules(n_rules: int, n_colors: int, radius: int, seed: int) -> torch.Tensor:
    """(N, K^(2r+1)) long: each row a lookup table, drawn uniformly."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(n_colors, (n_rules, n_colors ** (2 * radius + 1)), generator=gen)


def apply_rule(x: torch.Tensor, tables: torch.Tensor, n_colors: int, radius: int,
               which: torch.Tensor | None = None) -> torch.Tensor:
    """One step for a batch: x (B, S), tables (B, K^(2r+1)), one table per sequence; with
    `which` (B,), tables is the pool (N, K^(2r+1)) and sequence b reads table which[b] (no
    (B, K^(2r+1)) copy: a large alphabet's tables are millions of entries each).

    The window of cell i is read as a base-K number with the leftmost cell (i - r) most
    significant. With K = 2, r = 1 and window (1, 0, 1) the entry read is tables[:, 5].
    """
    index = torch.zeros_like(x)
    for offset in range(-radius, radius + 1):
        index = index * n_colors + torch.roll(x, shifts=-offset, dims=1)  # x[:, i + offset]
    if which is not None:
        return tables[which[:, None], index]
    return torch.gather(tables, 1, index)


def advance(x: torch.Tensor, tables: torch.Tensor, n_colors: int, radius: int,
            applications: int, which: torch.Tensor | None = None) -> torch.Tensor:
    """The next state: the rule of each sequence applied `applications` times."""
    for _ in range(applications):
        x = apply_rule(x, tables, n_colors, radius, which)
    return x


def cellular_automaton_rollout(
    rules: torch.Tensor,
    x0: torch.Tensor,
    n_states: int,
    n_colors: int,
    radius: int,
    rule_applications: int,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences from the start states x0 (B, S), each under a rule drawn from the pool ->
    (tokens (B, S*T), rule index (B,))."""
    rules = rules.to(x0.device)
    rule_index = torch.randint(len(rules), (len(x0),), generator=generator, device=x0.device)
    x = x0
    states = [x]
    for _ in range(n_states - 1):
        x = advance(x, rules, n_colors, radius, rule_applications, rule_index)
        states.append(x)
    return torch.cat(states, dim=1), rule_index


class CellularAutomaton(StateSequenceTask):
    config: CellularAutomatonConfig

    def __init__(self, config: CellularAutomatonConfig, **kwargs: Any):
        super().__init__(config, **kwargs)
        self.state_size = config.n_cells
        self.vocab_size = config.n_colors
        self.rules = draw_rules(config.n_rules, config.n_colors, config.radius,
                                self.instance_seed)

    def rollout_with_rules(
        self, x0: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        return cellular_automaton_rollout(self.rules, x0, c.n_states, c.n_colors, c.radius,
                                          c.rule_applications, generator)

    def rollout(self, x0: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return self.rollout_with_rules(x0, generator)[0]

    def sample_with_rules(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`batch_size` sequences from uniform x_0 and the index of each one's rule."""
        x0 = torch.randint(self.vocab_size, (batch_size, self.state_size), generator=generator,
                           device=generator.device)
        return self.rollout_with_rules(x0, generator)

    def next_token_posterior(self, tokens: torch.Tensor) -> torch.Tensor:
        """The rule is hidden: the Bayes-optimal predictor keeps the pool's rules consistent with
        every token seen so far (uniform prior, deterministic rules) and predicts their mixture."""
        c = self.config
        if c.random_targets or c.n_rules == 1:
            return super().next_token_posterior(tokens)
        B, S, K = len(tokens), c.n_cells, c.n_colors
        states = tokens.view(B, c.n_states, S)
        alive = torch.ones(B, c.n_rules, dtype=torch.bool)
        out = []
        for t in range(c.n_states - 1):
            preds = torch.stack([  # each rule's next state from this one: (B, N, S)
                advance(states[:, t], table.expand(B, -1), K, c.radius, c.rule_applications)
                for table in self.rules], dim=1)
            for i in range(S):
                votes = torch.nn.functional.one_hot(preds[:, :, i], K).float()  # (B, N, K)
                mix = (votes * alive[..., None]).sum(1)
                out.append(mix / mix.sum(-1, keepdim=True))
                alive &= preds[:, :, i] == states[:, t + 1, i][:, None]
        return torch.stack(out, dim=1)  # (B, S*(T-1), K)

    def parents(self) -> torch.Tensor:
        S, reach = self.config.n_cells, self.config.radius * self.config.rule_applications
        offset = (torch.arange(S)[None, :] - torch.arange(S)[:, None]) % S  # (j - i) mod S
        return ((offset <= reach) | (offset >= S - reach)).long()

    def hidden(self) -> dict[str, Any]:
        return {"rules": self.rules.tolist()}

    def flags(self) -> list[str]:
        constant = [i for i, r in enumerate(self.rules.tolist()) if len(set(r)) == 1]
        if constant:
            return [f"rules {constant} are constant: they read no cell"]
        return []

    def inspect(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, dict[str, Any]]:
        tokens, rule_index = self.sample_with_rules(n, generator)
        return tokens, {**self.hidden(), "rule_index": rule_index.tolist()}

    def sample_note(self, hidden: dict[str, Any], i: int) -> str:
        return f" (rule {hidden['rule_index'][i]})" if "rule_index" in hidden else ""

    def rule_text(self, hidden: dict[str, Any]) -> list[str]:
        """Each rule as neighbourhood->colour entries (neighbourhood digits left to right)."""
        width, base = 2 * self.config.radius + 1, self.config.n_colors
        lines = []
        for r, table in enumerate(hidden["rules"]):
            if len(table) > 81:
                lines.append(f"rule {r}: {len(table)} entries (see --json)")
                continue
            entries = [f"{_digits(w, base, width)}->{c}" for w, c in enumerate(table)]
            lines.append(f"rule {r}: " + " ".join(entries))
        return lines


def _digits(index: int, base: int, width: int) -> str:
    """`index` written in `base` with `width` digits, most significant first."""
    out = []
    for _ in range(width):
        index, d = divmod(index, base)
        out.append(str(d))
    return "".join(reversed(out))
