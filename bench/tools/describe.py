"""`bench describe`: what a config builds, without training: parameters (embeddings, each layer's
mixer, MLP and norms, the head), the state a layer keeps per sequence, the kernel path one
forward pass takes on this machine, the memory estimate a run checks before allocating, and the
mixer contract a run checks first (causality proven by gradients, no state between calls, ...)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from architectures import Backbone
from architectures.plugins import one_line

from ..analysis.labels import row_labels
from ..core import markdown
from ..core.errors import ConfigError
from ..training.config import RunConfig, build_run_task, check_contract
from ..training.memory import check_memory, run_device
from ..training.run import kernel_path


def count(module: torch.nn.Module | None) -> int:
    return sum(p.numel() for p in module.parameters()) if module is not None else 0


def describe_model(cfg: RunConfig) -> dict[str, Any]:
    """Sizes and paths of the model `cfg` trains, as one JSON-able dict."""
    estimate = check_memory(cfg)  # a config too large for this machine stops here, in one line
    task = build_run_task(cfg)
    L, device = task.seq_len, run_device(cfg)
    torch.manual_seed(cfg.seed)
    model = Backbone(cfg.arch, task.vocab_size, L, task.attention_target().float()).to(device)
    try:
        with torch.no_grad():  # one sequence, so each mixer reports the path it takes here
            model(torch.zeros(1, L, dtype=torch.long, device=device))
    except Exception as e:  # a plug-in's forward is user code: one line
        raise ConfigError(f"arch.name: mixer '{cfg.arch.name}' failed in forward: "
                          f"{one_line(e)}") from None
    start = time.perf_counter()
    check_contract(cfg, [L])  # what a run checks before it trains: one line here too
    layers = [{"mixer": count(b.mixer), "mlp": count(b.mlp), "norm": count(b.norm)}
              for b in model.blocks]
    task_label, arch_label = row_labels(cfg.to_dict())
    return {
        "task": task_label, "arch": arch_label, "seq_len": L, "vocab": task.vocab_size,
        "parameters": count(model),
        "embedding": count(model.embed) + (model.pos.numel() if model.pos is not None else 0),
        "layers": layers, "head": count(model.norm) + count(model.head),
        "state_per_layer": cfg.arch.memory_per_layer(L),
        "kernel_path": kernel_path(model), "device": device,
        "memory_estimate_bytes": dict(estimate),
        "contract": "passed",
        "contract_s": round(time.perf_counter() - start, 2),
    }


def to_text(d: dict[str, Any]) -> str:
    layer_rows = [[str(i), f"{x['mixer']:,}", f"{x['mlp']:,}", f"{x['norm']:,}"]
                  for i, x in enumerate(d["layers"])]
    state = d["state_per_layer"]
    memory = sum(d["memory_estimate_bytes"].values())
    return "\n".join([
        f"{d['arch']} on {d['task']}: L = {d['seq_len']} tokens, vocabulary {d['vocab']}",
        f"parameters: {d['parameters']:,} (embeddings {d['embedding']:,}, final norm and head "
        f"{d['head']:,})",
        "",
        *markdown.table(["layer", "mixer", "MLP", "norm"], layer_rows),
        "",
        "state per layer: " + (f"{state:,} numbers per sequence after {d['seq_len']} tokens"
                               if state is not None else "unknown (a plug-in may not say)"),
        f"kernel path on {d['device']}: {d['kernel_path']}",
        f"mixer contract: passed in {d['contract_s']:.1f} s (shape, finite values and "
        "gradients, causal by gradients and by intervention at every cut in train and eval "
        "mode, with and without autograd, at the run's batch size and two lengths; repeatable "
        "calls, no mixing across a batch, declared protocols)",
        f"memory a run needs (estimate): {memory / 2**20:,.1f} MiB ("
        + ", ".join(f"{k} {v / 2**20:,.1f}" for k, v in d["memory_estimate_bytes"].items())
        + ")",
    ])


SIZE_FIELD = "d_model"  # the field searched for a matched size
SIZE_CANDIDATES = range(8, 1025, 8)


def sizes_against(cfg: RunConfig, spec_path: Path) -> dict[str, Any]:
    """The committed board's baselines' parameters on its first task (as their runs recorded
    them), this config's on the same task, and the `d_model` that brings it closest to the
    baselines' median (parameters counted on the meta device: nothing allocated)."""
    import dataclasses
    import statistics

    from ..core.rows import by_row
    from ..sweeps.results import read_results
    from ..sweeps.spec import load_spec
    from ..training.config import load_run_config
    from ..training.memory import parameter_count

    spec = load_spec(spec_path)
    _, results = read_results(spec_path.with_suffix(""))
    task = spec.tasks[0]
    grid = {k for k, v in task.items() if isinstance(v, list)}
    if grid:
        raise ConfigError(f"--against: {spec_path}'s first task is a grid over "
                          f"{', '.join(sorted(grid))}; size against one cell with `bench compare`")
    on_task = load_run_config({**cfg.to_dict(), "task": task})
    baselines = {}
    for runs in by_row(results).values():
        config = runs[0].config
        if all(config["task"].get(k) == v for k, v in task.items()):
            baselines[f"{config['arch']['name']}"] = runs[0].n_params
    if not baselines:
        raise ConfigError(f"--against: {spec_path} has no finished run on {task}")
    median = statistics.median(baselines.values())
    mine = parameter_count(on_task)[0]

    def params_at(width: int) -> int | None:
        try:
            arch = dataclasses.replace(on_task.arch, **{SIZE_FIELD: width})
            return parameter_count(dataclasses.replace(on_task, arch=arch))[0]
        except (ValueError, ConfigError):  # a width this config refuses (e.g. not divisible)
            return None

    counted = [(w, n) for w in SIZE_CANDIDATES if (n := params_at(w)) is not None]
    best = min(counted, key=lambda wn: abs(wn[1] / median - 1), default=None)
    return {"spec": str(spec_path), "baselines": baselines, "median": median, "params": mine,
            "suggest": None if best is None else {SIZE_FIELD: best[0], "params": best[1]}}


def sizes_text(d: dict[str, Any]) -> str:
    lines = [f"against {d['spec']} (its first task): baselines "
             + ", ".join(f"{k} {v:,}" for k, v in d["baselines"].items())
             + f" (median {d['median']:,.0f}); this config {d['params']:,} "
             f"({d['params'] / d['median'] - 1:+.0%})"]
    if d["suggest"]:
        n = d["suggest"]["params"]
        within = "within" if abs(n / d["median"] - 1) <= 0.2 else "not within"
        lines.append(f"closest to the median: arch.{SIZE_FIELD}={d['suggest'][SIZE_FIELD]} gives "
                     f"{n:,} ({n / d['median'] - 1:+.0%}, {within} 20%)")
    return "\n".join(lines)
