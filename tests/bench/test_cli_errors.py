"""Bad input: one line naming the field and what is allowed, exit code 2, nothing written."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from architectures import ARCHITECTURES

BAD_RUNS = [
    (["task.sparsty=2"], "task.sparsty: unknown key; allowed:"),
    (["task.sparsity=0"], "task.sparsity: must be in 1..state_size-1 (11), got 0"),
    (["task.state_size=4", "task.sparsity=5"], "task.sparsity: must be in 1..state_size-1 (3)"),
    (["task.n_states=1"], "task.n_states: must be in 2..1024, got 1"),
    (["task.name=cellular_automaton", "task.n_colors=1"],
     "task.n_colors: must be in 2..1048576, got 1"),
    (["task.name=cellular_automaton", "task.n_cells=4", "task.radius=2"],
     "task.n_cells: must be >= 2*radius*rule_applications+1 = 5"),
    (["task.name=sorting"], "task.name: unknown 'sorting'; allowed: linear_map"),
    (["arch.name=lstm"], "arch.name: unknown 'lstm'; allowed: transformer, mlp_mixer"),
    (["train.max_steps=-10"], "train.max_steps: must be in 1..100000000, got -10"),
    (["train.lr=fast"], "train.lr: Value 'fast' of type 'str' could not be converted to Float"),
    (["seed=1.5"], "seed: Value '1.5'"),
    (["arch.n_heads=0"], "arch.n_heads: must be >= 1"),
    (["arch.name=mamba", "arch.kernel=fused"],
     "arch.kernel: 'fused' needs CUDA and mamba_ssm; allowed here: auto, reference"),
    (["arch.name=rwkv", "arch.kernel=triton"], "arch.kernel: Invalid value 'triton'"),
    (["arch.name=rwkv", "arch.head_dim=5"], "arch.head_dim: must be >= 1 and divide d_model (64)"),
    (["emergence.metric=acc"], "emergence.metric: Invalid value 'acc', expected one of"),
    (["trainer.max_steps=5"], "trainer.max_steps: set by the runner; use train.max_steps"),
    (["trainer.acclerator=cpu"], "trainer.acclerator: not an argument of lightning.Trainer"),
    (["lr=0.1"], "lr: unknown key; allowed: task, arch, train, emergence, measure, runtime, "
                 "trainer, seed"),
    (["sparsity"], "sparsity: expected key=value"),
    (["task.held_out=1.5"], "task.held_out: must be in (0, 1), got 1.5"),
    (["task.held_out=.nan"], "task.held_out: must be in (0, 1), got nan"),
    (["task.held_out=0"], "task.held_out: must be in (0, 1), got 0"),
    (["task.task_seed=some"], "task.task_seed: must be an integer in 0..4294967295 or per_seed"),
    (["task.name=cellular_automaton", "task.n_colors=2", "task.n_rules=4",
      "emergence.threshold=0.99"],
     "emergence.threshold: 0.99 for val/token_acc is beyond this task's Bayes ceiling"),
    (["emergence.threshold=0.3"],
     "emergence.threshold: 0.3 for val/token_acc is met without reading the context; allowed: "
     "between the no-context baseline"),
    (["emergence.metric=val/loss", "emergence.threshold=5"],
     "emergence.threshold: 5 for val/loss is met without reading the context"),
    (["trainer.num_sanity_val_steps=2"],
     "trainer.num_sanity_val_steps: set by the runner; use the step-0 evaluation"),
    # issue 13: meaningless combinations, non-finite and out-of-range values, bad trainer options
    (["train.eval_every=500", "train.max_steps=100"],
     "train.eval_every: must be in 1..max_steps (100): no evaluation within the budget"),
    (["train.lr=inf"], "train.lr: must be in (0, 1e+06], got inf"),
    (["train.lr=nan"], "train.lr: must be in (0, 1e+06], got nan"),
    (["arch.attention_bias=-inf"], "arch.attention_bias: must be a finite number, got -inf"),
    (["emergence.metric=val/loss", "emergence.threshold=inf"],
     "emergence.threshold: must be a finite number > 0 for val/loss, got inf"),
    (["arch.positional=7"], "arch.positional: must be true or false, got 7"),
    (["seed=-1"], "seed: must be in 0..4294967295, got -1"),
    (["seed=18446744073709551616"], "seed: must be in 0..4294967295"),
    (["train.batch_size=100000000"], "train.batch_size: must be in 1..1048576"),
    (["task.state_size=3000"], "task.state_size: must be in 2..1024, got 3000"),
    (["arch.n_layers=100000"], "arch.n_layers: must be <= 1024, got 100000"),
    (["task.name=cellular_automaton", "task.radius=0", "task.rule_applications=1000000000"],
     "task.rule_applications: must be in 1..1024"),
    (["train.batch_size=200000"], "train.batch_size: the run needs about"),
    (["arch.head_dim=60000"], "the run needs about"),
    (["trainer.fast_dev_run=true"], "trainer.fast_dev_run: set by the runner; use train.max_steps"),
    (["trainer.max_time=00:00:01:00"], "trainer.max_time: set by the runner"),
    (["runtime.devices=0"], "runtime.devices: must be a count >= 1, -1, auto or a list"),
    (["trainer.precision=bogus"], "trainer.precision: must be 64, 32, 16, 'transformer-engine'"),
    (["trainer.deterministic=maybe"],
     "trainer.deterministic: must be bool, 'warn' or None, got 'maybe'"),
    (["trainer.benchmark=1"], "trainer.benchmark: must be bool or None, got 1"),
    (["trainer.log_every_n_steps=2.5"], "trainer.log_every_n_steps: must be int or None, got 2.5"),
    (["trainer.log_every_n_steps=-1"], "trainer.log_every_n_steps: must be a count of steps >= 1"),
    (["trainer.log_every_n_steps=0"], "trainer.log_every_n_steps: must be a count of steps >= 1"),
]


@pytest.mark.skipif(torch.cuda.is_available(), reason="16-mixed is available on CUDA")
@pytest.mark.parametrize("precision", ["16-mixed", "16"])
def test_a_precision_lightning_would_swap_on_this_machine_is_refused(precision, cli, tmp_path):
    # Lightning trains 16-mixed as bf16-mixed on a CPU, with a warning: the config and job id
    # would name a precision the run did not use
    out = tmp_path / "run"
    code, captured = cli("run", f"trainer.precision={precision}", "train.max_steps=2",
                         "train.eval_every=1", "--out", str(out))
    assert code == 2 and captured.err.strip() == (
        f"error: trainer.precision: {precision} is not available on this machine's "
        "CPUAccelerator (Lightning would train in bf16-mixed); set "
        "trainer.precision=bf16-mixed or run where it is supported")
    assert not out.exists()


@pytest.mark.parametrize("overrides,message", BAD_RUNS)
def test_bad_run_config(overrides, message, cli, tmp_path):
    out = tmp_path / "run"
    code, captured = cli("run", *overrides, "--out", str(out))
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not out.exists()


def test_trainer_options_the_runner_defaults_are_the_users_to_change():
    from bench.training.config import load_run_config

    options = ["trainer.enable_progress_bar=false", "trainer.enable_model_summary=true",
               "trainer.deterministic=warn", "trainer.gradient_clip_algorithm=value",
               "runtime.strategy=ddp_spawn", "trainer.precision=bf16-mixed"]
    assert load_run_config(options).trainer["deterministic"] == "warn"


@pytest.mark.parametrize("args, message", [
    (["run", "--bogus"], "error: bench run: No such option: --bogus"),
    (["task", "linear_map", "--samples", "0"], "error: bench task: Invalid value for '--samples'"),
    (["task", "linear_map", "--samples", "100000000"], "error: bench task: Invalid value"),
    (["sweep"], "error: bench sweep: Missing argument 'spec'."),
    (["nonsense"], "error: bench: No such command 'nonsense'."),
])
def test_usage_errors_are_one_error_line(args, message):
    """Typer's usage errors too: one `error:` line naming the command, exit 2."""
    done = subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, text=True)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(message), lines


