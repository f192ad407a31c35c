"""`bench perf`: the suite's Lightning training step against a bare PyTorch loop, per mixer.

For every mixer and size, one process builds the model once and alternates, `repeats` times, a
timed stretch of Lightning training (the runner's own Trainer, logger and callbacks) with the same
number of steps of a bare loop over the same module, data generator, optimizer, scheduler and
clip. Warm-up steps are excluded. From the same stretches it reports:

- steps/s and tokens/s of both paths (median step time of each stretch, robust to the hiccups
  of a shared machine) and their ratio per repeat (median and range);
- the share of the bare step spent drawing the batch;
- the share of wall time evaluation takes at the default cadence (one evaluation / (it +
  eval_every steps)): the screened evaluation a run makes at almost every cadence point
  (`runtime.screen_size` sequences, analysis included), and a whole one (made only at step 0, at
  the end and where the outcome could turn on it);
- the share of the analysis within it: the mixing-pattern maps (gradient and intervention)
  and the attention statistics' own arithmetic (recording the attention inside the forward pass
  counts as evaluation); the maps are timed once per size, at the first stretch's screened
  evaluation (their cost does not change between repeats, and at 1,024 tokens one map of the
  slower mixers takes minutes), and counted 1/k in every repeat, as they come every k-th
  evaluation at the default cadence (measure.influence_every);
- peak memory: CUDA's peak allocation, or on CPU the process's peak resident set (sizes run in
  ascending order in one process per mixer, so it includes the torch runtime);
- per mixer, the exponent of step time against sequence length (a log-log fit over the lengths);
- with `--seeds-per-hour`, the figure a sweep is planned by (bench.tools.seeds_per_hour).
"""

from __future__ import annotations

import platform
import shlex
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf
from tqdm.auto import tqdm

from ..core import markdown
from ..core.errors import ConfigError
from ..training.bare_loop import BareLoop
from ..training.config import load_run_config
from ..training.sections import parse_overrides
from .seeds_per_hour import JOB_STEPS, job_seeds_per_hour, seeds_markdown, seeds_per_hour

# the mixers of leaderboards/mixers.yaml (~100K parameters each)
DEFAULT_ARCHS = ["arch.name=transformer arch.n_heads=4 arch.head_dim=16",
                 "arch.name=mlp_mixer arch.n_heads=8", "arch.name=mamba arch.expand=1",
                 "arch.name=gated_deltanet arch.n_heads=2 arch.head_dim=32",
                 "arch.name=rwkv arch.head_dim=16 arch.low_rank_dim=8"]
QUICKSTART = {"name": "linear_map", "state_size": 12, "sparsity": 1, "n_states": 2}  # L = 23


@dataclass(frozen=True)
class Size:
    label: str
    task: dict[str, Any]
    batch_size: int


def sizes(labels: list[str], batch: int) -> list[Size]:
    """`quickstart` (the quickstart task, batch 64) or a sequence length in tokens (a linear map
    of 16-token states, `batch` sequences; half of its training draws avoid the held-out part)."""
    out = []
    for label in labels:
        if label == "quickstart":
            out.append(Size(label, QUICKSTART, 64))
            continue
        if not label.isdigit() or int(label) < 32 or int(label) % 16:
            raise ConfigError(f"--sizes: '{label}' is not quickstart or a length in tokens "
                              "(a multiple of 16, >= 32)")
        T = int(label) // 16
        # a long sequence avoids held-out sources only if few states are held out
        task = {"name": "linear_map", "state_size": 16, "sparsity": 2, "n_states": T,
                "held_out": round(min(0.2, 1 - 0.5 ** (1 / (T - 1))), 4)}
        out.append(Size(label, task, batch))
    return out


