"""What every task shares: a sequence of T states of S tokens, scored from the second state on,
with a held-out part of the state space that training never touches.

A task is a pure batch generator plus a `LightningDataModule` that adds seeds, devices and the
Lightning hooks. Batches are drawn on the training device from (data seed, step), so nothing is
read from disk and no worker processes are needed. With several devices each rank takes its share
of the same global batch, so a step is the same data whatever the device count.

**Held out means never trained on.** Small tasks have few states (a linear map on 6 bits has 64),
so a separate random stream would draw every evaluation sequence within a few steps. Instead the
states are split by a fixed hash (salted by the task instance): a held-out state is never the
source x_t (t < T-1) of a training transition, enforced by vectorised rejection of whole
sequences. Evaluation sequences start from held-out states and score only the transitions whose
source is held out; a held-out part of at most `SMALL_HELD_OUT` states is evaluated whole, each
state once. Beside it, a fixed *probe* of training sequences measures the training distribution,
so memorisation (train high, held-out low) shows as a gap.

Positions are those of the model input: a sequence of n = S*T tokens gives L = n - 1 input
positions, and the output at position p predicts token p + 1.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, NamedTuple

import lightning as L
import numpy as np
import torch

from .config import PER_SEED, TaskConfig
from .split import all_states, chunk_bounds, state_hash

TRAIN_STREAM, EVAL_STREAM, PROBE_STREAM, INSTANCE_STREAM = 0, 1, 3, 4
EVAL_TOKENS = 1 << 15  # tokens per evaluation forward pass (the quickstart's whole set is one)
SMALL_HELD_OUT = 2048  # a held-out part this small is the evaluation set, each state once
ENUMERABLE = 1 << 18  # state spaces up to this size are enumerated to find the held-out part
MAX_ROUNDS = 64  # rejection rounds before a sampler gives up with a clear error


class Batch(NamedTuple):
    inputs: torch.Tensor  # (B, L) long
    targets: torch.Tensor  # (B, L) long, targets[:, p] = token p + 1
    counted: torch.Tensor | None = None  # (B, L) bool: scored targets that count (evaluation)
    probe: torch.Tensor | None = None  # (B,) bool: a training-part sequence (evaluation)


class EvalSet(NamedTuple):
    tokens: torch.Tensor  # (N, S*T) long: held-out sequences, then the training probe
    held_out: torch.Tensor  # (N, T-1) bool: transition t's source x_t is held out
    probe: torch.Tensor  # (N,) bool: a row of the training probe


def split_tokens(tokens: torch.Tensor) -> Batch:
    """(B, n) token sequences -> next-token inputs and targets, each (B, n - 1)."""
    return Batch(tokens[:, :-1], tokens[:, 1:])


def derive_seed(*numbers: int) -> int:
    """A 63-bit seed that depends on every number, none overlapping."""
    state = np.random.SeedSequence(list(numbers)).generate_state(1, np.uint64)[0]
    return int(state) & ((1 << 63) - 1)


def make_generator(seed: int, stream: int, index: int, device: torch.device) -> torch.Generator:
    """A torch generator on `device` whose stream depends on all three numbers, none overlapping."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, stream, index))
    return gen


