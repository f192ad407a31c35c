"""The LightningModule: backbone + task, next-token cross-entropy on the scored positions.

Evaluation metrics are torchmetrics over the transitions that count: on the held-out part
(`val/*`: loss, token accuracy, exact-state accuracy, every token of a state right) and on the
fixed probe of training sequences (`train/token_acc`, `train/exact_acc`), so memorisation shows
as a gap. For attention mixers it also logs the attention mass each scored position of the
evaluated sequences puts on its ground-truth parents (max over heads, per layer and overall).
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy, MulticlassExactMatch

from architectures import ArchConfig, Backbone, RecordsAttention
from datamodules.base import Batch, SequenceTask, join_tokens

from .config import TrainConfig

ATTENTION_ENTRIES = 1 << 20  # attention probabilities per head an evaluation records
ATTENTION_MIN_ROWS = 2  # sequences, however long


def attention_rows(seq_len: int) -> int:
    """Sequences whose attention an evaluation records: every one of the screen up to
    L = 64 (the quickstart's 23 included), 16 at L = 256, 2 at L = 1024."""
    return max(ATTENTION_MIN_ROWS, ATTENTION_ENTRIES // seq_len**2)


class EmergenceModule(L.LightningModule):
    def __init__(self, arch: ArchConfig, train: TrainConfig, task: SequenceTask,
                 compile: bool = False):
        """`compile`: torch.compile the model (runtime.compile; speed only)."""
        super().__init__()
        self.train_config = train
        self.vocab_size, self.group_size = task.vocab_size, task.group_size
        pattern = task.attention_target().float()  # (L, L)
        self.model = Backbone(arch, task.vocab_size, task.seq_len, pattern)
        scored = task.scored_positions()  # (P,) in groups of group_size (a state's tokens)
        self.register_buffer("scored", scored, persistent=False)
        self.register_buffer("pattern", pattern[scored], persistent=False)  # (P, L)
        self.val_loss = MeanMetric()
        self.val_token_acc = MulticlassAccuracy(task.vocab_size, average="micro")
        self.val_exact_acc = MulticlassExactMatch(task.vocab_size)
        self.probe_token_acc = MulticlassAccuracy(task.vocab_size, average="micro")
        self.probe_exact_acc = MulticlassExactMatch(task.vocab_size)
        self.attention = [m for m in self.model.modules() if isinstance(m, RecordsAttention)]
        self.recorded: list[torch.Tensor] = []  # per layer (R, H, L, L), last evaluation
        self.last_head_mass: list[torch.Tensor] = []  # per layer (H,), last eval batch
        self.task = task
        self.replaceable = task.replacement_values()  # (L, V): what the leak check draws
        self.skip_from: int | None = None  # this evaluation stops at this chunk (a screen)
        # the first chunk of this evaluation as it was scored: (batch, logits, recorded), for
        # the scrambled-future recomputation at a decisive evaluation (leak_check)
        self.first_chunk: tuple[Batch, torch.Tensor, bool] | None = None
        self.leaked = False  # a decisive evaluation changed with the future scrambled
        self.leak_s = 0.0  # seconds of those recomputations (bench perf reads it)
        self.analysis_s = 0.0  # seconds of attention statistics (bench perf reads it)
        # not a registered submodule: the compiled wrapper shares the model's parameters
        object.__setattr__(self, "forward_fn",
                           torch.compile(self.model) if compile else self.model)

    def scored_logits(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (B, P, V) and targets (B, P) at the scored positions."""
        logits = self.forward_fn(batch.inputs)
        return logits.index_select(1, self.scored), batch.targets.index_select(1, self.scored)

    def eval_logits(self, batch: Batch, record: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """`scored_logits`; with `record`, the attention mixers keep the probabilities of the
        first `attention_rows(L)` sequences only (the rest run unrecorded: forming (B, H, L, L)
        for a whole screen of 1,024-token sequences was 16% of a run's time)."""
        if not record:
            return self.scored_logits(batch)
        rows = attention_rows(batch.inputs.shape[1])
        for m in self.attention:
            m.record_attention = True
        try:
            logits = self.forward_fn(batch.inputs[:rows])
        finally:
            for m in self.attention:
                m.record_attention = False
        if rows < len(batch.inputs):
            logits = torch.cat([logits, self.forward_fn(batch.inputs[rows:])])
        return logits.index_select(1, self.scored), batch.targets.index_select(1, self.scored)

    def loss(self, batch: Batch) -> torch.Tensor:
        logits, targets = self.scored_logits(batch)
        if batch.counted is not None:  # a task whose scored targets vary by sequence
            keep = batch.counted.index_select(1, self.scored)
            return F.cross_entropy(logits[keep], targets[keep])
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        # only on the steps the logger writes or an evaluation follows (divergence is read
        # there): each self.log costs ~1 ms of Python, 5-8% of a quickstart step on CPU
        step = self.global_step + 1
        if (step % max(self.trainer.log_every_n_steps, 1) == 0
                or step % self.train_config.eval_every == 0):
            self.log("train/loss", loss, prog_bar=True)
        return loss

    def on_validation_epoch_start(self) -> None:
        self.skip_from = None  # the emergence callback may end this evaluation at the screen

    def current(self, metric: str) -> float:
        """`metric` over the chunks evaluated so far in this evaluation (the screen's value)."""
        value = {"val/loss": self.val_loss, "val/token_acc": self.val_token_acc,
                 "val/exact_acc": self.val_exact_acc}[metric].compute()
        return float(value)

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        if self.skip_from is not None and batch_idx >= self.skip_from:
            return
        # attention statistics on the first chunk's first sequences (held-out ones of the
        # screen): a fixed subset every evaluation, no (H, L, L) maps for the rest of the set
        stats = batch_idx == 0 and bool(self.attention)
        logits, targets = self.eval_logits(batch, stats)  # (B, P, V), (B, P)
        if batch_idx == 0:
            self.first_chunk = (batch, logits, stats)
        B, S = targets.shape[0], self.group_size
        counted = batch.counted.index_select(1, self.scored)  # (B, P)
        preds = logits.argmax(-1)
        held = ~batch.probe
        for rows, token_acc, exact_acc in (
                (held, self.val_token_acc, self.val_exact_acc),
                (batch.probe, self.probe_token_acc, self.probe_exact_acc)):
            keep = counted & rows[:, None]  # (B, P)
            if not keep.any():  # a chunk without rows of this kind (torchmetrics wants some)
                continue
            states = keep.view(B, -1, S)[..., 0]  # (B, groups): a group counts whole or not at all
            token_acc.update(preds[keep], targets[keep])
            exact_acc.update(preds.view(B, -1, S)[states], targets.view(B, -1, S)[states])
            if rows is held:
                loss = F.cross_entropy(logits[keep], targets[keep])
                self.val_loss.update(loss, weight=int(keep.sum()))  # exact mean over tokens
        self.log_dict({"val/loss": self.val_loss, "val/token_acc": self.val_token_acc,
                       "val/exact_acc": self.val_exact_acc,
                       "train/token_acc": self.probe_token_acc,
                       "train/exact_acc": self.probe_exact_acc},
                      batch_size=B)  # synced by torchmetrics
        if stats:
            start = time.perf_counter()
            self.recorded = [m.last_attention for m in self.attention]  # averaged when drawn
            recorded = self.recorded[0].shape[0]
            truth = self.batch_pattern(Batch(batch.inputs[:recorded], batch.targets[:recorded]))
            self.last_head_mass = [self.head_mass(m.last_attention, truth)
                                   for m in self.attention]
            mass = torch.stack([m.max() for m in self.last_head_mass])
            mass = {"val/parent_mass": mass.max(),
                    **{f"val/parent_mass_l{i}": v for i, v in enumerate(mass)}}
            self.log_dict(mass, batch_size=B, sync_dist=self.trainer.world_size > 1)
            self.analysis_s += time.perf_counter() - start

    def on_validation_epoch_end(self) -> None:
        """Whether this evaluation covered the whole set (val/full), and at a whole one the
        leak check. (The mixing-pattern maps are a measurement's: bench.measures.maps.)"""
        full = self.skip_from is None
        self.log("val/full", float(full), batch_size=1)
        if full and self.first_chunk is not None:  # a decisive evaluation: never leaked
            start = time.perf_counter()
            self.leaked = self.leaked or self.leak_check(*self.first_chunk)
            self.leak_s += time.perf_counter() - start
        self.first_chunk = None

    def leak_check(self, batch: Batch, logits: torch.Tensor, recorded: bool) -> bool:
        """Whether the scored logits of `batch` (the evaluation's first chunk, as scored:
        `logits`) change when the inputs after a cut are replaced by random values the task's
        sequences take there, at every scored cut: each sequence of the chunk is scrambled after
        its own cut (the cuts dealt to the sequences in a new random order at every step, so
        ceil(cuts / chunk) calls), recomputed as the evaluation computed it (mode, grad setting,
        batch size, length, the recorded split, autocast); every scored position at or before
        its cut must be bit-identical. A check of the outputs that count, so a mixer that reads
        the future only sometimes (after many calls, at random, at one batch size, at one
        position) is caught where it did."""
        inputs, L = batch.inputs, batch.inputs.shape[1]
        scored = self.scored[self.scored < L - 1].cpu()  # a cut at the last position hides nothing
        if not len(scored):
            return False
        gen = torch.Generator().manual_seed(self.task.instance_seed + self.global_step)
        cuts = scored[torch.randperm(len(scored), generator=gen)].tolist()
        valid = self.replaceable.float().cpu()  # (L, V)
        B = len(inputs)
        for start in range(0, len(cuts), B):
            group = cuts[start:start + B]
            rows = torch.randperm(B, generator=gen)[:len(group)].tolist()
            scrambled = inputs.clone()
            for row, cut in zip(rows, group):
                later = torch.multinomial(valid[cut + 1:], 1, generator=gen)[:, 0]  # (L - cut - 1,)
                scrambled[row, cut + 1:] = later.to(inputs.device)
            with self.trainer.precision_plugin.val_step_context():  # as validation_step ran
                again, _ = self.eval_logits(Batch(scrambled, batch.targets), recorded)
            for row, cut in zip(rows, group):
                keep = self.scored <= cut
                if not torch.equal(again[row, keep], logits[row, keep]):
                    return True
        return False

    def batch_pattern(self, batch: Batch) -> torch.Tensor:
        """The ground truth of `batch`'s sequences: (B, P, L) for a per-sequence pattern, else
        the task's (P, L)."""
        if not self.task.PER_SEQUENCE_PATTERN:
            return self.pattern
        return self.task.patterns(join_tokens(batch))

    def head_mass(self, probs: torch.Tensor, pattern: torch.Tensor | None = None) -> torch.Tensor:
        """Attention probs (..., H, L, L) -> (H,): each head's mean mass on the parents, over
        the scored rows that have parents; `pattern` (P, L), or (B, P, L) with probs (B, H, L,
        L) (default: the task's fixed pattern)."""
        # read only the parents' entries (the pattern is sparse): a dense (..., H, P, L) copy
        # of the rows took seconds per evaluation at L = 1024
        pattern = self.pattern if pattern is None else pattern
        nz = pattern.nonzero()  # (nnz, 2) or (nnz, 3): [sequence,] row, parent
        weight = pattern[tuple(nz.T)]  # (nnz,)
        if pattern.dim() == 2:  # every scored row has parents
            picked = probs[..., self.scored[nz[:, 0]], nz[:, 1]]  # (..., H, nnz)
            mass = (picked * weight).sum(-1).reshape(-1, probs.shape[-3])  # (N, H)
            return mass.mean(0) / pattern.shape[0]
        b, p, q = nz.T
        picked = probs[b, :, self.scored[p], q]  # (nnz, H)
        rows = (pattern.sum(-1) > 0).sum()  # rows with parents
        return (picked * weight[:, None]).sum(0) / rows.clamp_min(1)

    def learned_patterns(self) -> list[dict[str, Any]]:
        """Per attention layer, the head with the most mass on the parents at the last
        evaluation: its mean attention map (L, L) over the recorded sequences, rounded."""
        out = []
        for layer, probs in enumerate(self.recorded):  # probs (R, H, L, L)
            mass = self.last_head_mass[layer]  # (H,)
            head = int(mass.argmax())
            out.append({"layer": layer, "head": head, "parent_mass": round(float(mass[head]), 4),
                        "map": probs[:, head].mean(0).round(decimals=3).tolist()})
        return out

    def configure_optimizers(self):
        c = self.train_config
        opt = torch.optim.AdamW(self.parameters(), lr=c.lr, weight_decay=c.weight_decay)
        warmup = max(c.warmup_steps, 1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / warmup))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