def parse_arch(text: str) -> list[str]:
    """One mixer in `bench run`'s syntax: `arch.name=NAME arch.FIELD=VALUE ... [plugins=[...]]`
    (a bare `NAME` alone means `arch.name=NAME`)."""
    items = shlex.split(text)
    if len(items) == 1 and "=" not in items[0]:
        items = [f"arch.name={items[0]}"]
    for item in items:
        key = item.partition("=")[0]
        if not (key.startswith("arch.") or key == "plugins") or "=" not in item:
            raise ConfigError(f"--arch: '{item}' is not arch.FIELD=VALUE or plugins=[...] (the "
                              "task and training are set by --sizes and --batch)")
    return items


def configs(archs: list[str], size_list: list[Size], compile_: bool) -> list[list[Any]]:
    """Validated run configs, one list (ascending sizes) per mixer; checked before anything runs."""
    return [[load_run_config(OmegaConf.merge(parse_overrides(parse_arch(a)), {
        "task": s.task, "train": {"batch_size": s.batch_size},
        "runtime": {"compile": compile_}}))
             for s in size_list] for a in archs]


# --- measuring, inside one process per mixer ---------------------------------------------------
def measure_mixer(cfgs: list[Any], labels: list[str], repeats: int, target_s: float,
                  warmup: int, accelerator: str) -> list[dict[str, Any]]:
    import torch

    from ..training.run import quiet_lightning

    quiet_lightning()
    rows = []
    for cfg, label in zip(cfgs, labels):
        if accelerator == "gpu":
            torch.cuda.reset_peak_memory_stats()
        rows.append({"size": label, **_measure(cfg, repeats, target_s, warmup, accelerator)})
    return rows


def _measure(cfg, repeats: int, target_s: float, warmup: int, accelerator: str) -> dict:
    import resource

    import torch

    from ..measures.maps import MixingMapCallback
    from ..training.config import task_instance
    from ..training.lightning_module import EmergenceModule
    from ..training.run import kernel_path

    device = torch.device("cuda" if accelerator == "gpu" else "cpu")
    cfg = replace(cfg, seed=0)
    task = task_instance(cfg.task, cfg)
    torch.manual_seed(0)
    module = EmergenceModule(cfg.arch, cfg.train, task, cfg.runtime.compile).to(device)
    maps = MixingMapCallback(cfg, task)
    bare = BareLoop(module, task, device)
    first = sum(bare.run(warmup)[0])  # warm-up (and compilation, if any), excluded
    steps = int(min(max(target_s / statistics.median(bare.run(3)[0]), 5), 500))
    lightning, plain, gen, evals, wholes, analyses, leaks = [], [], [], [], [], [], []
    map_s = None  # the maps' seconds, timed in the first stretch only (module docstring)
    for _ in range(repeats):  # the two paths alternate; each stretch is summarised by the
        step_s, eval_s, whole_s, analysis_s, leak_s, map_s = lightning_stretch(
            cfg, module, maps, task, warmup, steps, accelerator, map_s)
        lightning.append(step_s)  # median step time, robust to this machine's hiccups
        evals.append(eval_s)
        wholes.append(whole_s)
        analyses.append(analysis_s)
        leaks.append(leak_s / whole_s)
        durations, gen_s = bare.run(steps)
        plain.append(statistics.median(durations))
        gen.append(gen_s / sum(durations))
    ratio = [a / b for a, b in zip(lightning, plain)]
    tokens = cfg.train.batch_size * task.n_tokens
    step_l, step_b = statistics.median(lightning), statistics.median(plain)
    def share(seconds: list[float]) -> float:
        return statistics.median(e / (e + cfg.train.eval_every * s)
                                 for e, s in zip(seconds, lightning))

    if accelerator == "gpu":
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "arch": cfg.arch.name, "kernel_path": kernel_path(module), "seq_tokens": task.n_tokens,
        "batch_size": cfg.train.batch_size, "params": sum(p.numel() for p in module.parameters()),
        "compile": cfg.runtime.compile, "first_steps_s": first, "timed_steps": steps,
        "lightning_steps_per_s": 1 / step_l, "bare_steps_per_s": 1 / step_b,
        "lightning_tokens_per_s": tokens / step_l, "bare_tokens_per_s": tokens / step_b,
        "lightning_step_ms": 1000 * step_l, "bare_step_ms": 1000 * step_b,
        "overhead": statistics.median(ratio), "overhead_min": min(ratio),
        "overhead_max": max(ratio), "batch_share": statistics.median(gen),
        "eval_share": share(evals), "whole_eval_share": share(wholes),
        "analysis_share": share(analyses), "leak_of_whole": statistics.median(leaks),
        "eval_every": cfg.train.eval_every,
        "screen_size": cfg.runtime.screen_size, "screen_rows": task.screen_rows,
        "influence_every": maps.every,
        "peak_mib": peak,
    }


