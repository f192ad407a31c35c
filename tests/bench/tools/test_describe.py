"""`bench describe`: sizes and paths of a config's model without training, one line on bad input."""

import json

import pytest

QUICKSTART = ["task.state_size=12", "task.sparsity=1", "task.n_states=2"]


@pytest.mark.parametrize("arch, params", [("transformer", 101_314), ("mlp_mixer", 76_498)])
def test_parameters_add_up_and_match_the_committed_quickstart(arch, params, cli):
    """The quickstart leaderboard's params column (the runs' own count) for the same configs."""
    extra = ["arch.n_heads=1"] if arch == "mlp_mixer" else []
    code, captured = cli("describe", *QUICKSTART, f"arch.name={arch}", *extra, "--json")
    assert code == 0, captured.err
    d = json.loads(captured.out)
    parts = d["embedding"] + d["head"] + sum(sum(layer.values()) for layer in d["layers"])
    assert d["parameters"] == parts == params and len(d["layers"]) == 2


def test_recurrent_mixers_report_their_state_and_path(cli):
    code, captured = cli("describe", "arch.name=mamba", "arch.expand=1", "arch.d_model=32")
    assert code == 0, captured.err
    # d_inner = 32: an SSM state of 32 x 16 plus a conv window of 32 x 3, per layer
    assert "state per layer: 608 numbers per sequence" in captured.out
    assert "kernel path on cpu: reference" in captured.out
    assert "mixer contract: passed" in captured.out


def test_bad_input_is_one_line(cli, tmp_path, monkeypatch):
    (tmp_path / "peeks.py").write_text(  # reads the next token, only in eval mode
        "import torch\n"
        "from torch import nn\n"
        "class M(nn.Module):\n"
        "    def __init__(self, d_model, seq_len, layer_idx):\n"
        "        super().__init__()\n"
        "    def forward(self, x):\n"
        "        return x if self.training else x + torch.roll(x, -1, dims=1)\n")
    (tmp_path / "broken_fwd.py").write_text(
        "from torch import nn\n"
        "class M(nn.Module):\n"
        "    def __init__(self, d_model, seq_len, layer_idx):\n"
        "        super().__init__()\n"
        "    def forward(self, x):\n"
        "        raise RuntimeError('no kernel')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for args, message in [(["arch.name=broken_fwd:M"],
                           "arch.name: mixer 'broken_fwd:M' failed in forward: RuntimeError: "
                           "no kernel"),
                          (["arch.name=peeks:M"], "arch.name: mixer 'peeks:M' (eval mode) is "
                                                  "not causal: output 0 depends on input 1"),
                          (["arch.d_model=0"], "arch.d_model: must be >= 1")]:
        code, captured = cli("describe", *args)
        lines = captured.err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and message in lines[0], lines
