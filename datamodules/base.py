"""What every task shares: a sequence of T states of S tokens, scored from the second state on.

A task is a pure batch generator plus a `LightningDataModule` that adds seeds, devices and the
Lightning hooks. Batches are drawn on the training device from (data seed, step), so nothing is
read from disk and no worker processes are needed. With several devices each rank takes its share
of the same global batch, so a step is the same data whatever the device count. The evaluation
set is one fixed batch drawn from a seed stream disjoint from training.

Positions are those of the model input: a sequence of n = S*T tokens gives L = n - 1 input
positions, and the output at position p predicts token p + 1.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import lightning as L
import numpy as np
import torch

TRAIN_STREAM, EVAL_STREAM = 0, 1
EVAL_TOKENS = 1 << 15  # tokens per evaluation forward pass (the quickstart's 512 x 24 is one)


@dataclass
class TaskConfig:
    """Fields every task has; each task's config subclasses this."""

    name: str = ""
    n_states: int = 4
    """number of states T in a sequence (>= 2; the first is random and never scored)"""
    task_seed: int = 0
    """seed that draws the hidden rule (matrix or rule pool), fixed for the task"""
    random_targets: bool = False
    """leak control: replace every scored token by a uniform random one (nothing to learn)"""

    def __post_init__(self) -> None:
        if self.n_states < 2:
            raise ValueError(f"n_states: must be >= 2, got {self.n_states}")


class Batch(NamedTuple):
    inputs: torch.Tensor  # (B, L) long
    targets: torch.Tensor  # (B, L) long, targets[:, p] = token p + 1


def split_tokens(tokens: torch.Tensor) -> Batch:
    """(B, n) token sequences -> next-token inputs and targets, each (B, n - 1)."""
    return Batch(tokens[:, :-1], tokens[:, 1:])


def make_generator(seed: int, stream: int, index: int, device: torch.device) -> torch.Generator:
    """A torch generator on `device` whose stream depends on all three numbers, none overlapping."""
    state = np.random.SeedSequence([seed, stream, index]).generate_state(1, np.uint64)[0]
    gen = torch.Generator(device=device)
    gen.manual_seed(int(state) & ((1 << 63) - 1))
    return gen