def lightning_stretch(cfg, module, maps, task, warmup: int, steps: int, accelerator: str,
                      map_s: float | None = None):
    """Train warmup + steps through the runner's Trainer with two evaluations inside: at a third
    a screened one, as a run makes at almost every cadence point, and at two thirds a whole one;
    return (median seconds per timed step, seconds of the screened evaluation, of the whole one,
    of the analysis within the screened one, of the leak check within the whole one, and of one
    measurement of the maps). With `map_s` (seconds a previous stretch measured) the maps are
    not measured again: that figure stands in for them."""
    import dataclasses

    from ..training.run import build_trainer, emergence_callback

    every = max((warmup + steps) // 3, 1)  # evaluations at a third and two thirds
    every_k = maps.every  # the default cadence's (eval_every 50)
    maps.every = 1  # measured at the stretch's screened evaluation, counted 1/k
    timer = _stretch_timer(maps, warmup, steps, accelerator, every_k, map_s)
    run_cfg = dataclasses.replace(
        cfg, train=dataclasses.replace(cfg.train, max_steps=10 * (warmup + steps),
                                       eval_every=every),
        runtime=dataclasses.replace(cfg.runtime, accelerator=accelerator),
        trainer={"log_every_n_steps": cfg.train.eval_every})
    emergence = emergence_callback(cfg, task)
    emergence.tracker.criterion = dataclasses.replace(cfg.emergence, stop_early=False)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trainer(run_cfg, Path(tmp), [maps, emergence, timer], progress=False)
        trainer.fit(module, datamodule=task)
    maps.every, maps.paused = every_k, False
    (screened, analysis, _), (whole, _, leak) = timer.evals[0], timer.evals[1]
    # step time: the median gap between step ends (the gaps holding evaluations are outliers)
    return statistics.median(np.diff(timer.ends)), screened, whole, analysis, leak, timer.map_s


def _stretch_timer(maps, warmup: int, steps: int, accelerator: str, every_k: int,
                   map_s: float | None):
    """The Callback that times `lightning_stretch`: step ends after the warm-up, and per
    evaluation its seconds, its analysis seconds and its leak-check seconds, the maps counted
    1/every_k (they come every k-th evaluation); it stops training after warmup + steps. Built
    here so that Lightning is imported only when perf runs."""
    from lightning.pytorch.callbacks import Callback

    class Timer(Callback):
        def __init__(self):
            self.ends: list[float] = []
            self.v0, self.a0 = 0.0, 0.0
            self.map_s = 0.0  # the maps' seconds at the screened evaluation
            # (seconds, analysis seconds, leak-check seconds: made at a whole evaluation only)
            self.evals: list[tuple[float, float, float]] = []

        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step >= warmup:
                if accelerator == "gpu":
                    import torch

                    torch.cuda.synchronize()
                self.ends.append(time.perf_counter())
            if trainer.global_step >= warmup + steps:
                trainer.should_stop = True  # the budget is set past the stretch: no evaluation
                # in it is the run's last (always whole)

        def on_validation_start(self, trainer, pl_module):
            # the maps are measured once, at the screened evaluation (the step-0 and the whole
            # one would measure them again at the same cost, for no number the report uses)
            measured = not trainer.sanity_checking and not self.evals and map_s is None
            maps.paused = not measured
            # analysis: the module's attention statistics and the maps callback's maps
            self.v0, self.a0 = time.perf_counter(), pl_module.analysis_s + maps.seconds
            self.i0, self.l0 = maps.seconds, pl_module.leak_s

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *args):
            screen = trainer.datamodule.screen_chunks(trainer.world_size)
            if batch_idx == screen - 1 and not trainer.sanity_checking:
                # the first evaluation stops at its screen, the second is whole
                pl_module.skip_from = screen if not self.evals else None

        def on_validation_end(self, trainer, pl_module):
            if not trainer.sanity_checking:  # the step-0 evaluation is not part of the cadence
                # the maps count 1/k at either evaluation: they come every k-th time
                if not self.evals:
                    self.map_s = maps.seconds - self.i0 if map_s is None else map_s
                share = self.map_s / every_k - (maps.seconds - self.i0)
                self.evals.append((time.perf_counter() - self.v0 + share,
                                   pl_module.analysis_s + maps.seconds - self.a0 + share,
                                   pl_module.leak_s - self.l0))

    return Timer()