def test_bad_task_inspection(cli):
    code, captured = cli("task", "linear_map", "sparsity=12")
    assert code == 2 and captured.err.strip() == (
        "error: task.sparsity: must be in 1..state_size-1 (11), got 12 (s = S makes every token "
        "the sum of the previous state)")


def test_a_task_too_large_to_reference_is_one_line_not_a_hang(cli):
    # a million colours: the rule pool draws without a per-sequence copy of its tables, and the
    # Bayes reference (12e9 posterior entries) is refused before its arithmetic starts
    code, captured = cli("task", "cellular_automaton", "n_colors=1000000", "radius=0",
                         "--samples", "1")
    assert code == 2 and captured.out == "" and captured.err.strip().startswith(
        "error: task.vocab: the Bayes-optimal reference needs 512 held-out sequences x 24 "
        "scored tokens x 1,000,000 values"), captured.err


def test_an_nca_whose_rule_networks_cannot_fit_is_one_line(cli):
    code, captured = cli("task", "nca", "height=32", "width=32", "n_colors=1024", "hidden=4096",
                         "--samples", "1000", "--json")  # was a 77 GB allocation
    assert code == 2 and captured.out == "" and captured.err.strip() == (
        "error: task.hidden: each sequence's rule network has 10 x n_colors x hidden = "
        "41,943,040 weights; must be at most 1,048,576 (a batch draws one per sequence): lower "
        "hidden or n_colors")


