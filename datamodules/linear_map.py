"""Sparse linear map mod C: x_{t+1} = A x_t mod C, with exactly `sparsity` ones per row of A.

Each output token reads `sparsity` tokens of the previous state; finding which ones is the sparse
mixing pattern the model must discover. Difficulty tracks the number of candidate supports
binom(S, s). With s = S every bit of every later state is the parity of x_0, a shortcut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .base import StateSequenceTask, TaskConfig


@dataclass
class LinearMapConfig(TaskConfig):
    name: str = "linear_map"
    state_size: int = 6
    """tokens per state S (>= 1)"""
    sparsity: int = 2
    """ones per row of A, s (1 <= s <= state_size)"""
    modulus: int = 2
    """token alphabet size C (>= 2); arithmetic is mod C"""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.state_size < 1:
            raise ValueError(f"state_size: must be >= 1, got {self.state_size}")
        if not 1 <= self.sparsity <= self.state_size:
            raise ValueError(
                f"sparsity: must be in 1..state_size ({self.state_size}), got {self.sparsity}"
            )
        if self.modulus < 2:
            raise ValueError(f"modulus: must be >= 2, got {self.modulus}")


def draw_matrix(state_size: int, sparsity: int, seed: int) -> torch.Tensor:
    """(S, S) long 0/1 with exactly `sparsity` ones per row, columns chosen uniformly per row."""
    gen = torch.Generator().manual_seed(seed)
    keys = torch.rand(state_size, state_size, generator=gen)
    cols = keys.argsort(dim=1)[:, :sparsity]  # a uniform s-subset per row
    return torch.zeros(state_size, state_size, dtype=torch.long).scatter_(1, cols, 1)


def linear_map_batch(
    matrix: torch.Tensor, n_states: int, batch: int, modulus: int, generator: torch.Generator
) -> torch.Tensor:
    """Draw `batch` sequences x_0 .. x_{T-1}, flattened to (batch, S*T).

    x_0 is uniform over {0..C-1}^S and x_{t+1} = A x_t mod C. With A = [[0, 1], [1, 1]], C = 2
    and x_0 = (1, 0): x_1 = (0, 1), x_2 = (1, 1), so the tokens are 1 0 0 1 1 1.
    """
    S = matrix.shape[0]
    a = matrix.to(generator.device)
    x = torch.randint(modulus, (batch, S), generator=generator, device=generator.device)
    states = [x]
    for _ in range(n_states - 1):
        x = (x @ a.T) % modulus  # (B, S): x_{t+1}[i] = sum_j A[i, j] x_t[j]
        states.append(x)
    return torch.cat(states, dim=1)


class LinearMap(StateSequenceTask):
    config: LinearMapConfig

    def __init__(self, config: LinearMapConfig, **kwargs: Any):
        super().__init__(config, **kwargs)
        self.matrix = draw_matrix(config.state_size, config.sparsity, config.task_seed)
        self.state_size = config.state_size
        self.vocab_size = config.modulus

    def sample(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        c = self.config
        return linear_map_batch(self.matrix, c.n_states, batch_size, c.modulus, generator)

    def parents(self) -> torch.Tensor:
        return self.matrix

    def hidden(self) -> dict[str, Any]:
        return {"matrix": self.matrix.tolist()}
