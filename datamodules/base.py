"""What every task shares: sequences of a fixed length, scored at fixed positions, with a
held-out part that training never touches.

A task is a pure batch generator plus a `LightningDataModule` that adds seeds, devices and the
Lightning hooks. Batches are drawn on the training device from (data seed, step), so nothing is
read from disk and no worker processes are needed. With several devices each rank takes its share
of the same global batch, so a step is the same data whatever the device count.

**Held out means never trained on.** Each task family holds out part of what a sequence is made
of by a fixed hash salted by the task instance (states for the tasks of states, `states.py`;
token pairs for the in-context tasks, `context.py`): no training sequence contains a held-out
part, and the evaluation scores only the targets that depend on one. Beside it, a fixed *probe*
of training sequences measures the training distribution, so memorisation (train high,
held-out low) shows as a gap.

Positions are those of the model input: a sequence of n tokens gives L = n - 1 input positions,
and the output at position p predicts token p + 1. The scored positions are the same in every
sequence (`loss_mask`); the ground-truth pattern (which input positions the output at a scored
position must read) is either the same for every sequence (`attention_target`) or drawn with it
(`patterns`, when `PER_SEQUENCE_PATTERN`).
"""

from __future__ import annotations

import itertools
import math
from typing import Any, NamedTuple

import lightning as L
import numpy as np
import torch

from .config import PER_SEED, SCREEN_MIN_ROWS, TaskConfig
from .split import chunk_bounds

TRAIN_STREAM, EVAL_STREAM, PROBE_STREAM, INSTANCE_STREAM, REPLACE_STREAM = 0, 1, 3, 4, 5
REPLACEMENT_SAMPLE = 1024  # sequences whose tokens say which values a position takes
EVAL_TOKENS = 1 << 15  # tokens per evaluation forward pass (the quickstart's whole set is one)
REFERENCE_FLOATS = 1 << 24  # posterior entries per chunk when the references are computed
MAX_REFERENCE_FLOATS = 1 << 32  # posterior entries in all (a few seconds per 2^30 on a CPU)
SCREEN_TOKENS = 1 << 13  # a screen's held-out sequences hold at most this many tokens (long
# sequences hold many scored positions each), but never fewer than SCREEN_MIN_ROWS (config.py)
MAX_ROUNDS = 64  # rejection rounds before a sampler gives up with a clear error


class Batch(NamedTuple):
    inputs: torch.Tensor  # (B, L) long
    targets: torch.Tensor  # (B, L) long: token p + 1 (a task may set its scored ones: `split`)
    # (B, L) bool: the scored targets that count (evaluation: the held-out ones; training: set
    # only where a task's scored targets vary by sequence, else every scored one counts)
    counted: torch.Tensor | None = None
    probe: torch.Tensor | None = None  # (B,) bool: a training-part sequence (evaluation)


class EvalSet(NamedTuple):
    tokens: torch.Tensor  # (N, n) long: held-out sequences, then the training probe
    counted: torch.Tensor  # (N, L) bool: scored targets that count (every one in the probe)
    probe: torch.Tensor  # (N,) bool: a row of the training probe


def split_tokens(tokens: torch.Tensor) -> Batch:
    """(B, n) token sequences -> next-token inputs and targets, each (B, n - 1)."""
    return Batch(tokens[:, :-1], tokens[:, 1:])


def join_tokens(batch: Batch) -> torch.Tensor:
    """The (B, n) sequences a Batch was split from (the inverse of `split_tokens`)."""
    return torch.cat([batch.inputs, batch.targets[:, -1:]], dim=1)


def derive_seed(*numbers: int) -> int:
    """A 63-bit seed that depends on every number, none overlapping."""
    state = np.random.SeedSequence(list(numbers)).generate_state(1, np.uint64)[0]
    return int(state) & ((1 << 63) - 1)


