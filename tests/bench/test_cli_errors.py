"""Bad input: one line naming the field and what is allowed, exit code 2, nothing written."""

import subprocess
import sys

import pytest

from architectures import ARCHITECTURES

BAD_RUNS = [
    (["task.sparsty=2"], "task.sparsty: unknown key; allowed:"),
    (["task.sparsity=0"], "task.sparsity: must be in 1..state_size-1 (11), got 0"),
    (["task.state_size=4", "task.sparsity=5"], "task.sparsity: must be in 1..state_size-1 (3)"),
    (["task.n_states=1"], "task.n_states: must be >= 2"),
    (["task.name=cellular_automaton", "task.n_colors=1"], "task.n_colors: must be >= 2"),
    (["task.name=cellular_automaton", "task.n_cells=4", "task.radius=2"],
     "task.n_cells: must be >= 2*radius*rule_applications+1 = 5"),
    (["task.name=sorting"], "task.name: unknown 'sorting'; allowed: linear_map"),
    (["arch.name=lstm"], "arch.name: unknown 'lstm'; allowed: transformer, mlp_mixer"),
    (["train.max_steps=-10"], "train.max_steps: must be >= 1, got -10"),
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
    (["lr=0.1"], "lr: unknown key; allowed: task, arch, train, emergence, trainer, seed"),
    (["sparsity"], "sparsity: expected key=value"),
    (["task.held_out=1.5"], "task.held_out: must be in (0, 1), got 1.5"),
    (["task.held_out=.nan"], "task.held_out: must be in (0, 1), got nan"),
    (["task.held_out=0"], "task.held_out: must be in (0, 1), got 0"),
    (["task.task_seed=some"], "task.task_seed: must be an integer in [0, 2^63) or per_seed"),
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
]


@pytest.mark.parametrize("overrides,message", BAD_RUNS)
def test_bad_run_config(overrides, message, cli, tmp_path):
    out = tmp_path / "run"
    code, captured = cli("run", *overrides, "--out", str(out))
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not out.exists()


def test_bad_task_inspection(cli):
    code, captured = cli("task", "linear_map", "sparsity=12")
    assert code == 2 and captured.err.strip() == (
        "error: task.sparsity: must be in 1..state_size-1 (11), got 12 (s = S makes every token "
        "the sum of the previous state)")


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
    (GOOD.replace("seeds: 1", "seeds: []"), [], "seeds: an empty list"),
    (GOOD.replace("seeds: 1", "seeds: [3, 3]"), [], "seeds: listed twice in [3, 3]"),
    (GOOD.replace("seeds: 1", "seeds: [-1]"), [],
     "seeds: every seed must be an integer in [0, 2^63)"),
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
    (GOOD.replace("seeds: 1", "seeds: three"), [], "seeds: must be a count or a list of seeds"),
    (GOOD + "emergence: {metric: acc}\n", [], "emergence.metric: Invalid value 'acc'"),
    (GOOD + "trainer: {max_steps: 3}\n", [],
     "trainer.max_steps: set by the runner; use train.max_steps"),
    (GOOD + "trainer: {devices: 2, strategy: ddp}\n", [],
     "trainer.strategy: 'ddp' with several devices relaunches the command per rank"),
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
    (GOOD, ["--set", "trainer.accelerator"], "--set trainer.accelerator: expected key=value"),
    (GOOD, ["--set", "=gpu"], "--set =gpu: expected key=value"),
    (GOOD, ["--set", "seeds=0"], "seeds: must be in 1..10000"),
    (GOOD, ["--set", "trainer.max_steps=3"],
     "trainer.max_steps: set by the runner; use train.max_steps"),
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

    busy = tmp_path / "busy"
    busy.mkdir()
    with SweepLock(busy):  # another sweep holds the directory
        code, captured = cli("sweep", str(spec), "--out", str(busy))
    assert code == 2 and "another sweep (pid " in captured.err and "is running" in captured.err
    assert sorted(p.name for p in busy.iterdir()) == [".lock"]


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
