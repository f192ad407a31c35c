"""Where a run's metrics go: always `metrics.csv` in the run directory, and any of the loggers
users know (`runtime.logger: tensorboard`, `wandb`, `mlflow`, or a list), each an optional extra.

The extra loggers are observation only, not part of the job id. They are configured the way
their own tools are: W&B by `WANDB_PROJECT` (default `emergence-bench`), `WANDB_MODE=offline`
and the rest of its environment; MLflow by `MLFLOW_TRACKING_URI` (default: `mlflow.db` in the run
directory) and `MLFLOW_EXPERIMENT_NAME` (default `emergence-bench`). Each run is named by its job
id and logs its resolved config as hyperparameters.
"""

from __future__ import annotations

import csv
import importlib.util
import os
from pathlib import Path
from typing import Any

from lightning.fabric.loggers.csv_logs import _ExperimentWriter
from lightning.pytorch.loggers import CSVLogger, Logger

from ..core.errors import ConfigError, install_hint

# name -> (the module it needs, the extra that installs it)
EXTRA_LOGGERS = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb"),
                 "mlflow": ("mlflow", "mlflow")}


def logger_names(value: Any) -> list[str]:
    """`runtime.logger` as a list of names, checked (each known and its package installed)."""
    names = [value] if isinstance(value, str) else value
    allowed = f"allowed: {', '.join(EXTRA_LOGGERS)}, or a list of them (metrics.csv is always kept)"
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"runtime.logger: must be a logger name or a list of names, got "
                          f"{value!r}; {allowed}")
    for name in names:
        if name not in EXTRA_LOGGERS:
            raise ConfigError(f"runtime.logger: unknown '{name}'; {allowed}")
        module, extra = EXTRA_LOGGERS[name]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"runtime.logger: {name} needs the {module} package: "
                              f"{install_hint(extra)}")
    if len(set(names)) < len(names):
        raise ConfigError(f"runtime.logger: {names} names a logger twice")
    return names


def build_loggers(value: Any, run_dir: Path, job_id: str, config: dict[str, Any],
                  resume_step: int | None = None) -> list[Logger]:
    """The run's loggers: the CSV the run directory keeps, then the extra ones asked for."""
    loggers: list[Logger] = [RunLogger(run_dir, resume_step)]
    for name in logger_names(value) if value is not None else []:
        if name == "tensorboard":
            from lightning.pytorch.loggers import TensorBoardLogger

            extra: Logger = TensorBoardLogger(run_dir, name="", version="tensorboard",
                                              default_hp_metric=False)
        elif name == "wandb":
            from lightning.pytorch.loggers import WandbLogger

            extra = WandbLogger(name=job_id, id=job_id, save_dir=str(run_dir), resume="allow",
                                project=os.environ.get("WANDB_PROJECT", "emergence-bench"))
        else:
            from lightning.pytorch.loggers import MLFlowLogger

            uri = os.environ.get("MLFLOW_TRACKING_URI",
                                 f"sqlite:///{(run_dir / 'mlflow.db').resolve()}")
            extra = MLFlowLogger(
                experiment_name=os.environ.get("MLFLOW_EXPERIMENT_NAME", "emergence-bench"),
                run_name=job_id, tracking_uri=uri)
        extra.log_hyperparams(_flat(config))
        loggers.append(extra)
    return loggers


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value if isinstance(value, (int, float, str, bool)) \
                else str(value)
    return out


class RunLogger(CSVLogger):
    """The run's `metrics.csv`. Lightning's CSV writer deletes an existing file; resuming after
    step `resume_step`, this one keeps the rows written up to that step and appends to them."""

    def __init__(self, run_dir: Path, resume_step: int | None = None):
        super().__init__(run_dir, name="", version="")
        self.resume_step = resume_step

    @property
    def experiment(self) -> _ExperimentWriter:
        if self._experiment is None:
            path = Path(self.log_dir) / _ExperimentWriter.NAME_METRICS_FILE
            kept, header = _rows_upto(path, self.resume_step)
            experiment = super().experiment  # deletes the file (on rank 0; elsewhere a dummy)
            if header and isinstance(experiment, _ExperimentWriter):
                with path.open("w", newline="") as f:
                    writer = csv.DictWriter(f, fieldnames=header)
                    writer.writeheader()
                    writer.writerows(kept)
                experiment.metrics_keys = list(header)
            return experiment
        return self._experiment


def _rows_upto(path: Path, step: int | None) -> tuple[list[dict[str, str]], list[str]]:
    if step is None or not path.is_file():
        return [], []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        # Lightning writes the metrics of optimizer step k (1-based) at `step` k - 1: the rows
        # before a checkpoint taken after step `step` are the ones below it
        rows = [r for r in reader if r.get("step") and int(float(r["step"])) < step]
        return rows, list(reader.fieldnames or [])
