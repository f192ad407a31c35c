"""Warm-ups (pre-pretraining): train the backbone on another task, then start the target run
from the weights the transfer set names.

The target model is built first, at the run seed, so every weight the warm-up does not transfer
starts exactly as in the same run from scratch: a warm-up and no warm-up differ only in the
transferred weights. The warm-up model has its own seed (derived from the run seed), trains
`pretrain.steps` steps of its task's stream with AdamW at `pretrain.lr` (no evaluation, no
checkpoints), is evaluated once on its own held-out set, and hands over its weights; the target
run then trains with a fresh optimizer, its steps counted from 0.

The record (`pretrain.json` in the run directory, and `result["pretrain"]`) says what it cost
(steps, tokens, wall time) and what transferred. A resumed target run reads it back instead of
warming up again: its checkpoint already holds the transferred weights.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn

from architectures import Backbone
from datamodules.base import derive_seed

from ..core.errors import ConfigError
from .callback import progress_bars
from .config import PretrainConfig, RunConfig, task_instance
from .lightning_module import EmergenceModule

PRETRAIN_STREAM = 5  # the warm-up model's initialisation seed stream
NOT_BODY = ("embed.", "pos", "head.")  # what depends on the vocabulary or the length


def transferred(names: list[str], rule: str) -> list[str]:
    """The parameter names a transfer set takes: all, body (all but embeddings and head), or
    those a regular expression matches from their start."""
    if rule == "all":
        return list(names)
    if rule == "body":
        return [n for n in names if not n.startswith(NOT_BODY)]
    return [n for n in names if re.match(rule, n)]


def check_transfer(cfg: RunConfig, source: nn.Module, target: nn.Module) -> list[str]:
    """The names that transfer from `source` to `target`; a ConfigError (one line, naming the
    field) when the set is empty or a parameter's shape differs between the two models."""
    pre: PretrainConfig = cfg.pretrain
    theirs = dict(source.named_parameters())
    ours = dict(target.named_parameters())
    names = transferred(list(ours), pre.transfer)
    if not names:
        raise ConfigError(f"pretrain.transfer: '{pre.transfer}' names no parameter of "
                          f"{cfg.arch.name} (its names start: "
                          f"{', '.join(sorted({n.split('.')[0] for n in ours}))})")
    for name in names:
        if name not in theirs or theirs[name].shape != ours[name].shape:
            shape = tuple(theirs[name].shape) if name in theirs else "absent"
            raise ConfigError(
                f"pretrain.transfer: {name} is {shape} in the warm-up model ({pre.task.name}, "
                f"vocab {pre.task.vocab}, length {pre.task.seq_len}) and "
                f"{tuple(ours[name].shape)} in the target's ({cfg.task.name}, vocab "
                f"{cfg.task.vocab}, length {cfg.task.seq_len}): it cannot be mapped; transfer "
                "fewer parameters (body, or a regular expression) or match the tasks")
    return names


def pretrain_task(cfg: RunConfig) -> Any:
    """The warm-up's task instance (its held-out part drawn), or a one-line ConfigError."""
    return task_instance(cfg.pretrain.task, cfg, "pretrain.task.")


def check_pretrain(cfg: RunConfig, instance: bool = True) -> None:
    """Before anything is written: the warm-up task builds (unless `instance` is False: a
    sweep checks each warm-up instance once, whatever the architecture), and the transfer set
    names parameters of matching shapes (checked on models built on the meta device: no
    memory)."""
    if cfg.pretrain is None:
        return
    pre = cfg.pretrain
    if instance:
        pretrain_task(cfg)
    with torch.device("meta"):
        source = Backbone(cfg.arch, pre.task.vocab, pre.task.seq_len,
                          torch.zeros(pre.task.seq_len, pre.task.seq_len))
        target = Backbone(cfg.arch, cfg.task.vocab, cfg.task.seq_len,
                          torch.zeros(cfg.task.seq_len, cfg.task.seq_len))
    check_transfer(cfg, source, target)


def warm_up(cfg: RunConfig, module: EmergenceModule, run_dir: Path,
            trainer_options: dict[str, Any]) -> dict[str, Any]:
    """Train the warm-up, copy the transfer set into `module.model`, write pretrain.json and
    return the record."""
    pre = cfg.pretrain
    train = dataclasses.replace(cfg.train, lr=pre.lr, max_steps=pre.steps, eval_every=pre.steps)
    task = pretrain_task(cfg)
    L.seed_everything(derive_seed(cfg.seed, PRETRAIN_STREAM) % 2**32, verbose=False)
    warm = EmergenceModule(cfg.arch, train, task, cfg.runtime.compile)
    names = check_transfer(cfg, warm.model, module.model)
    # one device: under a multi-device launcher every rank warms up alike (same seed, same data)
    options = {**trainer_options, "enable_checkpointing": False, "num_sanity_val_steps": 0,
               "log_every_n_steps": pre.steps, "devices": 1, "num_nodes": 1,
               "strategy": "auto"}
    trainer = L.Trainer(max_steps=pre.steps, limit_val_batches=0, logger=False,
                        gradient_clip_val=train.grad_clip or None,
                        callbacks=progress_bars(options["enable_progress_bar"]), **options)
    start = time.perf_counter()
    trainer.fit(warm, datamodule=task)
    wall = time.perf_counter() - start
    loss = trainer.callback_metrics.get("train/loss")
    evaluation = L.Trainer(logger=False, **{**options, "enable_progress_bar": False}).validate(
        warm, datamodule=task, verbose=False)[0]
    state = dict(warm.model.named_parameters())
    with torch.no_grad():
        for name, param in module.model.named_parameters():
            if name in names:
                param.copy_(state[name].to(param.device))
    record = {
        "task": pre.task.name,
        "steps": pre.steps,
        "tokens": pre.steps * train.batch_size * task.n_tokens,
        "wall_time_s": wall,
        "final_loss": float(loss) if loss is not None else None,
        "heldout_token_acc": evaluation.get("val/token_acc"),
        "ceiling_token_acc": task.references()["ceiling"]["token_acc"],
        "transfer": pre.transfer,
        "transferred": names,
        "transferred_params": sum(state[n].numel() for n in names),
        "fresh_params": sum(p.numel() for n, p in module.model.named_parameters()
                            if n not in names),
    }
    (run_dir / "pretrain.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def read_record(run_dir: Path) -> dict[str, Any] | None:
    """A resumed run's warm-up record (None when the warm-up never finished)."""
    path = run_dir / "pretrain.json"
    return json.loads(path.read_text()) if path.is_file() else None