class StateSequenceTask(L.LightningDataModule):
    """Base DataModule for tasks whose sequences are T states of `state_size` tokens."""

    def __init__(self, config: TaskConfig, batch_size: int = 64, eval_size: int = 512,
                 seed: int = 0, probe_size: int = 256):
        super().__init__()
        self.config = config
        self.batch_size = batch_size
        self.eval_size = eval_size
        self.probe_size = probe_size
        self.seed = seed
        self._eval: EvalSet | None = None
        self._references: dict[str, dict[str, float]] | None = None

    # --- what a concrete task defines -------------------------------------------------------
    state_size: int
    vocab_size: int

    def rollout(self, x0: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Sequences (B, S*T) starting from the states x0 (B, S), on x0's device (a task that
        draws something per sequence, such as a rule, draws it from `generator`)."""
        raise NotImplementedError

    def parents(self) -> torch.Tensor:
        """(S, S) 0/1: [i, j] = 1 when token i of a state reads token j of the state before."""
        raise NotImplementedError

    def hidden(self) -> dict[str, Any]:
        """The hidden parameters, JSON-ready, for `bench task --json`."""
        raise NotImplementedError

    def flags(self) -> list[str]:
        """One line per way this instance is degenerate but still usable (empty when none)."""
        return []

    def inspect(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, dict[str, Any]]:
        """`n` sequences (n, S*T) and the hidden parameters that made them."""
        return self.sample(n, generator), self.hidden()

    def sample_note(self, hidden: dict[str, Any], i: int) -> str:
        """What `bench task` prints beside sample i of `inspect` (e.g. the rule it used)."""
        return ""

    def rule_text(self, hidden: dict[str, Any]) -> list[str]:
        """The hidden rule as `bench task` prints it, one line each."""
        return []

    def next_token_posterior(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, P, V): the Bayes-optimal predictor's distribution over each scored token of
        `tokens` (B, S*T), knowing the task's hidden parameters but not the sequence's own draws.
        Here every scored token is a function of the state before it (a one-hot); tasks whose
        sequences hide something (a rule drawn per sequence) override it."""
        scored = tokens[:, self.state_size :]
        if self.config.random_targets:
            return torch.full((*scored.shape, self.vocab_size), 1 / self.vocab_size)
        return torch.nn.functional.one_hot(scored, self.vocab_size).float()

    # --- the task instance and its split -----------------------------------------------------
    @property
    def instance_seed(self) -> int:
        """The seed that drew this instance: task_seed, or one derived from the run seed."""
        if self.config.task_seed == PER_SEED:
            return derive_seed(self.seed, INSTANCE_STREAM)
        return int(self.config.task_seed)

    @property
    def n_state_values(self) -> int:
        """Size of the state space V^S (an exact Python integer)."""
        return self.vocab_size ** self.state_size

    def is_held_out(self, states: torch.Tensor) -> torch.Tensor:
        """(..., S) states -> (...) bool: in the held-out part (a fixed hash of the instance)."""
        return state_hash(states, derive_seed(self.instance_seed, EVAL_STREAM)) < \
            self.config.held_out

    def sources(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, S*T) -> (B, T-1, S): the source state x_t of each transition."""
        return tokens.view(len(tokens), self.config.n_states, self.state_size)[:, :-1]

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """`n` sequences (n, S*T) from uniform x_0, with no split applied (the pure generator)."""
        x0 = torch.randint(self.vocab_size, (n, self.state_size), generator=generator,
                           device=generator.device)
        return self.rollout(x0, generator)

    def draw(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """`n` training-part sequences (n, S*T): no source x_0 .. x_{T-2} is held out. Whole
        batches are drawn and rejected at once (no loop per sequence)."""
        accept = (1 - self.config.held_out) ** (self.config.n_states - 1)
        kept, have = [], 0
        for _ in range(MAX_ROUNDS):
            tokens = self.sample(math.ceil((n - have) / accept * 1.25) + 8, generator)
            ok = ~self.is_held_out(self.sources(tokens)).any(1)
            kept.append(tokens[ok][: n - have])
            have += len(kept[-1])
            if have == n:
                return self._noise(torch.cat(kept), generator)
        raise RuntimeError(f"task: {MAX_ROUNDS} rounds drew {have} of {n} training sequences; "
                           "this instance's dynamics keep entering the held-out part")

    def _noise(self, tokens: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if self.config.random_targets:
            noise = torch.randint(self.vocab_size, tokens.shape, generator=generator,
                                  device=tokens.device)
            tokens[:, self.state_size :] = noise[:, self.state_size :]
        return tokens

    def held_out_states(self) -> torch.Tensor:
        """(N, S) the held-out start states of the evaluation set, on the CPU: every held-out
        state when there are at most SMALL_HELD_OUT, else `eval_size` distinct ones at random."""
        V, S, n = self.vocab_size, self.state_size, self.n_state_values
        gen = make_generator(self.instance_seed, EVAL_STREAM, 0, torch.device("cpu"))
        if n <= ENUMERABLE:
            states = all_states(V, S)
            held = states[self.is_held_out(states)]
            if len(held) == 0:
                raise ValueError(f"held_out: none of the {n} states is held out at "
                                 f"{self.config.held_out}; raise it")
            if len(held) <= SMALL_HELD_OUT:
                return held
            return held[torch.randperm(len(held), generator=gen)[: self.eval_size]]
        found = torch.empty(0, S, dtype=torch.long)
        for _ in range(MAX_ROUNDS):
            draw = torch.randint(V, (4 * self.eval_size, S), generator=gen)
            found = torch.unique(torch.cat([found, draw[self.is_held_out(draw)]]), dim=0)
            if len(found) >= self.eval_size:
                return found[torch.randperm(len(found), generator=gen)[: self.eval_size]]
        raise ValueError(f"held_out: found {len(found)} of {self.eval_size} held-out states "
                         f"at {self.config.held_out}; raise it")

    def eval_set(self, device: torch.device) -> EvalSet:
        """The fixed evaluation set, cached on `device`: held-out sequences then the probe."""
        if self._eval is None or self._eval.tokens.device != device:
            cpu = torch.device("cpu")
            x0 = self.held_out_states()
            held = self._noise(self.rollout(x0, make_generator(self.instance_seed, EVAL_STREAM,
                                                               1, cpu)),
                               make_generator(self.instance_seed, EVAL_STREAM, 2, cpu))
            probe = self.draw(self.probe_size, make_generator(self.instance_seed, PROBE_STREAM,
                                                              0, cpu))
            tokens = torch.cat([held, probe])
            flags = torch.cat([self.is_held_out(self.sources(held)),
                               torch.zeros(len(probe), self.config.n_states - 1, dtype=torch.bool)])
            is_probe = torch.arange(len(tokens)) >= len(held)
            self._eval = EvalSet(tokens.to(device), flags.to(device), is_probe.to(device))
        return self._eval

    def eval_tokens(self, device: torch.device = torch.device("cpu")) -> torch.Tensor:
        """(N, S*T) the held-out evaluation sequences (without the probe)."""
        es = self.eval_set(device)
        return es.tokens[~es.probe]

    def counted(self, held_out: torch.Tensor, probe: torch.Tensor) -> torch.Tensor:
        """(N, T-1) transition flags and (N,) probe flags -> (N, L) bool: the targets scored
        (tokens of x_1 ..) whose transition counts: from a held-out source, or any in the probe."""
        per_state = held_out | probe[:, None]  # (N, T-1)
        tokens = per_state.repeat_interleave(self.state_size, dim=1)  # (N, S*(T-1))
        return torch.cat([tokens.new_zeros(len(tokens), self.state_size - 1), tokens], dim=1)

    def split_sizes(self) -> dict[str, int]:
        """Sizes of the state space, its held-out part (exact when enumerable, else expected),
        and of the evaluation set and probe."""
        n = self.n_state_values
        es = self.eval_set(torch.device("cpu"))
        if n <= ENUMERABLE:
            held = int(self.is_held_out(all_states(self.vocab_size, self.state_size)).sum())
        else:
            held = round(n * self.config.held_out)
        return {"states": n, "held_out_states": held, "training_states": n - held,
                "evaluated_sequences": int((~es.probe).sum()),
                "evaluated_transitions": int(es.held_out[~es.probe].sum()),
                "probe_sequences": int(es.probe.sum())}

    def leaks(self, steps: range, device: torch.device = torch.device("cpu")) -> int:
        """Training transitions of `steps` whose source is a state the evaluation scores: 0
        unless the split is broken. Checked against the evaluation set itself, not the hash."""
        es = self.eval_set(device)
        scored = self.sources(es.tokens[~es.probe])[es.held_out[~es.probe]]  # (M, S)
        digits = self.vocab_size ** torch.arange(self.state_size, device=device)
        if self.n_state_values >= 2**62:
            raise ValueError("leaks: the state space is too large to encode states exactly")
        scored = (scored * digits).sum(-1)
        found = 0
        for step in steps:
            batch = self.train_batch(step, device)
            tokens = torch.cat([batch.inputs, batch.targets[:, -1:]], dim=1)
            found += int(torch.isin((self.sources(tokens) * digits).sum(-1), scored).sum())
        return found

    # --- what the tables compare against ------------------------------------------------------
    def references(self) -> dict[str, dict[str, float]]:
        """Null and ceiling values of each metric on the held-out transitions:
        `chance` (uniform guessing), `no_context` (the best predictor that reads no context: the
        per-position majority of this set), `ceiling` (the Bayes-optimal predictor; its exact
        accuracy is bounded by its token accuracy)."""
        if self._references is None:
            es = self.eval_set(torch.device("cpu"))
            tokens, held = es.tokens[~es.probe], es.held_out[~es.probe]
            V, S = self.vocab_size, self.state_size
            truth = tokens[:, S:]  # (N, S*(T-1))
            counted = held.repeat_interleave(S, dim=1)
            onehot = torch.nn.functional.one_hot(truth, V).float() * counted[..., None]
            counts = onehot.sum(0)  # (P, V) per position over counted rows
            total = counts.sum()
            freq = counts / counts.sum(-1, keepdim=True).clamp_min(1)
            majority = counts.argmax(-1)  # (P,)
            entropy = -(counts * freq.clamp_min(1e-12).log()).sum()
            states = held.flatten()
            right = (truth == majority).view(len(truth), -1, S).all(-1).flatten()[states]
            post = self.next_token_posterior(tokens)  # (N, P, V)
            p_true = post.gather(-1, truth[..., None])[..., 0]
            token_ceiling = float((post.max(-1).values * counted).sum() / total)
            self._references = {
                "chance": {"token_acc": 1 / V, "loss": math.log(V), "exact_acc": V ** -S},
                "no_context": {"token_acc": float(counts.max(-1).values.sum() / total),
                               "loss": float(entropy / total) + 0.0,
                               "exact_acc": float(right.float().mean())},
                "ceiling": {"token_acc": token_ceiling,
                            "loss": float(-(p_true.clamp_min(1e-12).log() * counted).sum()
                                          / total) + 0.0,
                            "exact_acc": token_ceiling},
            }
        return self._references

    def ceiling(self) -> tuple[float, float]:
        """(token accuracy, loss in nats) of the Bayes-optimal predictor on the held-out
        transitions: the best any model can score (1 and 0 for a deterministic task)."""
        c = self.references()["ceiling"]
        return c["token_acc"], c["loss"]

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

    def train_batch(self, step: int, device: torch.device, rank: int = 0, world: int = 1) -> Batch:
        """This rank's rows of step `step`'s global batch: any device count sees the same data."""
        gen = make_generator(self.seed, TRAIN_STREAM, step, device)
        return split_tokens(self.draw(self.batch_size, gen).tensor_split(world)[rank])

    def eval_chunks(self, world: int = 1) -> list[tuple[int, int]]:
        """Row slices of the evaluation set, one forward pass of every rank each."""
        return chunk_bounds(len(self.eval_set(torch.device("cpu")).tokens),
                            self.eval_rows * world, world)

    def eval_batch(self, device: torch.device, rank: int = 0, world: int = 1,
                   chunk: int | None = None) -> Batch:
        """This rank's share of the evaluation set (of one chunk of it, with `chunk`), with the
        targets that count and the probe rows marked."""
        es = self.eval_set(device)
        a, b = (0, len(es.tokens)) if chunk is None else self.eval_chunks(world)[chunk]
        tokens, held, probe = (x[a:b].tensor_split(world)[rank] for x in es)
        inputs, targets, _, _ = split_tokens(tokens)
        return Batch(inputs, targets, self.counted(held, probe), probe)

    @property
    def eval_rows(self) -> int:
        """Sequences per evaluation forward pass, bounded in tokens so long sequences fit."""
        return max(1, EVAL_TOKENS // self.n_tokens)

    # --- Lightning hooks: the loaders yield step indices; batches are made on the device ------
    def train_dataloader(self):
        return itertools.count()

    def val_dataloader(self):
        world = self.trainer.world_size if self.trainer is not None else 1
        return range(len(self.eval_chunks(world)))

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Batch:
        trainer = self.trainer
        where = (trainer.strategy.root_device, trainer.global_rank, trainer.world_size)
        if trainer.training:  # the step about to be taken (a resumed run restarts the loader)
            return self.train_batch(trainer.global_step, *where)
        return self.eval_batch(*where, chunk=int(batch))
