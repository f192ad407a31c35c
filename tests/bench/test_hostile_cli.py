"""The last hostile inputs of an adversarial rerun of the commands (issue 59): each is one line on
stderr, exit code 2, and nothing written."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LEAKY = '''from torch import nn
class Detached(nn.Module):
    def __init__(self, d_model: int, seq_len: int, layer_idx: int):
        super().__init__(); self.lin = nn.Linear(d_model, d_model)
    def forward(self, x):
        y = self.lin(x).clone()
        if x.shape[1] > 4: y[:, 3] = y[:, 3] + x[:, 4].detach()
        return y
'''


def assert_one_line(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_a_mixer_that_breaks_the_contract_stops_before_anything_is_written(
        tmp_path, command, cli, monkeypatch):
    (tmp_path / "leakmix.py").write_text(LEAKY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "out"
    if command == "compare":
        code, captured = cli("compare", "arch.name=leakmix:Detached", "--against",
                             str(ROOT / "leaderboards" / "quickstart.yaml"), "--out", str(out),
                             "--no-progress")
    else:
        (tmp_path / "s.yaml").write_text(
            "name: s\ntask: {name: linear_map, state_size: 8, n_states: 2}\n"
            "archs:\n  - {name: transformer, d_model: 16}\n  - {name: 'leakmix:Detached'}\n"
            "seeds: 1\ntrain: {max_steps: 20, eval_every: 10}\n")
        code, captured = cli("sweep", "s.yaml", "--out", str(out))
    assert_one_line(code, captured.err, "arch.name", "not causal", "changed output 3")
    assert not out.exists()


def test_a_config_path_that_is_a_directory(tmp_path, cli):
    code, captured = cli("run", "--config", str(tmp_path))
    assert_one_line(code, captured.err, "a directory")


def test_a_results_database_that_is_a_directory(tmp_path, cli):
    (tmp_path / "results.sqlite").mkdir()
    code, captured = cli("status", str(tmp_path))
    assert_one_line(code, captured.err, "a directory")
    assert [p.name for p in tmp_path.iterdir()] == ["results.sqlite"]


def test_more_values_than_any_config_needs(tmp_path, cli):
    values = ",".join(map(str, range(10_001)))
    code, captured = cli("run", f"task.state_size=[{values}]")
    assert_one_line(code, captured.err, "task.state_size:", "more than 10,000 values")
    (tmp_path / "big.yaml").write_text("name: big\ntask: {name: linear_map}\narchs:\n"
                                       f"  - {{name: transformer}}\nseeds: [{values}]\n")
    code, captured = cli("sweep", str(tmp_path / "big.yaml"), "--out", str(tmp_path / "o"))
    assert_one_line(code, captured.err, "more than 10,000 values")
    assert not (tmp_path / "o").exists()


def test_a_precision_this_machine_lacks_is_one_line_without_lightnings_warning(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("16-mixed is available with CUDA")
    done = subprocess.run(  # a subprocess: Lightning's warning goes to the real stderr
        [sys.executable, "-m", "bench", "run", "trainer.precision=16-mixed", "--out",
         str(tmp_path / "r")], cwd=tmp_path, capture_output=True, text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert_one_line(done.returncode, done.stderr, "trainer.precision", "bf16-mixed")
    assert not (tmp_path / "r").exists()


def test_a_site_whose_readme_verdict_section_has_no_table(tmp_path, cli):
    import shutil

    shutil.copytree(ROOT / "leaderboards" / "quickstart", tmp_path / "leaderboards" / "quickstart")
    shutil.copy(ROOT / "leaderboards" / "quickstart.yaml", tmp_path / "leaderboards")
    (tmp_path / "README.md").write_text("# x\n\n## What the leaderboards show\n\nno table\n")
    code, captured = cli("site", "--root", str(tmp_path), "--out", str(tmp_path / "site"))
    assert_one_line(code, captured.err, "no table")
    assert not (tmp_path / "site").exists()
