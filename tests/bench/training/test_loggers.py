"""The loggers users know, beside the run's metrics.csv: TensorBoard, W&B (offline), MLflow (a
file store), each receiving the run's metrics and config; never part of the job id."""

import importlib.util

import pytest

from bench.core.errors import ConfigError
from bench.measures.run import train
from bench.training.config import load_run_config

RUN = ["task.state_size=8", "task.sparsity=1", "task.n_states=2", "arch.name=mlp_mixer",
       "arch.d_model=16", "train.eval_every=10", "train.eval_size=64", "train.probe_size=32",
       "train.max_steps=20"]


def test_tensorboard_wandb_and_mlflow_receive_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = load_run_config([*RUN, "runtime.logger=[tensorboard,wandb,mlflow]"])
    run_dir = tmp_path / "r"
    result = train(cfg, run_dir, progress=False)
    assert result["steps"] == 20
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert "val/token_acc" in events.Tags()["scalars"]
    csv_steps = [int(line.split(",")[1]) for line in
                 (run_dir / "metrics.csv").read_text().splitlines()[1:] if line.split(",")[-1]]
    assert [e.step for e in events.Scalars("val/token_acc")] == csv_steps == [9, 19]
    offline = list((run_dir / "wandb").glob(f"offline-run-*-{cfg.job_id()}"))
    assert len(offline) == 1 and list(offline[0].glob("*.wandb"))
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{(run_dir / 'mlflow.db').resolve()}")
    (run,) = client.search_runs([client.get_experiment_by_name("emergence-bench").experiment_id])
    assert run.info.run_name == cfg.job_id()
    assert run.data.params["arch.name"] == "mlp_mixer" and "val/token_acc" in run.data.metrics
    assert (run_dir / "metrics.csv").is_file()  # the CSV stays


def test_loggers_are_not_part_of_the_experiment():
    plain = load_run_config(RUN).job_id()
    assert load_run_config([*RUN, "runtime.logger=tensorboard"]).job_id() == plain


@pytest.mark.parametrize("value, message", [
    ("neptune", "runtime.logger: unknown 'neptune'; allowed: tensorboard, wandb, mlflow, or a "
                "list of them (metrics.csv is always kept)"),
    ("7", "runtime.logger: must be a logger name or a list of names, got 7"),
    ("[tensorboard,tensorboard]", "runtime.logger: ['tensorboard', 'tensorboard'] names a "
                                  "logger twice"),
])
def test_a_bad_logger_is_one_line(value, message):
    with pytest.raises(ConfigError) as e:
        load_run_config([*RUN, f"runtime.logger={value}"])
    assert str(e.value).startswith(message)


def test_a_missing_logger_package_names_its_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match=r"runtime.logger: wandb needs the wandb package: "
                                          r"pip install (-e )?'.*\[wandb\]'"):
        load_run_config([*RUN, "runtime.logger=wandb"])