# --- the report -------------------------------------------------------------------------------
def length_points(rows: list[dict[str, Any]], arch: str) -> list[tuple[int, float]]:
    """(tokens per sequence, Lightning step ms) of one mixer at the length sizes, uncompiled."""
    return sorted((r["seq_tokens"], r["lightning_step_ms"]) for r in rows
                  if r["arch"] == arch and r["size"] != "quickstart" and not r["compile"])


def exponents(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per mixer, d log(step time) / d log(length) over the length sizes (not quickstart)."""
    out = {}
    for arch in dict.fromkeys(r["arch"] for r in rows):
        pts = length_points(rows, arch)
        if len(pts) >= 2:
            x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
            out[arch] = float(np.polyfit(x, y, 1)[0])
    return out


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"  # a report made before it was measured


def to_markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [f"# bench perf ({report['date']}, {m['device']}, torch {m['torch']}, "
             f"{report['repeats']} repeats)", ""]
    eval_every = report["rows"][0]["eval_every"] if report["rows"] else 50
    lines += markdown.table(
        ["mixer", "size", "L", "path", "compile", "Lightning steps/s", "bare steps/s",
         "Lightning/bare step time [range]", "tokens/s", "batch gen", f"eval @{eval_every}",
         "screen rows", "analysis", "map every", "whole eval", "leak check", "seeds/h (est.)",
         "peak MiB"],
        [[r["arch"], r["size"], r["seq_tokens"] - 1, r["kernel_path"],
          "yes" if r["compile"] else "no", f"{r['lightning_steps_per_s']:.1f}",
          f"{r['bare_steps_per_s']:.1f}", f"{r['overhead']:.3f} [{r['overhead_min']:.3f}, "
          f"{r['overhead_max']:.3f}]", f"{r['lightning_tokens_per_s']:,.0f}",
          f"{r['batch_share']:.1%}", f"{r['eval_share']:.1%}",
          r.get("screen_rows", "-"), f"{r['analysis_share']:.1%}", r.get("influence_every", 1),
          f"{r['whole_eval_share']:.1%}", _share(r.get("leak_of_whole")),
          f"{job_seeds_per_hour(r):,.0f}",
          f"{r['peak_mib']:,.0f}"]
         for r in report["rows"]])
    lines += ["", f"eval @{eval_every}: the screened evaluation a run makes at almost every "
              "cadence point (`runtime.screen_size` held-out sequences and half as many training "
              "ones, at most 8,192 tokens' worth or an eighth of the sequences trained between "
              "two evaluations: 'screen rows'), analysis included, as a share "
              "of wall time; analysis: its gradient and intervention maps "
              "(counted 1/k, made every k-th evaluation: 'map every') and attention statistics; "
              "whole eval: the full set, made at step 0, at the end and where the outcome could "
              "turn on it; leak check: the scrambled-future recomputation every whole "
              "evaluation makes (`leak_check`), as a share of that evaluation's time; "
              f"seeds/h (est.): jobs of {JOB_STEPS:,} steps per hour in one process "
              "at this step time and evaluation share (the measured figure per executor setting "
              "is below, with --seeds-per-hour)."]
    if report["exponents"]:
        lines += ["", "Step time grows as L^k over the lengths measured: " + ", ".join(
            f"{a} k={k:.2f}" for a, k in report["exponents"].items()) + "."]
    if report.get("seeds"):
        lines += seeds_markdown(report["seeds"], report.get("accelerator", "cpu"))
    lines += ["", "![step time vs length](perf.png)", ""]
    return "\n".join(lines)


def plot(path: Path, report: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for arch, k in report["exponents"].items():
        ax.plot(*zip(*length_points(report["rows"], arch)), marker="o", label=f"{arch} (k={k:.2f})")
    ax.set(xscale="log", yscale="log", xlabel="tokens per sequence",
           ylabel="training step (ms)", title="step time vs sequence length")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_perf(archs: list[str], size_labels: list[str], repeats: int, batch: int, target_s: float,
             warmup: int, compile_: bool, accelerator: str, out: Path,
             seed_steps: int = 0) -> dict[str, Any]:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    import torch

    from ..training.run import versions, write_json_atomic

    if repeats < 1:
        raise ConfigError(f"--repeats: must be >= 1, got {repeats}")
    if not (isinstance(target_s, int | float) and 0 < target_s <= 3600):  # NaN fails too
        raise ConfigError(f"--seconds: must be a number of seconds in (0, 3600], got {target_s}")
    if accelerator not in ("cpu", "gpu"):
        raise ConfigError(f"--accelerator: must be cpu or gpu, got '{accelerator}'")
    if accelerator == "gpu" and not torch.cuda.is_available():
        raise ConfigError("--accelerator: gpu, but CUDA is not available here")
    if 0 < seed_steps < 50:
        raise ConfigError(f"--seeds-per-hour: steps per worker must be 0 (off) or at least 50 "
                          f"(one evaluation at the default cadence), got {seed_steps}")
    size_list = sizes(size_labels, batch)
    plans = configs(archs, size_list, False)
    if compile_:  # compiled variants at the first size only: compilation costs minutes on CPU
        plans += [[row[0]] for row in configs(archs, size_list[:1], True)]
    rows = []
    ctx = mp.get_context("spawn")  # a fresh process per mixer: clean peak memory, no cross-talk
    for plan in tqdm(plans, desc="bench perf", unit="mixer"):
        labels = [s.label for s in size_list][: len(plan)]
        with ProcessPoolExecutor(1, mp_context=ctx) as pool:
            rows += pool.submit(measure_mixer, plan, labels, repeats, target_s, warmup,
                                accelerator).result()
    device = (torch.cuda.get_device_name() if accelerator == "gpu"
              else f"CPU ({platform.processor() or platform.machine()}, "
                   f"{torch.get_num_threads()} threads)")
    seeds = (seeds_per_hour([plan[0] for plan in configs(archs, sizes(["quickstart"], batch),
                                                         False)], seed_steps, accelerator)
             if seed_steps else [])
    report = {"date": time.strftime("%Y-%m-%d"), "repeats": repeats,
              "machine": {"device": device, "torch": torch.__version__},
              "accelerator": accelerator, "versions": versions(), "rows": rows,
              "exponents": exponents(rows), "seeds": seeds}
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "perf.json", report)
    (out / "perf.md").write_text(to_markdown(report))
    plot(out / "perf.png", report)
    return report