def test_perf_refuses_a_nan_or_absurd_stretch(cli, tmp_path):
    for value in ("nan", "-1", "1e9"):
        code, captured = cli("perf", "--seconds", value, "--out", str(tmp_path / "perf"))
        assert code == 2 and captured.err.strip().startswith(
            "error: --seconds: must be a number of seconds in (0, 3600]"), captured.err
        assert not (tmp_path / "perf").exists()


def test_a_task_override_that_contradicts_the_command_is_refused(cli):
    code, captured = cli("task", "linear_map", "name=cellular_automaton")
    assert code == 2 and captured.out == "" and captured.err.strip() == (
        "error: name: the command names task 'linear_map' and an override names "
        "'cellular_automaton'; give the task once")


GOOD = ("name: x\ntask: {name: linear_map, state_size: 6, sparsity: 2}\n"
        "archs: [{name: mlp_mixer, d_model: 16, n_layers: 1}]\nseeds: 1\n"
        "train: {max_steps: 20, eval_every: 10, eval_size: 32}\n")
ARCH = "archs: [{name: mlp_mixer, d_model: 16, n_layers: 1}]"
TASK = "task: {name: linear_map, state_size: 6, sparsity: 2}"
TRAIN = "train: {max_steps: 20, eval_every: 10, eval_size: 32}"

