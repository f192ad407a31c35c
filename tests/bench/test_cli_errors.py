"""Bad input: one line naming the field and what is allowed, exit code 2, nothing written."""

import subprocess
import sys

import pytest

from architectures import ARCHITECTURES

BAD_RUNS = [
    (["task.sparsty=2"], "task.sparsty: unknown key; allowed:"),
    (["task.sparsity=0"], "task.sparsity: must be in 1..state_size (6), got 0"),
    (["task.state_size=4", "task.sparsity=5"], "task.sparsity: must be in 1..state_size (4)"),
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
    code, captured = cli("task", "linear_map", "sparsity=9")
    assert code == 2 and captured.err.strip() == (
        "error: task.sparsity: must be in 1..state_size (6), got 9")


def test_bad_sweep_specs(cli, tmp_path):
    cases = {
        "typo.yaml": ("name: x\ntask: {name: linear_map}\narchs: [{name: transformer}]\nseedz: 2\n",
                      "seedz: unknown key; allowed:"),
        "empty.yaml": ("name: x\ntask: {name: linear_map}\narchs: []\n",
                       "archs: must list at least one architecture"),
        "arch.yaml": ("task: {name: linear_map}\narchs: [{name: transformer, n_heads: -1}]\n",
                      "archs[0]: arch.n_heads: must be >= 1"),
        "task.yaml": ("task: 3\narchs: [{name: transformer}]\n",
                      "task: must be a mapping or a non-empty list of mappings"),
        "dup.yaml": ("task: {name: linear_map}\narchs: [{name: mlp_mixer}, {name: mlp_mixer}]\n",
                     "archs: two entries resolve to the same architecture config"),
    }
    for name, (text, message) in cases.items():
        spec = tmp_path / name
        spec.write_text(text)
        code, captured = cli("sweep", str(spec))
        assert code == 2 and message in captured.err and len(captured.err.splitlines()) == 1
        assert not spec.with_suffix("").exists()
    code, captured = cli("sweep", str(tmp_path / "missing.yaml"))
    assert code == 2 and "no such sweep spec" in captured.err


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
