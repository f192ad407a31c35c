"""examples/walkthrough.py runs the whole path (check, compare, read) on a tiny committed board."""

from pathlib import Path

import yaml

from bench.sweeps.spec import load_spec
from bench.sweeps.sweep import run_sweep
from tests.bench.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]
BOARD = {**TINY, "name": "walkboard", "archs": [{"name": "mlp_mixer", "d_model": 32,
                                                 "n_layers": 1}],
         "seeds": 2, "train": {**TINY["train"], "max_steps": 60}}


def test_the_walkthrough_checks_compares_and_reads(tmp_path, monkeypatch, capsys):
    spec = tmp_path / "walkboard.yaml"
    spec.write_text(yaml.safe_dump(BOARD, sort_keys=False))
    run_sweep(load_spec(spec), spec.with_suffix(""), progress=False)
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))
    import architectures

    monkeypatch.setattr(architectures, "ARCHITECTURES", dict(architectures.ARCHITECTURES))
    from examples.walkthrough import main

    main(["--against", str(spec), "--out", str(tmp_path / "cmp"), "--kernel-size", "3"])
    out = capsys.readouterr().out
    mine = "examples.custom_mixer:CausalConvMixer(d_model=32, n_layers=1, kernel_size=3)"
    assert f"check: {mine} passed the mixer contract" in out
    assert "baseline mlp_mixer(d_model=32, n_layers=1): 9,970 parameters" in out
    table = (tmp_path / "cmp" / "compare.md").read_text()
    assert table in out  # the merged table, as written
    rows = [line for line in table.splitlines() if line.startswith("| linear_map")]
    assert [r.split(" | ")[1] for r in rows[:2]] == [
        "`mlp_mixer(d_model=32, n_layers=1)`", f"`{mine}`"]
    summary = out[out.index(table) + len(table):].split("\n")
    assert summary[1].split() == ["seeds", "solved", "heldout_acc", "train_acc"]
    assert sum(line.startswith(mine) or line.startswith("mlp_mixer") for line in summary) == 2