# (spec text, extra command-line arguments, the message)
BAD_SWEEPS = [
    (GOOD + "seedz: 2\n", [], "seedz: unknown key; allowed: name, task, archs, seeds"),
    (GOOD.replace(ARCH, "archs: []"), [], "archs: must list at least one architecture"),
    (GOOD.replace(ARCH, "archs: [mlp_mixer]"), [], "archs: every entry must be a mapping"),
    (GOOD.replace("d_model: 16", "d_model: 16, n_heads: -1"), [],
     "archs[0]: arch.n_heads: must be >= 1"),
    (GOOD.replace(ARCH, "archs: [{name: lstm}]"), [], "archs[0]: arch.name: unknown 'lstm'"),
    (GOOD.replace(ARCH, "archs: [{name: mlp_mixer}, {name: mlp_mixer, d_model: 64}]"), [],
     "archs: two entries resolve to the same architecture config"),
    (GOOD.replace(TASK, "task: 3"), [], "task: must be a mapping or a non-empty list of mappings"),
    (GOOD.replace("sparsity: 2}", "sparsty: 2}"), [], "task.sparsty: unknown key; allowed:"),
    (GOOD.replace("sparsity: 2}", "sparsity: 9}"), [],
     "task.sparsity: must be in 1..state_size-1 (5), got 9"),
    (GOOD.replace("state_size: 6, sparsity: 2", "state_size: [8, 4], sparsity: 6"), [],
     "task.sparsity: must be in 1..state_size-1 (3), got 6"),
    (GOOD.replace("sparsity: 2}", "sparsity: []}"), [], "task.sparsity: an empty grid"),
    (GOOD.replace("d_model: 16", "d_model: []"), [], "archs[0].d_model: an empty grid"),
    (GOOD.replace("max_steps: 20", "max_steps: many"), [],
     "train.max_steps: Value 'many' of type 'str' could not be converted to Integer"),
    (GOOD.replace("max_steps: 20", "max_steps: [10, 20]"), [],
     "train.max_steps: only train.lr may be a list"),
    (GOOD.replace("max_steps: 20", "lr: [], max_steps: 20"), [], "train.lr: an empty grid"),
    (GOOD.replace("seeds: 1", "seeds: 0"), [], "seeds: must be in 1..10000, got 0"),
    (GOOD.replace("seeds: 1", "seeds: []"), [], "seeds: must list 1..10000 seeds, got 0"),
    (GOOD.replace("seeds: 1", "seeds: [3, 3]"), [], "seeds: 3 is listed twice"),
    (GOOD.replace("seeds: 1", "seeds: [-1]"), [],
     "seeds: every seed must be an integer in 0..4294967295"),
    (GOOD.replace("seeds: 1", "seeds: 1000000000"), [], "seeds: must be in 1..10000"),
    (GOOD.replace("sparsity: 2}", "sparsity: 2, held_out: 1.0}"), [],
     "task.held_out: must be in (0, 1), got 1.0"),
    (GOOD + "emergence: {threshold: 0.4}\n", [],
     "emergence.threshold: 0.4 for val/token_acc is met without reading the context"),
    (GOOD.replace(TASK, "task: {name: cellular_automaton, n_colors: 2, n_rules: [1, 4]}"), [],
     "emergence.threshold: 0.99 for val/token_acc is beyond this task's Bayes ceiling"),
    (GOOD + "tune: {lr: [0.001, 0.01], seeds: [0, 1]}\n", [],
     "tune.seeds: must be disjoint from seeds"),
    (GOOD + "tests: [{trend: n_heads}]\n", [], "tests: 'n_heads' is not task.FIELD"),
    # a test with nothing to compare is caught before training, not dropped from the table
    (GOOD + "tests: [{compare: arch.name}]\n", [],
     "tests: compare arch.name takes one value in this spec (mlp_mixer); nothing to compare"),
    (GOOD.replace(ARCH, "archs: [{name: mlp_mixer, d_model: 16, n_layers: [1, 2]}]")
     + "tests: [{compare: arch.n_layers, against: 3}]\n", [],
     "tests: against 3 is not a value of arch.n_layers in this spec (1, 2)"),
    (GOOD + "tests: [{trend: task.depth}]\n", [],
     "tests: trend 'task.depth' is not a field of every row's task"),
    (GOOD.replace("seeds: 1", "seeds: three"), [], "seeds: must be a count or a list of seeds"),
    (GOOD + "emergence: {metric: acc}\n", [], "emergence.metric: Invalid value 'acc'"),
    (GOOD + "trainer: {max_steps: 3}\n", [],
     "trainer.max_steps: set by the runner; use train.max_steps"),
    (GOOD + "trainer: {devices: 2, strategy: ddp}\n", [],
     "runtime.strategy: 'ddp' with several devices relaunches the command per rank"),
    (GOOD + "plots: [[arch.depth]]\n", [],
     "plots: 'arch.depth' is not a field of every row's arch"),
    (GOOD + "plots: [[task.state_size, task.sparsity, seed]]\n", [],
     "plots: each plot has one or two axes"),
    (GOOD + "plots: [[seed]]\n", [], "plots: unknown axis 'seed'; allowed: task.FIELD"),
    ("name: x\ntask: {name: [linear_map\n", [], "not a valid YAML mapping"),
    ("- linear_map\n- mlp_mixer\n", [], "a sweep spec is a mapping"),
    (GOOD, ["--executor", "kubernetes"],
     "--executor: unknown 'kubernetes'; allowed: local, processes, slurm, ray"),
    (GOOD, ["--executor", "processes", "--workers", "0"], "--workers: must be >= 1, got 0"),
    (GOOD, ["--executor", "processes", "-O", "gpus=2"],
     "-O gpus: not an option of the processes executor; allowed: none"),
    (GOOD, ["--executor", "ray", "-O", "num_gpus=2"],
     "-O num_gpus: not an option of the ray executor; allowed: address, cpus_per_job"),
    (GOOD, ["--executor", "slurm", "-O", "slurm_partitionz=gpu"],
     "-O: Unknown argument 'partitionz' for executor 'slurm'"),
    (GOOD, ["--executor", "slurm", "-O", "cluster=pbs"], "-O cluster: must be slurm or local"),
    (GOOD, ["--executor", "slurm"], "--executor: slurm: Could not detect \"srun\""),
    (GOOD, ["-O", "partition"], "-O partition: expected key=value"),
    (GOOD, ["--set", "runtime.accelerator"], "--set runtime.accelerator: expected key=value"),
    (GOOD, ["--set", "=gpu"], "--set =gpu: expected key=value"),
    (GOOD, ["--set", "seeds=0"], "seeds: must be in 1..10000"),
    (GOOD, ["--set", "trainer.max_steps=3"],
     "trainer.max_steps: set by the runner; use train.max_steps"),
    # issue 13: validated before anything is written
    (GOOD + "trainer: {devices: 0}\n", [], "runtime.devices: must be a count >= 1"),
    (GOOD + "trainer: {precision: bogus}\n", [], "trainer.precision: must be 64, 32, 16"),
    (GOOD + "trainer: {strategy: bogus}\n", [],
     "runtime.strategy: unknown 'bogus'; allowed: auto, ddp"),
    (GOOD + "trainer: {accelerator: gpus}\n", [], "runtime.accelerator: unknown 'gpus'; allowed:"),
    (GOOD.replace("max_steps: 20", "lr: .nan, max_steps: 20"), [],
     "train.lr: must be in (0, 1e+06], got nan"),
    (GOOD.replace("seeds: 1", "seeds: [18446744073709551616]"), [],
     "seeds: every seed must be an integer in 0..4294967295"),
    (GOOD.replace("d_model: 16", "d_model: [" + ", ".join(map(str, range(1, 101))) + "]")
     .replace("seeds: 1", "seeds: 300"), [],
     "the grid lists 30,000 jobs; must be at most 20,000"),
    (GOOD.replace("d_model: 16, n_layers: 1", "d_model: 4096, n_layers: 1000"), [],
     "the run needs about"),
    (GOOD.replace("name: ", "name: ../../../escaped #", 1), [],
     "name: must be 1-100 letters, digits"),
]


