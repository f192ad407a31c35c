"""`bench perf`: the bare loop is the same computation as the suite's path; the report is whole.

Nothing here asserts a speed: timings are measured by the command, not by tests.
"""

import dataclasses
import json
import os
import tempfile
from pathlib import Path

import pytest
import torch

from bench.tools import perf
from bench.tools.perf import BareLoop
from bench.training.config import load_run_config
from bench.training.lightning_module import EmergenceModule
from bench.training.run import build_trainer, emergence_callback
from datamodules import build_task

SMALL = {"task": {"name": "linear_map", "state_size": 4, "sparsity": 1, "n_states": 3},
         "arch": {"name": "transformer", "d_model": 16, "n_layers": 1},
         "train": {"batch_size": 16, "max_steps": 12, "eval_every": 12, "warmup_steps": 4,
                   "grad_clip": 0.5}}


def _module(cfg):
    task = build_task(cfg.task, batch_size=cfg.train.batch_size, eval_size=32, probe_size=16,
                      seed=cfg.seed)
    torch.manual_seed(0)
    return EmergenceModule(cfg.arch, cfg.train, task), task


def test_the_bare_loop_trains_exactly_what_the_lightning_path_trains():
    cfg = load_run_config(SMALL)
    lit, task = _module(cfg)
    bare, _ = _module(cfg)
    assert all(torch.equal(a, b) for a, b in zip(lit.parameters(), bare.parameters()))
    callback = emergence_callback(cfg, task)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trainer(cfg, Path(tmp), [callback], progress=False)
        trainer.fit(lit, datamodule=task)
    BareLoop(bare, task, torch.device("cpu")).run(cfg.train.max_steps)
    for (name, a), b in zip(lit.named_parameters(), bare.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
    moved = _module(cfg)[0]
    assert not all(torch.equal(a, b) for a, b in zip(moved.parameters(), bare.parameters()))


def test_compile_is_a_speed_knob_not_part_of_the_job():
    plain = load_run_config(SMALL)
    compiled = load_run_config({**SMALL, "train": {**SMALL["train"], "compile": True}})
    assert compiled.runtime.compile and compiled.job_id() == plain.job_id()
    assert dataclasses.asdict(compiled) != dataclasses.asdict(plain)


def test_the_maps_are_measured_once_per_size_and_counted_in_every_repeat(monkeypatch):
    import bench.measures.maps as maps_module

    calls = []
    measure = maps_module.intervention_map
    monkeypatch.setattr(maps_module, "intervention_map",
                        lambda *a, **k: calls.append(1) or measure(*a, **k))
    cfg = load_run_config(SMALL)
    row = perf._measure(cfg, repeats=3, target_s=0.01, warmup=1, accelerator="cpu")
    assert len(calls) == 1  # one measurement for the three stretches
    assert 0 < row["analysis_share"] < row["eval_share"] < 1


def test_perf_writes_a_complete_report(cli, tmp_path):
    out = tmp_path / "perf"
    code, captured = cli("perf", "--arch", "arch.name=mlp_mixer arch.d_model=16 arch.n_layers=1",
                         "--sizes",
                         "quickstart,32,64", "--repeats", "2", "--seconds", "0.05", "--warmup",
                         "1", "--batch", "4", "--out", str(out))
    assert code == 0, captured.err
    report = json.loads((out / "perf.json").read_text())
    rows = report["rows"]
    assert [(r["arch"], r["size"], r["seq_tokens"]) for r in rows] == [
        ("mlp_mixer", "quickstart", 24), ("mlp_mixer", "32", 32), ("mlp_mixer", "64", 64)]
    for r in rows:
        assert r["lightning_steps_per_s"] > 0 and r["bare_steps_per_s"] > 0
        assert r["overhead_min"] <= r["overhead"] <= r["overhead_max"]
        assert 0 < r["batch_share"] < 1 and 0 < r["eval_share"] < 1 and r["peak_mib"] > 0
        assert 0 < r["analysis_share"] < r["eval_share"] < 1 and r["screen_size"] == 128
        assert 0 < r["whole_eval_share"] < 1
        assert 0 < r["leak_of_whole"] < 1  # the whole evaluation recomputes its first chunk
        # at batch 4 the screen is an eighth of the 200 sequences between two evaluations
        assert r["screen_rows"] == (128 + 64 if r["size"] == "quickstart" else 25 + 12)
        # the maps: 16 x 8 gradient passes and 16 x (L flips) copies at a third each, against
        # 3% of 50 steps x 64 sequences = 96 (quickstart, L = 23: 251, every 3rd) or of 50 x 4
        # = 6 (L = 31: 294, every 49th; L = 63: 464, every 78th)
        assert r["influence_every"] == {"quickstart": 3, "32": 49, "64": 78}[r["size"]]
        assert r["lightning_tokens_per_s"] == pytest.approx(
            r["lightning_steps_per_s"] * r["batch_size"] * r["seq_tokens"])
    assert set(report["exponents"]) == {"mlp_mixer"}
    assert (out / "perf.png").stat().st_size > 0
    text = (out / "perf.md").read_text()
    assert "| mlp_mixer | quickstart | 23 | torch | no |" in text and "seeds/h (est.)" in text
    assert "leak check" in text
    from bench.tools.seeds_per_hour import job_seeds_per_hour

    r = rows[0]  # 2,000-step jobs at its step time, evaluation's share of the wall time added
    wall = 2000 / r["lightning_steps_per_s"] / (1 - r["eval_share"])
    assert job_seeds_per_hour(r) == pytest.approx(3600 / wall)
    assert f"| {job_seeds_per_hour(r):,.0f} |" in text


def test_perf_takes_bench_runs_syntax_and_plugins(monkeypatch):
    from bench.tools.perf import configs, sizes

    monkeypatch.chdir(Path(__file__).resolve().parents[3])  # examples/ importable
    [[cfg]] = configs(["arch.name=examples.custom_mixer:CausalConvMixer arch.kernel_size=8"],
                      sizes(["quickstart"], 4), False)
    assert (cfg.arch.name, cfg.arch.kernel_size, cfg.task.state_size) == (
        "examples.custom_mixer:CausalConvMixer", 8, 12)
    [[default]] = configs(["transformer"], sizes(["quickstart"], 4), False)
    assert default.arch.name == "transformer"


def test_perf_bad_input_is_one_line(cli, tmp_path):
    for args, message in [(["--sizes", "quickstart,33"], "--sizes: '33' is not quickstart"),
                          (["--arch", "lstm"], "arch.name: unknown 'lstm'"),
                          (["--arch", "arch.name=mamba task.state_size=4"],
                           "--arch: 'task.state_size=4' is not arch.FIELD=VALUE or plugins=[...]"),
                          (["--arch", "mamba:expand=1"], "--arch: 'mamba:expand=1' is not"),
                          (["--repeats", "0"], "--repeats: must be >= 1")]:
        code, captured = cli("perf", *args, "--out", str(tmp_path / "p"))
        assert code == 2 and message in captured.err and len(captured.err.splitlines()) == 1
        assert not (tmp_path / "p").exists()


@pytest.mark.slow  # one of CI's slowest (43 s there): a spawned pool per executor setting
def test_perf_measures_seeds_per_hour_per_executor_setting(cli, tmp_path):
    out = tmp_path / "perf"
    code, captured = cli("perf", "--arch", "arch.name=mlp_mixer arch.d_model=16 arch.n_layers=1",
                         "--sizes", "quickstart", "--repeats", "1", "--seconds", "0.05",
                         "--warmup", "1", "--seeds-per-hour", "50", "--out", str(out))
    assert code == 0, captured.err
    seeds = json.loads((out / "perf.json").read_text())["seeds"]
    assert {(r["workers"], r["threads"]) for r in seeds} >= {(1, os.cpu_count()),
                                                             (os.cpu_count(), 1)}
    for r in seeds:
        assert r["seeds_per_hour"] == pytest.approx(r["steps_per_s"] * 3600 / 2000)
    assert "Seeds per hour of a quickstart-sized job" in (out / "perf.md").read_text()
    code, captured = cli("perf", "--seeds-per-hour", "10", "--out", str(tmp_path / "x"))
    assert code == 2 and "--seeds-per-hour: steps per worker must be 0" in captured.err
