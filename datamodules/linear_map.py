"""Sparse linear map mod C: x_{t+1} = A x_t mod C, with exactly `sparsity` ones per row of A.

Each output token reads `sparsity` tokens of the previous state; finding which ones is the sparse
mixing pattern the model must discover. Difficulty tracks the number of candidate supports
binom(S, s). Two shortcuts are kept out: with s = S every token of a later state is the sum of the
whole previous state (refused), and a repeated row makes a token a copy of another token of the
same state (rows are distinct unless `distinct_rows` is off). A map that is not invertible over
Z_C confines later states to a smaller set (every even-s map over Z_2 is: A 1 = 0); where such
states are sources of later transitions (T > 2) the instance is flagged with its ranks, and
refused when it sends a later source state to zero.
"""

from __future__ import annotations

from typing import Any

import torch

from .config import LinearMapConfig
from .states import StateSequenceTask


def draw_matrix(state_size: int, sparsity: int, seed: int, distinct: bool = True) -> torch.Tensor:
    """(S, S) long 0/1 with exactly `sparsity` ones per row, columns chosen uniformly per row;
    with `distinct`, a row equal to an earlier one is drawn again (C(S, s) >= S rows exist)."""
    gen = torch.Generator().manual_seed(seed)
    rows: list[torch.Tensor] = []
    while len(rows) < state_size:
        cols = torch.rand(state_size, generator=gen).argsort()[:sparsity]  # a uniform s-subset
        row = torch.zeros(state_size, dtype=torch.long).scatter_(0, cols, 1)
        if not distinct or not any(torch.equal(row, r) for r in rows):
            rows.append(row)
    return torch.stack(rows)


def rank_mod(matrix: torch.Tensor, modulus: int) -> int:
    """Rank of `matrix` over Z_C: the smallest rank over Z_p of the primes p dividing C (the map
    is invertible mod C exactly when it is mod every such p)."""
    primes = [p for p in range(2, modulus + 1)
              if modulus % p == 0 and all(p % q for q in range(2, p))]
    return min(_rank_mod_prime(matrix.tolist(), p) for p in primes)


def _rank_mod_prime(rows: list[list[int]], p: int) -> int:
    rows = [[v % p for v in r] for r in rows]
    rank, n_cols = 0, len(rows[0])
    for col in range(n_cols):
        pivot = next((i for i in range(rank, len(rows)) if rows[i][col]), None)
        if pivot is None:
            continue
        rows[rank], rows[pivot] = rows[pivot], rows[rank]
        inv = pow(rows[rank][col], -1, p)
        rows[rank] = [v * inv % p for v in rows[rank]]
        for i in range(len(rows)):
            if i != rank and rows[i][col]:
                f = rows[i][col]
                rows[i] = [(a - f * b) % p for a, b in zip(rows[i], rows[rank])]
        rank += 1
    return rank


def linear_map_batch(
    matrix: torch.Tensor, n_states: int, batch: int, modulus: int, generator: torch.Generator
) -> torch.Tensor:
    """Draw `batch` sequences x_0 .. x_{T-1} from uniform x_0, flattened to (batch, S*T).

    x_{t+1} = A x_t mod C. With A = [[0, 1], [1, 1]], C = 2 and x_0 = (1, 0): x_1 = (0, 1),
    x_2 = (1, 1), so the tokens are 1 0 0 1 1 1.
    """
    x0 = torch.randint(modulus, (batch, matrix.shape[0]), generator=generator,
                       device=generator.device)
    return linear_map_rollout(matrix, x0, n_states, modulus)


def linear_map_rollout(matrix: torch.Tensor, x0: torch.Tensor, n_states: int,
                       modulus: int) -> torch.Tensor:
    """(B, S) start states -> (B, S*T) sequences under x_{t+1} = A x_t mod C."""
    # CUDA has no integer matmul: multiply in float64, exact here (A is 0/1 with s ones per
    # row, so each sum is at most s (C - 1) < 2^53)
    a = matrix.to(device=x0.device, dtype=torch.float64)
    x, states = x0, [x0]
    for _ in range(n_states - 1):
        x = (x.double() @ a.T).long() % modulus  # (B, S): x_{t+1}[i] = sum_j A[i, j] x_t[j]
        states.append(x)
    return torch.cat(states, dim=1)


class LinearMap(StateSequenceTask):
    config: LinearMapConfig

    def __init__(self, config: LinearMapConfig, **kwargs: Any):
        super().__init__(config, **kwargs)
        self.state_size = config.state_size
        self.vocab_size = config.modulus
        self.matrix = draw_matrix(config.state_size, config.sparsity, self.instance_seed,
                                  config.distinct_rows)
        # rank of A^k over Z_C for k = 1 .. T-1: x_k = A^k x_0 ranges over C^rank states
        power, self.ranks = torch.eye(self.state_size, dtype=torch.long), []
        for _ in range(config.n_states - 1):
            power = (self.matrix @ power) % config.modulus
            self.ranks.append(rank_mod(power, config.modulus))
        if config.n_states > 2 and self.ranks[-2] == 0:
            raise ValueError(f"task_seed: instance {self.instance_seed}'s map sends every "
                             f"state to 0 within {config.n_states - 2} steps (rank of A^k: "
                             f"{self.ranks}); the later states carry nothing to learn")

    def rollout(self, x0: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return linear_map_rollout(self.matrix, x0, self.config.n_states, self.config.modulus)

    def parents(self) -> torch.Tensor:
        return self.matrix

    def flags(self) -> list[str]:
        S, C = self.state_size, self.config.modulus
        out = []
        sources = self.ranks[: self.config.n_states - 2]  # x_1 .. x_{T-2} are sources too
        if any(r < S for r in sources):
            out.append(f"A is singular over Z_{C} (rank of A^k for the later sources x_k: "
                       f"{sources} of {S}): they lie in a smaller set, easier to memorise")
        if len({tuple(r) for r in self.matrix.tolist()}) < S:
            out.append("A repeats a row: some tokens copy another token of their state")
        return out

    def hidden(self) -> dict[str, Any]:
        return {"matrix": self.matrix.tolist(), "ranks": self.ranks}

    def rule_text(self, hidden: dict[str, Any]) -> list[str]:
        return ["A (row i lists which tokens of x_t give x_{t+1}[i]):",
                *("  " + " ".join(map(str, row)) for row in hidden["matrix"])]