class StateSequenceTask(L.LightningDataModule):
    """Base DataModule for tasks whose sequences are T states of `state_size` tokens."""

    def __init__(
        self, config: TaskConfig, batch_size: int = 64, eval_size: int = 512, seed: int = 0
    ):
        super().__init__()
        self.config = config
        self.batch_size = batch_size
        self.eval_size = eval_size
        self.seed = seed
        self._eval: torch.Tensor | None = None

    # --- what a concrete task defines -------------------------------------------------------
    state_size: int
    vocab_size: int

    def sample(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """(batch_size, S*T) long tokens on the generator's device."""
        raise NotImplementedError

    def parents(self) -> torch.Tensor:
        """(S, S) 0/1: [i, j] = 1 when token i of a state reads token j of the state before."""
        raise NotImplementedError

    def hidden(self) -> dict[str, Any]:
        """The hidden parameters, JSON-ready, for `bench task --json`."""
        raise NotImplementedError

    def inspect(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, dict[str, Any]]:
        """`n` sequences (n, S*T) and the hidden parameters that made them."""
        return self.draw(n, generator), self.hidden()

    def next_token_posterior(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, P, V): the Bayes-optimal predictor's distribution over each scored token of
        `tokens` (B, S*T), knowing the task's hidden parameters but not the sequence's own draws.
        Here every scored token is a function of the state before it (a one-hot); tasks whose
        sequences hide something (a rule drawn per sequence) override it."""
        scored = tokens[:, self.state_size :]
        if self.config.random_targets:
            return torch.full((*scored.shape, self.vocab_size), 1 / self.vocab_size)
        return torch.nn.functional.one_hot(scored, self.vocab_size).float()

    def ceiling(self) -> tuple[float, float]:
        """(token accuracy, loss in nats) of the Bayes-optimal predictor on the held-out set:
        the best any model can score (accuracy 1 and loss 0 for a deterministic task)."""
        tokens = self.eval_tokens(torch.device("cpu"))
        post = self.next_token_posterior(tokens)
        truth = tokens[:, self.state_size :]
        accuracy = post.max(-1).values.mean()  # expected accuracy of the argmax guess
        loss = -post.gather(-1, truth[..., None]).clamp_min(1e-12).log().mean()
        return float(accuracy), float(loss) + 0.0  # no -0.0

    # --- shared ----------------------------------------------------------------------------
    @property
    def n_tokens(self) -> int:
        return self.state_size * self.config.n_states

    @property
    def seq_len(self) -> int:
        """Model input length L."""
        return self.n_tokens - 1

    def loss_mask(self) -> torch.Tensor:
        """(L,) bool: the outputs that are scored (those predicting a token of x_1 .. x_{T-1})."""
        return torch.arange(self.seq_len) >= self.state_size - 1

    def attention_target(self) -> torch.Tensor:
        """(L, L) 0/1 over input positions: row p (predicting token p+1) must read the columns set.

        Token p + 1 = x_{t+1}[i] reads x_t[j] at position t*S + j for every parent j of i.
        Rows of unscored positions are zero.
        """
        S, T = self.state_size, self.config.n_states
        par = self.parents()
        target = torch.zeros(self.n_tokens, self.n_tokens, dtype=torch.long)  # (token, token)
        for t in range(T - 1):
            target[(t + 1) * S : (t + 2) * S, t * S : (t + 1) * S] = par
        return target[1:, :-1].contiguous()  # row p = token p + 1, column q = input position q

    def draw(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        tokens = self.sample(batch_size, generator)
        if self.config.random_targets:
            noise = torch.randint(
                self.vocab_size, tokens.shape, generator=generator, device=tokens.device
            )
            tokens[:, self.state_size :] = noise[:, self.state_size :]
        return tokens

    def train_batch(self, step: int, device: torch.device, rank: int = 0, world: int = 1) -> Batch:
        """This rank's rows of step `step`'s global batch: any device count sees the same data."""
        gen = make_generator(self.seed, TRAIN_STREAM, step, device)
        return split_tokens(self.draw(self.batch_size, gen).tensor_split(world)[rank])

    def eval_batch(self, device: torch.device, rank: int = 0, world: int = 1,
                   chunk: int | None = None) -> Batch:
        """This rank's rows of the fixed held-out set; with `chunk`, only that slice of
        `eval_rows` sequences."""
        share = self.eval_tokens(device).tensor_split(world)[rank]
        return split_tokens(share if chunk is None else share.split(self.eval_rows)[chunk])

    def eval_tokens(self, device: torch.device) -> torch.Tensor:
        """The fixed held-out set (eval_size, S*T), the same for every seed, cached on `device`."""
        if self._eval is None or self._eval.device != device:
            gen = make_generator(self.config.task_seed, EVAL_STREAM, 0, device)
            self._eval = self.draw(self.eval_size, gen)
        return self._eval

    @property
    def eval_rows(self) -> int:
        """Sequences per evaluation forward pass, bounded in tokens so long sequences fit."""
        return max(1, EVAL_TOKENS // self.n_tokens)

    # --- Lightning hooks: the loaders yield step indices; batches are made on the device ------
    def train_dataloader(self):
        return itertools.count()

    def val_dataloader(self):
        world = self.trainer.world_size if self.trainer is not None else 1
        return range(math.ceil(math.ceil(self.eval_size / world) / self.eval_rows))

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Batch:
        trainer = self.trainer
        where = (trainer.strategy.root_device, trainer.global_rank, trainer.world_size)
        if trainer.training:
            return self.train_batch(int(batch), *where)
        return self.eval_batch(*where, chunk=int(batch))
