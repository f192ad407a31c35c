"""The Python API: what the commands offer a script or a notebook. `bench run`, `sweep`,
`compare`, `reproduce`, `leaderboard`, `status`, `patch`, `circuits`, `site` and `describe`
call these functions (the CLI parses and prints; these do), so both behave the same; the
results database reads as a DataFrame through `load_results`. Three commands are not here:
`bench ls` and `bench task` print the registries and a task's samples (their Python
equivalents are `architectures.ARCHITECTURES`, `datamodules.TASKS` and `build_task`), and `bench
perf` is a measurement tool (`bench.tools.perf`).

    from bench.api import describe, compare, train, sweep, load_results
    describe(["arch.name=pkg.mod:MyMixer"])                       # sizes, contract checked
    compare("leaderboards/quickstart.yaml", ["arch.name=pkg.mod:MyMixer"])  # one more row
    result = train(["arch.name=mamba", "task.state_size=12"])     # result.json as a dict
    sweep("leaderboards/quickstart.yaml", out="runs/quickstart", executor="processes")
    df = load_results("leaderboards/quickstart")                  # one row per finished run
    df[~df.tuning].groupby("arch")["steps_to_emergence"].median()

Bad input raises `bench.core.errors.ConfigError` with the one line the commands print.
Importing this module is cheap: torch, Lightning and pandas load when a function needs them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .core.errors import ConfigError
from .core.seeds import TUNE_SEED_START, seed_list

if TYPE_CHECKING:
    import pandas as pd

# what a run writes (patch/ and circuits/ with measure.patch and measure.circuits; the last three
# with runtime.logger)
RUN_FILES = {"result.json", "metrics.csv", "hparams.yaml", "checkpoints", "patch", "circuits",
             "tensorboard", "wandb", "mlflow.db"}


def train(config: dict[str, Any] | list[str] | None = None, out: str | Path | None = None,
          config_file: str | Path | None = None, progress: bool = False) -> dict[str, Any] | None:
    """Train one job; `config` is a nested dict or `key=value` items (over `config_file`).
    Writes `out/result.json` and `out/metrics.csv` (default `runs/<job id>`) and returns the
    result (None on ranks other than 0 of a multi-device run). Where `out` holds this job's
    resume checkpoint (a killed run), training continues from it."""
    from .sweeps.results import check_out_dir
    from .training.config import load_run_config

    cfg = load_run_config(config or [], config_file)  # a config error before Lightning loads
    from .measures.run import train as train_run

    run_dir = Path(out) if out is not None else Path("runs") / cfg.job_id()
    check_out_dir(run_dir)
    foreign = sorted(p.name for p in run_dir.iterdir() if p.name not in RUN_FILES) \
        if run_dir.is_dir() else []
    if foreign:
        raise ConfigError(f"--out: {run_dir} holds files a run did not write ({foreign[0]}, ...); "
                          "choose a new or empty directory")
    return train_run(cfg, run_dir, progress=progress)


def describe(config: dict[str, Any] | list[str] | None = None,
             config_file: str | Path | None = None) -> dict[str, Any]:
    """What `config` builds, without training (`bench describe`): parameters (embeddings, each
    layer's mixer, MLP and norms, head), state per layer, the kernel path on this machine, the
    memory estimate; the mixer contract a run checks first (causality, ...) must pass."""
    from .tools.describe import describe_model
    from .training.config import load_run_config

    return describe_model(load_run_config(config or [], config_file))


def compare(against: str | Path, arch: list[str], out: str | Path | None = None,
            executor: str = "local", workers: int | None = None,
            options: dict[str, Any] | None = None, progress: bool = False,
            estimate: bool = False, max_hours: float | None = None) -> dict[str, Any]:
    """A mixer (`arch.name=...`, `arch.FIELD=...`, `plugins=[...]` items) as one more row of
    the committed leaderboard `against` (`bench compare`): only its runs train, into `out`
    (default runs/compare/<spec name>-<hash>) beside a copy of the committed database. Returns
    {out, table (the path of compare.md, the merged table), notes (size warnings)}; with
    `estimate`, the cost plan only (printed; nothing written; table None)."""
    from .analysis.compare import compare as run_compare

    workers = default_workers(executor) if workers is None else workers
    done = run_compare(Path(against), list(arch), Path(out) if out else None, executor, workers,
                       options or {}, progress, estimate, max_hours)
    if done is None:
        return {"out": None, "table": None, "notes": []}
    out_dir, notes = done
    return {"out": out_dir, "table": out_dir / "compare.md", "notes": notes}


def suite(suite_file: str | Path = "leaderboards/suite.yaml", tier: str = "smoke",
          arch: list[str] | None = None, out: str | Path | None = None, executor: str = "local",
          workers: int | None = None, options: dict[str, Any] | None = None,
          progress: bool = False, estimate: bool = False,
          max_hours: float | None = None) -> dict[str, Any]:
    """A mixer (`arch.name=...`, `arch.FIELD=...`, `plugins=[...]` items; none: the suite's
    own rows) against every cell of the suite's `tier` (`bench suite`), one cost plan first.
    Returns {report: the path of smoke.md or scorecard.md, None with `estimate`}."""
    from .analysis.suite import run_suite

    workers = default_workers(executor) if workers is None else workers
    report = run_suite(Path(suite_file), tier, list(arch or []), Path(out) if out else None,
                       executor, workers, options or {}, progress, estimate, max_hours)
    return {"report": report}


def sweep(spec: str | Path, out: str | Path | None = None, executor: str = "local",
          workers: int | None = None, options: dict[str, Any] | None = None,
          overrides: list[str] | None = None, progress: bool = False,
          rows: list[str] | None = None,
          reuse: list[str | Path] | None = None,
          reuse_tuning: list[str | Path] | None = None,
          tune_only: bool = False, estimate: bool = False,
          max_hours: float | None = None) -> dict[str, Any]:
    """Run every unfinished job of a sweep spec (a rerun resumes) into `out` (default: next to
    the spec, without `.yaml`) and write its leaderboard; `rows` (config hashes or prefixes)
    keeps only those rows and their tuning runs; `reuse` (sweep directories): their finished
    runs of the same job ids are copied in instead of trained, and the table says so;
    `reuse_tuning`: the same for the tuning runs only (their rates stand, the reported runs train
    again: a rerun under a changed measurement); `tune_only`: the tuning runs only; `estimate`:
    print the cost plan only (nothing written; counts None); `max_hours`: refuse a plan whose
    worst case is above it. Returns {name, out, counts (jobs per status), leaderboard (the path
    of leaderboard.md, None before any reported job finished)}."""
    from .analysis.leaderboard import reported, write_leaderboard
    from .sweeps.results import read_results
    from .sweeps.spec import load_spec, row_filter
    from .sweeps.sweep import run_sweep

    spec = Path(spec)
    parsed = load_spec(spec, overrides or [])
    out = Path(out) if out is not None else spec.with_suffix("")
    workers = default_workers(executor) if workers is None else workers
    keep = row_filter(parsed, rows)  # before anything is written
    counts = run_sweep(parsed, out, executor, workers, options or {}, progress, keep=keep,
                       reuse=[Path(r) for r in reuse or []],
                       reuse_tuning=[Path(r) for r in reuse_tuning or []], tune_only=tune_only,
                       estimate=estimate, max_hours=max_hours)
    if counts is None:  # the plan only
        return {"name": parsed.name, "out": out, "counts": None, "leaderboard": None}
    spec_dict, results = read_results(out)
    shown = bool(reported(results, spec_dict))  # none while every reported job failed
    if shown:
        write_leaderboard(out, spec_dict["name"], results, spec_dict)
    return {"name": parsed.name, "out": out, "counts": counts,
            "leaderboard": out / "leaderboard.md" if shown else None}


def reproduce(spec: str | Path, out: str | Path | None = None, seeds: int | None = None,
              seed_start: int = 0, rows: list[str] | None = None, alpha: float = 0.05,
              executor: str = "local", workers: int | None = None,
              options: dict[str, Any] | None = None, progress: bool = False,
              overrides: list[str] | None = None) -> dict[str, Any]:
    """Rerun a committed leaderboard (`bench reproduce`) and test, row by row, whether the
    rerun agrees. Returns {out, table (the path of reproduce.md), rows (per row: its verdict
    and statistics), agrees (every row agrees)}."""
    from .analysis.reproduce import reproduce as run_reproduce

    workers = default_workers(executor) if workers is None else workers
    table, fresh = run_reproduce(Path(spec), Path(out) if out else None, seeds, seed_start,
                                 rows or [], alpha, executor, workers, options or {}, progress,
                                 overrides or [])
    return {"out": fresh, "table": fresh / "reproduce.md", "rows": table,
            "agrees": all(r["verdict"] == "agrees" for r in table)}


def leaderboard(directory: str | Path) -> Path:
    """Re-render a sweep directory's leaderboard.md, leaderboard.csv and figures from its
    results database (`bench leaderboard`); returns the path of leaderboard.md."""
    from .analysis.leaderboard import write_leaderboard
    from .sweeps.results import read_results

    directory = Path(directory)
    spec_dict, results = read_results(directory)
    if not results:
        raise ConfigError(f"{directory}: no finished runs in {directory}/results.sqlite")
    write_leaderboard(directory, spec_dict["name"], results, spec_dict)
    return directory / "leaderboard.md"


def status(directory: str | Path) -> dict[str, Any]:
    """Where a sweep stands (`bench status`): jobs per status and per configuration, failures,
    whether a sweep process holds it, the ETA; `text` is what the command prints."""
    from .analysis.status import sweep_status

    return sweep_status(Path(directory))


def patch(run_dir: str | Path, pre: int | None = None, post: int | None = None,
          curve: bool = False) -> dict[str, Any]:
    """Attention patching of a run with analysis checkpoints (`bench patch`): the report
    written to RUN_DIR/patch/ (patch.json, or curve.json with `curve`)."""
    from .measures.patching import patch_curve, patch_run

    if curve:
        if pre is not None:
            raise ConfigError("--pre: --curve patches from every kept checkpoint before --post; "
                              "give --post only")
        return patch_curve(Path(run_dir), post)
    return patch_run(Path(run_dir), pre, post)


def circuits(run_dir: str | Path, thresholds: list[str] | None = None,
             sequences: int = 2000) -> dict[str, Any]:
    """The head screen over an induction run's checkpoints (`bench circuits`): the report
    written to RUN_DIR/circuits/circuits.json; `thresholds` as CLASS=RATIO items."""
    from .measures.circuits import parse_thresholds, screen_run

    return screen_run(Path(run_dir), parse_thresholds(thresholds or []), sequences)


def site(root: str | Path = ".", out: str | Path = "site",
         extra: list[str | Path] | None = None) -> list[Path]:
    """Render every committed leaderboard and suite report under `root`, and each `extra`
    directory (your compare's or suite's output), as static HTML into `out` (`bench site`);
    returns the pages written."""
    from .analysis.site import build_site

    return build_site(Path(root), Path(out), extra=[Path(d) for d in extra or []])


def default_workers(executor: str) -> int:
    """processes: one per GPU, else one per core; local: 1; slurm and ray: 4."""
    if executor == "local":
        return 1
    if executor == "processes":
        import torch

        return torch.cuda.device_count() or os.cpu_count() or 1
    return 4


def load_results(directory: str | Path) -> pd.DataFrame:
    """Every finished run of a sweep directory's results database as a pandas DataFrame, one row
    per run: the leaderboard's `row` hash and `task` and `arch` labels, seed, tuning (a
    learning-rate tuning run the table does not report), every scalar field of the run record
    (`bench.core.record.RunRecord.scalars`: status, steps_to_emergence (NaN if censored; at an
    evaluation), refined_step (the exact step where measure.refine replayed it, else NaN),
    budget_steps, the accuracy summary, n_params, steps_per_s, ...), and every config field
    flattened as `task.state_size`, `arch.n_heads`, `train.lr`, ..."""
    import pandas as pd

    from .analysis.labels import row_labels
    from .core.rows import group_key
    from .sweeps.results import read_results

    spec, results = read_results(Path(directory))
    recorded = spec.get("arch_defaults", {})
    tune = spec.get("tune") or {}
    tuning = set(seed_list(tune["seeds"], "tune.seeds", TUNE_SEED_START)) if tune else set()
    rows = []
    for r in results:
        config = r.config
        task, arch = row_labels(config, recorded)
        rows.append({
            "job_id": r.job_id, "row": group_key(config), "task": task, "arch": arch,
            "seed": r.seed, "tuning": r.seed in tuning, **r.scalars(),
            **pd.json_normalize({k: v for k, v in config.items() if k != "seed"}, sep=".")
            .iloc[0].to_dict(),
        })
    return pd.DataFrame(rows)
