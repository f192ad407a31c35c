"""The mixing-pattern maps of every mixer, measured during training by a Callback the run
attaches: at every `influence_every`-th evaluation, the gradient (influence) and intervention
maps (bench.measures.influence) on the first `measure.influence_size` held-out sequences and the
sampled rows, with their alignment with the ground truth (`val/{map}_mass`, `val/{map}_auroc`);
the run's record keeps the maps at the first, bracketing and last evaluations."""

from __future__ import annotations

import math
import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from datamodules.base import SequenceTask

from ..core.emergence import EmergenceTracker
from ..core.record import MixingMaps
from ..training.config import RunConfig
from .influence import (
    REPLACEMENTS,
    alignment,
    cadence,
    influence_map,
    intervention_map,
    replacement_plan,
    row_sample,
)

MAPS = ("influence", "intervention")  # the mixing patterns every run records, any mixer


class MixingMapCallback(Callback):
    """Measures the maps; a `RecordsFields` of the run (bench.training.run) that adds them to
    its record."""

    def __init__(self, cfg: RunConfig, task: SequenceTask):
        measure, train = cfg.measure, cfg.train
        self.measure, self.eval_every, self.task = measure, train.eval_every, task
        scored = task.scored_positions()  # (P,)
        self.scored = scored
        self.maps: dict[str, dict[int, list[list[float]]]] = {m: {} for m in MAPS}  # step -> (R, L)
        self.rows = row_sample(len(scored), measure.influence_rows)  # indices into scored
        # the intervention map replaces every position the measured rows can read
        self.replaceable = task.replacement_values()  # (L, V)
        upto = int(scored[self.rows].max()) + 1 if len(scored) else 0
        replaced = 0 if not measure.influence_size else int(
            (self.replaceable[:upto].sum(-1) - 1).clamp(0, REPLACEMENTS).sum())
        self.replacements: tuple[torch.Tensor, torch.Tensor] | None = None  # at first use
        self.every = cadence(measure.influence_size, len(self.rows), train.eval_every,
                             train.batch_size, measure.influence_every, replaced)
        self.seconds = 0.0  # spent measuring (bench perf reads it)
        self.paused = False  # skip the maps (bench perf times them at one evaluation only)

    def on_validation_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        n = self.measure.influence_size
        if not n or self.paused:
            return
        if (module.global_step // self.eval_every) % self.every:
            # not measured here (NaN in the curves, not the last value Lightning still holds)
            module.log_dict({f"val/{m}_{k}": math.nan for m in MAPS for k in ("mass", "auroc")},
                            batch_size=1)
            return
        start = time.perf_counter()
        device = module.device
        scored, rows = self.scored.to(device), self.rows.to(device)
        es = self.task.eval_set(device)
        held = (~es.probe).nonzero().squeeze(1)[:n]
        per_sequence = self.task.PER_SEQUENCE_PATTERN
        model = module.model
        with torch.inference_mode(False), torch.enable_grad():
            tokens = es.tokens[held].clone()  # a normal tensor: evaluation runs in inference mode
            batch = self.task.split(tokens)
            found = {"influence": influence_map(model, model.embed, batch.inputs, batch.targets,
                                                scored[rows], per_sequence=per_sequence)}
        if self.replacements is None:  # fixed for the run: maps differ only by the model
            self.replacements = replacement_plan(batch.inputs, self.replaceable,
                                                 int(scored[rows].max()) + 1,
                                                 seed=self.task.instance_seed)
        found["intervention"] = intervention_map(model, batch.inputs, scored[rows],
                                                 *self.replacements, per_sequence=per_sequence)
        # a fixed pattern is compared with the mean map, a per-sequence one map by map
        truth = self.task.patterns(tokens) if per_sequence else module.pattern  # (P, L)
        candidates = self.task.candidates(truth).index_select(-2, rows)
        for name, m in found.items():
            mass, auroc = alignment(m, truth.index_select(-2, rows), scored[rows], candidates)
            if per_sequence:
                m = m.mean(0)
            self.maps[name][module.global_step] = m.round(decimals=3).tolist()
            module.log_dict({f"val/{name}_mass": mass, f"val/{name}_auroc": auroc},
                            batch_size=len(held))
        self.seconds += time.perf_counter() - start

    # a resumed run keeps the earlier maps (in the checkpoint's top level, as before the maps
    # were a callback's, so older resume checkpoints still load them)
    def on_save_checkpoint(self, trainer: L.Trainer, module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        for name in MAPS:
            checkpoint[f"{name}_maps"] = self.maps[name]

    def on_load_checkpoint(self, trainer: L.Trainer, module: L.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        for name in MAPS:
            self.maps[name] = dict(checkpoint.get(f"{name}_maps", {}))

    def record_fields(self, tracker: EmergenceTracker) -> dict[str, Any]:
        """The maps the run's record keeps: the first, the two bracketing emergence (the last
        before it and the first at or after it), and the last."""
        rows = self.scored[self.rows].tolist()
        return {name: kept(self.maps[name], tracker, rows) for name in MAPS}


def kept(maps: dict[int, list[list[float]]], tracker: EmergenceTracker,
         rows: list[int]) -> MixingMaps | None:
    """`maps` (measured rows x input positions, by step) as the record keeps them; `rows` are
    the input positions the maps' rows score."""
    if not maps:
        return None
    steps = sorted(maps)
    keep = {steps[0], steps[-1]}
    if tracker.status == "emerged":
        keep |= {max((s for s in steps if s < tracker.step), default=steps[0]),
                 min((s for s in steps if s >= tracker.step), default=steps[-1])}
    return MixingMaps(sorted(keep), [maps[s] for s in sorted(keep)], rows)
