"""Neural cellular automata: a pre-pretraining corpus whose rule changes with every sequence.

A state is a `height` x `width` torus of `n_colors` colours, read row by row as tokens. Each
sequence draws its own rule, a small random network: the one-hot 3x3 neighbourhood of a cell
(9K inputs) -> `hidden` tanh units -> K logits, quantised to the next colour by argmax; Gaussian
weights scaled by fan-in and no biases (zero-mean units keep the colours' logits balanced: with
ReLU units and Gaussian biases, 60% of rules map every window to one colour). Like the complexity
filter of NCA pre-training work, a sequence whose rule reaches a fixed point or a one-colour
state within it is redrawn (new rule, same start) up to `REDRAWS` times, so nearly every sequence
shows a rule at work (at K = 2 on 4x4, about 40% of first draws stall and 0.8% still do after
the redraws, and are kept; a one-colour start state stalls under every rule, since every rule
commutes with shifts of the torus). Cell (i, j) of x_{t+1} therefore reads
the 3x3 window around (i, j) of x_t (the ground-truth pattern, the same in every sequence),
but *how* it reads it must be inferred from the sequence itself.

Held out, as in every task of states: a set of states that is never the source of a training
transition. Bayes ceiling: the exact predictor would average over every network consistent with
the sequence so far, which has no closed form; the ceiling reported is that of the predictor
that knows each sequence's rule (1), an upper bound.
"""

from __future__ import annotations

from typing import Any

import torch

from .config import NCAConfig
from .states import StateSequenceTask

REDRAWS = 4  # new rules tried for a start state whose rule stalls


def draw_networks(n: int, n_colors: int, hidden: int,
                  generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` rule networks: w1 (n, 9K, h) and w2 (n, h, K), Gaussian scaled by fan-in (a window
    sets 9 of the 9K inputs)."""
    device = generator.device
    w1 = torch.randn(n, 9 * n_colors, hidden, generator=generator, device=device) / 3.0
    w2 = torch.randn(n, hidden, n_colors, generator=generator, device=device) / hidden ** 0.5
    return w1, w2


def nca_step(x: torch.Tensor, nets: tuple[torch.Tensor, torch.Tensor],
             n_colors: int) -> torch.Tensor:
    """(B, H, W) colours -> the next state under each sequence's network.

    Window order: offsets (di, dj) in row-major order from (-1, -1) to (1, 1), each a one-hot
    block of K inputs."""
    w1, w2 = nets
    B, H, W = x.shape
    windows = torch.stack([torch.roll(x, shifts=(-di, -dj), dims=(1, 2))  # x[i + di, j + dj]
                           for di in (-1, 0, 1) for dj in (-1, 0, 1)], dim=-1)  # (B, H, W, 9)
    onehot = torch.nn.functional.one_hot(windows, n_colors).float().view(B, H * W, -1)
    logits = torch.tanh(onehot @ w1) @ w2  # (B, HW, K)
    return logits.argmax(-1).view(B, H, W)


class NCA(StateSequenceTask):
    config: NCAConfig

    def __init__(self, config: NCAConfig, **kwargs: Any):
        super().__init__(config, **kwargs)
        self.state_size = config.height * config.width
        self.vocab_size = config.n_colors

    def rollout(self, x0: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Each row under its own rule; a row whose rule stalls (a state equal to the one
        before, or of one colour) is redrawn with a new rule, up to REDRAWS times."""
        out = self._rollout(x0, generator)
        for _ in range(REDRAWS):
            stalled = self.stalled(out)
            if not stalled.any():
                break
            out[stalled] = self._rollout(x0[stalled], generator)
        return out

    def _rollout(self, x0: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        c = self.config
        nets = draw_networks(len(x0), c.n_colors, c.hidden, generator)
        x = x0.view(len(x0), c.height, c.width)
        states = [x0]
        for _ in range(c.n_states - 1):
            x = nca_step(x, nets, c.n_colors)
            states.append(x.flatten(1))
        return torch.cat(states, dim=1)

    def stalled(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B,) bool: some state after the first equals the one before or has one colour."""
        states = tokens.view(len(tokens), self.config.n_states, self.state_size)
        later = states[:, 1:]
        same = (later == states[:, :-1]).all(-1)
        flat = (later == later[..., :1]).all(-1)
        return (same | flat).any(1)

    def parents(self) -> torch.Tensor:
        """Cell (i, j) reads the 3x3 window around it on the torus."""
        H, W = self.config.height, self.config.width
        i, j = torch.arange(H * W) // W, torch.arange(H * W) % W
        di = (i[None, :] - i[:, None]) % H
        dj = (j[None, :] - j[:, None]) % W
        return (((di <= 1) | (di == H - 1)) & ((dj <= 1) | (dj == W - 1))).long()

    def summary(self) -> str:
        c = self.config
        return (f"{c.n_states} states of a {c.height}x{c.width} torus of {c.n_colors} colours, "
                "each sequence under its own random 3x3 network rule")

    def sample_rows(self, tokens: torch.Tensor) -> list[str]:
        c = self.config
        states = tokens.view(c.n_states, c.height, c.width).tolist()
        return [f"  x{t:<3} " + " | ".join("".join(map(str, row)) for row in state)
                for t, state in enumerate(states)]

    def hidden(self) -> dict[str, Any]:
        return {"rule": "a new random network per sequence (nothing fixed per instance)"}

    def rule_text(self, hidden: dict[str, Any]) -> list[str]:
        return [hidden["rule"], "ceiling: an upper bound (the predictor that knows each "
                "sequence's rule)"]