@pytest.mark.parametrize("text,args,message", BAD_SWEEPS)
def test_bad_sweep(text, args, message, cli, tmp_path):
    spec, out = tmp_path / "spec.yaml", tmp_path / "out"
    spec.write_text(text)
    code, captured = cli("sweep", str(spec), "--out", str(out), *args)
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert message in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]  # nothing written


def test_sweep_output_problems_are_refused_before_anything_is_written(cli, tmp_path):
    from bench.sweeps.results import SweepLock

    spec = tmp_path / "spec.yaml"
    spec.write_text(GOOD)
    code, captured = cli("sweep", str(tmp_path / "missing.yaml"))
    assert code == 2 and "missing.yaml: no such sweep spec" in captured.err

    (tmp_path / "file").write_text("a file, not a directory")
    code, captured = cli("sweep", str(spec), "--out", str(tmp_path / "file" / "out"))
    assert code == 2 and captured.err.strip() == (
        f"error: --out: {tmp_path}/file/out cannot be created ({tmp_path}/file is not a directory)")

    out = tmp_path / "corrupt"
    out.mkdir()
    (out / "results.sqlite").write_bytes(b"not a database" * 100)
    code, captured = cli("sweep", str(spec), "--out", str(out))
    assert code == 2 and "results.sqlite: not an SQLite file (corrupt or foreign)" in captured.err
    assert sorted(p.name for p in out.iterdir()) == ["results.sqlite"]
    assert (out / "results.sqlite").read_bytes() == b"not a database" * 100

    empty = tmp_path / "empty"  # a 0-byte results.sqlite is not ours to fill in
    empty.mkdir()
    (empty / "results.sqlite").write_bytes(b"")
    for args in (["sweep", str(spec), "--out", str(empty)], ["status", str(empty)],
                 ["leaderboard", str(empty)]):
        code, captured = cli(*args)
        assert code == 2 and "an empty file, not a results database" in captured.err
    assert sorted(p.name for p in empty.iterdir()) == ["results.sqlite"]
    assert (empty / "results.sqlite").read_bytes() == b""

    busy = tmp_path / "busy"
    busy.mkdir()
    with SweepLock(busy):  # another sweep holds the directory
        code, captured = cli("sweep", str(spec), "--out", str(busy))
    assert code == 2 and "another sweep (pid " in captured.err and "is running" in captured.err
    assert sorted(p.name for p in busy.iterdir()) == [".lock", ".lock.owner"]


def test_run_out_must_be_a_directory_before_anything_runs(cli, tmp_path):
    (tmp_path / "file").write_text("mine")
    for out in (tmp_path / "file", Path("/dev/null")):
        code, captured = cli("run", "train.max_steps=100", "--out", str(out))
        assert code == 2 and f"error: --out: {out} cannot be created" in captured.err
    assert (tmp_path / "file").read_text() == "mine"
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "metrics.csv").write_text("a user's own")
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    code, captured = cli("run", "train.max_steps=100", "--out", str(tmp_path / "notes"))
    assert code == 2 and "holds files a run did not write (todo.txt, ...)" in captured.err
    assert (tmp_path / "notes" / "metrics.csv").read_text() == "a user's own"


def test_console_script_exits_2_without_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "arch.name=nope", "--out", str(tmp_path / "r")],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: arch.name: unknown 'nope'; allowed: {', '.join(ARCHITECTURES)}, "
        "or a plug-in package.module:Class"]
    assert not (tmp_path / "r").exists()