def make_generator(seed: int, stream: int, index: int, device: torch.device) -> torch.Generator:
    """A torch generator on `device` whose stream depends on all three numbers, none overlapping."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, stream, index))
    return gen


class SequenceTask(L.LightningDataModule):
    """Base DataModule of every task: the split's streams, the evaluation set and references,
    the batches and the Lightning hooks."""

    PER_SEQUENCE_PATTERN = False
    """the ground-truth pattern depends on the sequence (`patterns`), not only on the task"""

    def __init__(self, config: TaskConfig, batch_size: int = 64, eval_size: int = 512,
                 seed: int = 0, probe_size: int = 256, screen_size: int = 0):
        super().__init__()
        self.config = config
        self.batch_size = batch_size
        self.eval_size = eval_size
        self.probe_size = probe_size
        self.screen_size = screen_size
        self.seed = seed
        self._eval: EvalSet | None = None
        self._screen_rows = 0
        self._references: dict[str, dict[str, float]] | None = None

    # --- what a concrete task defines -------------------------------------------------------
    vocab_size: int

    @property
    def n_tokens(self) -> int:
        """Tokens in a sequence."""
        raise NotImplementedError

    @property
    def group_size(self) -> int:
        """Consecutive scored targets that make one unit of exact accuracy (a state's tokens);
        1 makes exact accuracy the token accuracy."""
        return 1

    def loss_mask(self) -> torch.Tensor:
        """(L,) bool: the scored outputs, the same in every sequence."""
        raise NotImplementedError

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """`n` sequences (n, n_tokens) with no split applied (the pure generator)."""
        raise NotImplementedError

    def training_sequences(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """`n` sequences (n, n_tokens) that contain nothing held out."""
        raise NotImplementedError

    def held_out_sequences(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The evaluation sequences (N, n_tokens) on the CPU, and (N, L) bool: the scored targets
        that depend on a held-out part (the only ones the evaluation counts)."""
        raise NotImplementedError

    def attention_target(self) -> torch.Tensor:
        """(L, L) 0/1 over input positions: row p (predicting token p+1) must read the columns
        set; rows of unscored positions are zero. With `PER_SEQUENCE_PATTERN`, the mean of
        `patterns` over the evaluation set (what a reader of positions alone would see)."""
        raise NotImplementedError

    def patterns(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, P, L) float: the ground-truth pattern of each sequence of `tokens` (N, n) at
        its scored positions; by default the task's fixed one, broadcast."""
        pattern = self.attention_target().float()[self.scored_positions()].to(tokens.device)
        return pattern.expand(len(tokens), *pattern.shape)

    def candidates(self, pattern: torch.Tensor) -> torch.Tensor:
        """(..., P, L) bool: the positions a scored position chooses its parents among (the
        comparison the influence AUROC makes): by default every earlier position."""
        q = torch.arange(pattern.shape[-1], device=pattern.device)
        return (q[None, :] < self.scored_positions().to(pattern.device)[:, None]).expand(
            pattern.shape)

    def replacement_values(self) -> torch.Tensor:
        """(L, V) bool: the values the token at input position q may be replaced with when the
        intervention map (bench.training.influence) measures what reading q changes: by
        default every value the task's own sequences take at q, read off REPLACEMENT_SAMPLE
        fresh draws of the pure generator (a position that always holds one token, such as a
        delimiter, has no replacement and no influence). Tasks whose every position takes
        every value of a known set override it."""
        cpu = torch.device("cpu")
        tokens = self.sample(REPLACEMENT_SAMPLE,
                             make_generator(self.instance_seed, REPLACE_STREAM, 0, cpu))[:, :-1]
        valid = torch.zeros(tokens.shape[1], self.vocab_size, dtype=torch.bool)
        valid[torch.arange(tokens.shape[1]).expand_as(tokens), tokens] = True
        return valid

    def split(self, tokens: torch.Tensor) -> Batch:
        """(B, n) sequences -> model inputs and targets (B, n - 1): by default the next
        tokens; a task whose answer is not the next input (zoology's MQAR) sets its own."""
        return split_tokens(tokens)

    def train_counted(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """(B, L) bool: the scored targets the training loss reads in each of `tokens`; None
        (the default): every scored one."""
        return None

    def probe_counted(self, tokens: torch.Tensor) -> torch.Tensor:
        """(N, L) bool: the targets of probe sequences (N, n) that count, like the held-out
        ones: by default every scored one."""
        return self.loss_mask().expand(len(tokens), -1)

    def next_token_posterior(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, P, V): the Bayes-optimal predictor's distribution over each scored token of
        `tokens` (B, n), knowing the task's hidden parameters but not the sequence's own
        draws."""
        raise NotImplementedError

    def split_sizes(self) -> dict[str, int]:
        """Sizes of the held-out split and of the evaluation set and probe."""
        raise NotImplementedError

    def leaks(self, steps: range, device: torch.device = torch.device("cpu")) -> int:
        """Held-out parts the evaluation counts that the training batches of `steps` contain:
        0 unless the split is broken. Checked against the evaluation set itself."""
        raise NotImplementedError

    def hidden(self) -> dict[str, Any]:
        """The hidden parameters, JSON-ready, for `bench task --json`."""
        raise NotImplementedError

    def flags(self) -> list[str]:
        """One line per way this instance is degenerate but still usable (empty when none)."""
        return []

    def inspect(self, n: int, generator: torch.Generator) -> tuple[torch.Tensor, dict[str, Any]]:
        """`n` sequences (n, n_tokens) and the hidden parameters that made them."""
        return self.sample(n, generator), self.hidden()

    def sample_note(self, hidden: dict[str, Any], i: int) -> str:
        """What `bench task` prints beside sample i of `inspect` (e.g. the rule it used)."""
        return ""

    def sample_rows(self, tokens: torch.Tensor) -> list[str]:
        """One sequence (n,) as `bench task` prints it, one line per row."""
        return [" ".join(map(str, tokens.tolist()))]

    def split_text(self, split: dict[str, int]) -> str:
        """`split_sizes` in words, for `bench task`."""
        raise NotImplementedError

    def summary(self) -> str:
        """One line: what a sequence is made of, for `bench task`."""
        return f"sequences of {self.n_tokens} tokens, vocab {self.vocab_size}"

    def rule_text(self, hidden: dict[str, Any]) -> list[str]:
        """The hidden rule as `bench task` prints it, one line each."""
        return []

    # --- the task instance ---------------------------------------------------------------------
    @property
    def instance_seed(self) -> int:
        """The seed that drew this instance: task_seed, or one derived from the run seed."""
        if self.config.task_seed == PER_SEED:
            return derive_seed(self.seed, INSTANCE_STREAM)
        return int(self.config.task_seed)

    @property
    def seq_len(self) -> int:
        """Model input length L."""
        return self.n_tokens - 1

    def scored_positions(self) -> torch.Tensor:
        """(P,) the scored input positions."""
        return self.loss_mask().nonzero().squeeze(1)

    def draw(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """`n` training-part sequences (n, n_tokens), their targets randomised under the leak
        control."""
        return self._noise(self.training_sequences(n, generator), generator)

    def _noise(self, tokens: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if self.config.random_targets:
            noise = torch.randint(self.vocab_size, tokens.shape, generator=generator,
                                  device=tokens.device)
            at = self.scored_positions().to(tokens.device) + 1  # the scored targets' tokens
            tokens[:, at] = noise[:, at]
        return tokens

    def eval_set(self, device: torch.device) -> EvalSet:
        """The fixed evaluation set, cached on `device`: held-out sequences and the probe. With
        a screen, its rows come first: the first `screen_size` held-out sequences and half as
        many probe ones; every other row follows (held-out rows keep their order)."""
        if self._eval is None or self._eval.tokens.device != device:
            cpu = torch.device("cpu")
            held, counted = self.held_out_sequences()
            held = self._noise(held, make_generator(self.instance_seed, EVAL_STREAM, 2, cpu))
            probe = self.draw(self.probe_size, make_generator(self.instance_seed, PROBE_STREAM,
                                                              0, cpu))
            size = min(self.screen_size, max(SCREEN_MIN_ROWS, SCREEN_TOKENS // self.n_tokens))
            h, p = min(size, len(held)), min(size // 2, len(probe))
            self._screen_rows = h + p if self.screen_size else 0
            probe_counted = self.probe_counted(probe)
            tokens = torch.cat([held[:h], probe[:p], held[h:], probe[p:]])
            counted = torch.cat([counted[:h], probe_counted[:p], counted[h:], probe_counted[p:]])
            is_probe = torch.cat([torch.zeros(h, dtype=torch.bool), torch.ones(p, dtype=torch.bool),
                                  torch.zeros(len(held) - h, dtype=torch.bool),
                                  torch.ones(len(probe) - p, dtype=torch.bool)])
            self._eval = EvalSet(tokens.to(device), counted.to(device), is_probe.to(device))
        return self._eval

    def eval_tokens(self, device: torch.device = torch.device("cpu")) -> torch.Tensor:
        """(N, n_tokens) the held-out evaluation sequences (without the probe)."""
        es = self.eval_set(device)
        return es.tokens[~es.probe]

    # --- what the tables compare against ------------------------------------------------------
    def references(self) -> dict[str, dict[str, float]]:
        """Null and ceiling values of each metric on the counted held-out targets:
        `chance` (uniform guessing), `no_context` (the best predictor that reads no context: the
        per-position majority of this set), `ceiling` (the Bayes-optimal predictor; its exact
        accuracy is bounded by its token accuracy)."""
        if self._references is None:
            es = self.eval_set(torch.device("cpu"))
            tokens, scored = es.tokens[~es.probe], self.scored_positions()
            V, G = self.vocab_size, self.group_size
            truth = self.split(tokens).targets[:, scored]  # (N, P)
            counted = es.counted[~es.probe][:, scored]  # (N, P)
            N, P = truth.shape
            # counts of each (position, token) among the counted targets, sparse: P x V can be
            # large (a long sequence with a large vocabulary)
            cells, n = torch.unique((torch.arange(P) * V + truth)[counted], return_counts=True)
            at, n = cells // V, n.double()
            per_position = torch.zeros(P, dtype=n.dtype).index_add_(0, at, n)
            top = torch.zeros(P, dtype=n.dtype).scatter_reduce_(0, at, n, "amax")
            total = n.sum()
            entropy = -(n * (n / per_position[at]).log()).sum()
            tied = n == top[at]  # the majority: the lowest token of a position's most counted
            majority = torch.full((P,), V).scatter_reduce_(0, at[tied], cells[tied] % V, "amin")
            majority[majority == V] = 0  # a position with no counted target
            groups = counted.view(N, -1, G)[..., 0].flatten()  # a group counts whole
            right = (truth == majority).view(N, -1, G).all(-1).flatten()[groups]
            # the Bayes-optimal predictor, in chunks of rows: a posterior is (rows, P, V), and a
            # task may build (rows, L, V) on the way (induction's votes per source), so L bounds it
            if N * P * V > MAX_REFERENCE_FLOATS:  # minutes of arithmetic, not a hang
                raise ValueError(
                    f"vocab: the Bayes-optimal reference needs {N:,} held-out sequences x {P:,} "
                    f"scored tokens x {V:,} values = {N * P * V:,} numbers; at most "
                    f"{MAX_REFERENCE_FLOATS:,} (a smaller vocabulary, e.g. n_colors, or fewer "
                    "evaluation sequences, train.eval_size)")
            best = torch.zeros((), dtype=torch.float64)  # sum of the max posterior
            log_loss = torch.zeros((), dtype=torch.float64)  # sum of -log p(truth)
            for rows in torch.arange(N).split(max(1, REFERENCE_FLOATS // (self.seq_len * V))):
                post, keep = self.next_token_posterior(tokens[rows]), counted[rows]
                p_true = post.gather(-1, truth[rows][..., None])[..., 0]
                best += (post.max(-1).values * keep).sum(dtype=torch.float64)
                log_loss -= (p_true.clamp_min(1e-12).log() * keep).sum(dtype=torch.float64)
            token_ceiling = float(best / total)
            self._references = {
                "chance": {"token_acc": 1 / V, "loss": math.log(V), "exact_acc": V ** -G},
                "no_context": {"token_acc": float(top.sum() / total),
                               "loss": float(entropy / total) + 0.0,
                               "exact_acc": float(right.float().mean())},
                "ceiling": {"token_acc": token_ceiling, "loss": float(log_loss / total) + 0.0,
                            "exact_acc": token_ceiling},
            }
        return self._references

    def ceiling(self) -> tuple[float, float]:
        """(token accuracy, loss in nats) of the Bayes-optimal predictor on the counted
        held-out targets: the best any model can score (1 and 0 for a deterministic task)."""
        c = self.references()["ceiling"]
        return c["token_acc"], c["loss"]

    # --- batches ---------------------------------------------------------------------------
    def train_batch(self, step: int, device: torch.device, rank: int = 0, world: int = 1) -> Batch:
        """This rank's rows of step `step`'s global batch: any device count sees the same data."""
        gen = make_generator(self.seed, TRAIN_STREAM, step, device)
        tokens = self.draw(self.batch_size, gen).tensor_split(world)[rank]
        return self.split(tokens)._replace(counted=self.train_counted(tokens))

    def eval_chunks(self, world: int = 1) -> list[tuple[int, int]]:
        """Row slices of the evaluation set, one forward pass of every rank each; with a
        screen, the first chunk is the screen."""
        return self._chunks(world)[0]

    def screen_chunks(self, world: int = 1) -> int:
        """How many of the first `eval_chunks` make the screen (0 without one)."""
        return self._chunks(world)[1]

    @property
    def screen_rows(self) -> int:
        """Rows of the evaluation set that make the screen (held-out and probe; 0 without)."""
        self.eval_set(torch.device("cpu"))
        return self._screen_rows

    def _chunks(self, world: int) -> tuple[list[tuple[int, int]], int]:
        n = len(self.eval_set(torch.device("cpu")).tokens)
        size, screen = self.eval_rows * world, self._screen_rows
        if not screen or screen >= n:
            return chunk_bounds(n, size, world), 0
        first = chunk_bounds(screen, size, world)
        rest = [(a + screen, b + screen) for a, b in chunk_bounds(n - screen, size, world)]
        return first + rest, len(first)

    def eval_batch(self, device: torch.device, rank: int = 0, world: int = 1,
                   chunk: int | None = None) -> Batch:
        """This rank's share of the evaluation set (of one chunk of it, with `chunk`), with the
        targets that count and the probe rows marked."""
        es = self.eval_set(device)
        a, b = (0, len(es.tokens)) if chunk is None else self.eval_chunks(world)[chunk]
        tokens, counted, probe = (x[a:b].tensor_split(world)[rank] for x in es)
        inputs, targets, _, _ = self.split(tokens)
        return Batch(inputs, targets, counted, probe)

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
