"""End to end through the real Lightning Trainer: a tiny run emerges, random targets do not."""

import json
import math

import pytest
import torch

from bench.measures.run import train
from bench.training.config import load_run_config
from bench.training.run import cpuinfo

TINY = ["task.state_size=8", "task.sparsity=1", "task.n_states=2", "arch.d_model=32",
        "train.eval_every=25", "train.eval_size=256", "train.warmup_steps=20"]


def test_tiny_run_emerges_and_writes_its_result(tmp_path, cli):
    out = tmp_path / "run"
    code, captured = cli("run", *TINY, "arch.name=mlp_mixer", "train.max_steps=800",
                         "train.lr=3e-3", "--out", str(out), "--json")
    assert code == 0
    printed = json.loads(captured.out)
    result = json.loads((out / "result.json").read_text())
    assert printed == json.loads(json.dumps(result))
    assert result["status"] == "emerged"
    assert 0 < result["steps_to_emergence"] < 800
    assert result["steps"] < 800  # stopped early once confirmed
    assert result["tokens_to_emergence"] == result["steps_to_emergence"] * 64 * 16
    assert result["final_metrics"]["val/token_acc"] >= 0.99
    assert result["rise_step"] is not None and result["curves"]["step"][0] == 0
    assert (result["transition_width"] is None) == bool(result["width_note"])
    split = result["split"]
    assert split["states"] == 256 and split["held_out_states"] + split["training_states"] == 256
    assert split["evaluated_sequences"] == split["held_out_states"]
    assert result["references"]["no_context"]["token_acc"] < 0.7
    assert result["accuracy"]["heldout_token_acc"] >= 0.99
    assert result["config"]["arch"]["name"] == "mlp_mixer" and result["config"]["seed"] == 0
    assert result["n_params"] > 0 and result["steps_per_s"] > 0
    assert {"torch", "lightning", "torchmetrics", "cpu"} <= set(result["versions"])
    assert result["versions"]["torch_threads"] == str(__import__("torch").get_num_threads())
    x86 = "cpu family" in cpuinfo()  # what an x86 Linux CPU reports (else "?")
    assert result["versions"]["cpu_id"].startswith("cpu family ") == x86
    assert result["versions"]["cpu_capability"] == \
        __import__("torch").backends.cpu.get_cpu_capability()
    header = (out / "metrics.csv").read_text().splitlines()[0]
    assert {"val/loss", "val/token_acc", "val/exact_acc", "train/loss"} <= set(header.split(","))


def test_random_targets_stay_at_chance(tmp_path):
    """Leak control: with nothing to learn, a causal model cannot beat ln 2."""
    cfg = load_run_config([*TINY, "task.random_targets=true", "train.max_steps=300",
                           "train.lr=3e-3"])
    result = train(cfg, tmp_path / "r", progress=False)
    assert result["status"] == "censored" and result["steps_to_emergence"] is None
    assert result["final_metrics"]["val/loss"] > math.log(2) - 0.03
    assert abs(result["final_metrics"]["val/token_acc"] - 0.5) < 0.05


@pytest.mark.parametrize("arch", ["mamba", "gated_deltanet", "rwkv"])
def test_recurrent_mixers_train_on_the_reference_path(arch, tmp_path):
    cfg = load_run_config([*TINY, f"arch.name={arch}", "train.max_steps=30"])
    result = train(cfg, tmp_path / "r", progress=False)
    assert result["kernel_path"] == "reference"  # no CUDA here
    assert math.isfinite(result["final_metrics"]["val/loss"])
    assert len(result["mixer_params_per_layer"]) == 2
    assert result["state_per_layer"] == cfg.arch.memory_per_layer(15)


def test_transformer_logs_attention_mass_on_the_parents(tmp_path):
    cfg = load_run_config([*TINY, "train.max_steps=50", "arch.attention_bias=30"])
    result = train(cfg, tmp_path / "r", progress=False)
    assert result["final_metrics"]["val/parent_mass"] > 0.99  # the bias hands it the pattern
    header = (tmp_path / "r" / "metrics.csv").read_text().splitlines()[0]
    assert "val/parent_mass_l0" in header and "val/parent_mass_l1" in header


def test_a_run_whose_loss_goes_non_finite_is_diverged_and_stops(tmp_path):
    cfg = load_run_config([*TINY, "train.lr=1e6", "train.grad_clip=0", "train.warmup_steps=0",
                           "train.max_steps=200", "train.eval_every=10"])
    result = train(cfg, tmp_path / "r", progress=False)
    assert result["status"] == "diverged" and result["steps_to_emergence"] is None
    assert result["steps"] < 200  # stopped at the first evaluation that saw it
    assert math.isnan(result["final_metrics"]["val/loss"])
    assert math.isnan(json.loads((tmp_path / "r" / "result.json").read_text())
                      ["final_metrics"]["val/loss"])


def test_the_result_keeps_every_metric_curve_and_the_learned_pattern(tmp_path):
    cfg = load_run_config([*TINY, "train.max_steps=100"])
    result = train(cfg, tmp_path / "r", progress=False)
    curves = result["curves"]
    assert curves["step"] == [0, 25, 50, 75, 100]  # an evaluation before the first step too
    for key in ("val/loss", "val/token_acc", "val/exact_acc", "val/parent_mass",
                "train/token_acc", "train/exact_acc"):
        assert len(curves[key]) == 5 and all(math.isfinite(v) for v in curves[key])
    assert math.isnan(curves["train/loss"][0]) and all(map(math.isfinite, curves["train/loss"][1:]))
    assert curves["val/token_acc"][-1] == result["final_metrics"]["val/token_acc"]
    assert [s for s, _ in result["curve"]] == curves["step"]
    patterns = result["learned_patterns"]
    assert [p["layer"] for p in patterns] == [0, 1]  # one entry per attention layer
    for p in patterns:
        rows = torch.tensor(p["map"])
        assert rows.shape == (15, 15) and 0 <= p["head"] < cfg.arch.n_heads
        assert torch.allclose(rows.sum(-1), torch.ones(15), atol=0.01)  # a softmax per row
        assert torch.equal(rows.triu(1), torch.zeros(15, 15))  # causal


def test_mixers_without_attention_have_no_learned_pattern(tmp_path):
    cfg = load_run_config([*TINY, "arch.name=mlp_mixer", "train.max_steps=25"])
    result = train(cfg, tmp_path / "r", progress=False)
    assert result["learned_patterns"] == [] and "val/parent_mass" not in result["curves"]


def test_result_json_is_written_once_unless_an_analysis_adds_to_it(tmp_path, monkeypatch):
    import bench.measures.run as measures_run
    import bench.training.run as training_run

    writes = []
    real = training_run.write_json_atomic

    def counted(path, data):
        writes.append(path.name)
        return real(path, data)

    monkeypatch.setattr(training_run, "write_json_atomic", counted)
    monkeypatch.setattr(measures_run, "write_json_atomic", counted)
    base = [*TINY, "train.max_steps=60", "train.eval_every=20"]
    result = train(load_run_config(base), tmp_path / "plain", progress=False)
    assert writes == ["result.json"]  # once, and what the run returns is what it wrote
    assert json.loads((tmp_path / "plain" / "result.json").read_text()) == json.loads(
        json.dumps(result, default=str))
    writes.clear()
    train(load_run_config([*base, "measure.keep_checkpoints=true"]), tmp_path / "kept",
          progress=False)
    assert writes == ["result.json", "result.json"]  # the kept checkpoints' sizes added
    assert json.loads((tmp_path / "kept" / "result.json").read_text())["checkpoints"]
