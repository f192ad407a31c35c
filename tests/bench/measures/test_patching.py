"""`bench patch`: attention patching between a run's checkpoints. The patch really replaces
probabilities (a model patched with its own is unchanged; the pre model with every head from
the post model computes with the post model's attention), the report has every head, the greedy
sets and the ground truth, a plug-in that declares PatchesAttention works, and bad input is one
line with nothing written."""

import json
import shutil

import pytest

from architectures import ContractError, check_mixer
from bench.measures.patching import Patcher
from bench.measures.run import train
from bench.training.checkpoint import analysis_path, analysis_steps
from bench.training.config import load_run_config

RUN = ["task.state_size=8", "task.sparsity=1", "task.n_states=2", "arch.d_model=32",
       "arch.n_layers=1", "train.eval_every=20", "train.eval_size=128", "train.batch_size=32",
       "train.lr=0.01", "train.warmup_steps=20", "measure.keep_checkpoints=true"]

PLUGIN = '''
import torch
from torch import nn
from architectures import PatchesAttention


class OneHead(PatchesAttention, nn.Module):
    def __init__(self, d_model: int, seq_len: int, layer_idx: int, *, honest: bool = True):
        super().__init__()
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.honest = honest

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        L = x.shape[1]
        mask = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
        scores = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5).masked_fill(~mask, float("-inf"))
        probs = scores.softmax(-1)[:, None]
        used = self.use_attention(probs)
        return ((used if self.honest else probs) @ v[:, None])[:, 0]
'''


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("patch") / "run"
    # PyTorch's defaults: a plateau to patch from (the reference initialisation has none here)
    result = train(load_run_config([*RUN, "arch.name=transformer", "arch.init=torch",
                                    "train.max_steps=300"]), out,
                   progress=False)
    assert result["status"] == "emerged"
    return out


def test_the_report_has_every_head_the_greedy_sets_and_the_ground_truth(run_dir, cli):
    code, captured = cli("patch", str(run_dir))
    assert code == 0, captured.err
    report = json.loads((run_dir / "patch" / "patch.json").read_text())
    result = json.loads((run_dir / "result.json").read_text())
    assert report["post"]["step"] >= result["steps_to_emergence"] > report["pre"]["step"]
    assert report["pre"]["p"] < report["post"]["p"]
    # the default pre checkpoint sits on the plateau where one was observed
    assert report["plateau_end"] == result["plateau_end"] is not None
    assert report["on_plateau"] and report["pre"]["step"] == result["plateau_end"]  # kept
    assert [(h["layer"], h["head"]) for h in report["heads"]] == [(0, h) for h in range(4)]
    greedy = report["greedy"]
    assert [g["k"] for g in greedy] == [1, 2, 3, 4]
    best_single = max(report["heads"], key=lambda h: h["dp"])
    assert greedy[0]["p"] == pytest.approx(report["pre"]["p"] + best_single["dp"])
    assert [t["where"] for t in report["ground_truth"]] == ["layer 0", "all layers"]
    for entry in (*report["heads"], *greedy, *report["ground_truth"]):
        if entry.get("restored") is not None and "p" in entry:
            gap = report["post"]["p"] - report["pre"]["p"]
            assert entry["restored"] == pytest.approx((entry["p"] - report["pre"]["p"]) / gap)
    text = (run_dir / "patch" / "patch.md").read_text()
    assert text in captured.out and "## Greedy head sets" in text
    assert (run_dir / "patch" / "patch.png").stat().st_size > 1000


def test_the_curve_patches_from_every_kept_checkpoint_from_the_plateau_on(run_dir, cli):
    code, captured = cli("patch", str(run_dir), "--curve")
    assert code == 0, captured.err
    curve = json.loads((run_dir / "patch" / "curve.json").read_text())
    result = json.loads((run_dir / "result.json").read_text())
    post = curve["post"]["step"]
    assert post >= result["steps_to_emergence"]
    pres = [q["pre"] for q in curve["points"]]
    assert pres == [s for s in analysis_steps(run_dir) if result["plateau_end"] <= s < post]
    assert curve["points"][0]["on_plateau"] and not curve["points"][-1]["on_plateau"] or \
        len(pres) == 1
    # its first point is the default patch
    cli("patch", str(run_dir))
    single = json.loads((run_dir / "patch" / "patch.json").read_text())
    assert single["pre"]["step"] == pres[0]
    assert curve["points"][0]["all_heads"] == pytest.approx(single["greedy"][-1]["restored"])
    assert "| pre | on plateau |" in captured.out
    assert (run_dir / "patch" / "curve.png").stat().st_size > 1000
    code, captured = cli("patch", str(run_dir), "--curve", "--pre", str(pres[0]))
    assert code == 2 and "--pre: --curve patches from every kept checkpoint" in captured.err
    code, captured = cli("patch", str(run_dir), "--curve", "--post", str(pres[0]))
    assert code == 2 and f"--post: step {pres[0]} must come after step {pres[0]}, the default " \
        "pre checkpoint" in captured.err


def test_a_patch_replaces_the_probabilities(run_dir):
    kept = analysis_steps(run_dir)
    patcher = Patcher(run_dir, kept[0], kept[-1])
    every = frozenset(patcher.heads)
    pre, post = patcher.score("pre"), patcher.score("post")
    assert patcher.score("pre", frozenset()) == pre  # no patch: unchanged
    patched = patcher.score("pre", every)
    assert patched != pre  # the post model's attention changes the pre model's answers
    patcher.models["pre"] = patcher.models["post"]  # the post model patched with its own
    patcher.layers = [m for m in patcher.models["post"].model.modules()
                      if hasattr(m, "attention_patch")]
    assert patcher.score("pre", every) == pytest.approx(post, abs=1e-6)


def test_a_plugin_that_declares_patchable_attention_is_patched(tmp_path, monkeypatch, cli):
    (tmp_path / "onehead.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    import architectures

    monkeypatch.setattr(architectures, "ARCHITECTURES", dict(architectures.ARCHITECTURES))
    run = tmp_path / "run"
    train(load_run_config([*RUN, "arch.name=onehead:OneHead", "train.max_steps=40"]), run,
          progress=False)
    code, captured = cli("patch", str(run), "--pre", "0", "--post", "40")
    assert code == 0, captured.err
    report = json.loads((run / "patch" / "patch.json").read_text())
    assert [(h["layer"], h["head"]) for h in report["heads"]] == [(0, 0)]
    cheat = load_run_config(["arch.name=onehead:OneHead", "arch.honest=false"])
    with pytest.raises(ContractError, match="declares PatchesAttention but does not compute "
                                            "with the probabilities use_attention returns"):
        check_mixer(cheat.arch, 12)


def test_bad_input_is_one_line_and_writes_nothing(run_dir, tmp_path, cli):
    plain = tmp_path / "plain"
    train(load_run_config([*RUN[:-1], "arch.name=transformer", "train.max_steps=20"]), plain,
          progress=False)
    mixer = tmp_path / "mixer"
    train(load_run_config([*RUN, "arch.name=mlp_mixer", "train.max_steps=20"]), mixer,
          progress=False)
    before = sorted(p.name for p in run_dir.rglob("*"))
    first, last = analysis_steps(run_dir)[0], analysis_steps(run_dir)[-1]
    cases = [
        ([str(tmp_path / "nothing")], "RUN_DIR: " + str(tmp_path / "nothing") +
         " holds no finished run (result.json)"),
        ([str(plain)], f"RUN_DIR: {plain} has no analysis checkpoints; train it with "
                       "measure.keep_checkpoints=true"),
        ([str(run_dir), "--pre", "7", "--post", str(last)],
         "--pre: no checkpoint at step 7; kept: "),
        ([str(run_dir), "--pre", str(last), "--post", str(first)],
         f"--pre: step {last} must come before"),
        ([str(mixer), "--pre", "0", "--post", "20"], "arch.name: mixer 'mlp_mixer' exposes no "
                                                     "attention probabilities to patch"),
        ([str(mixer)], "--pre/--post: the run did not emerge (censored); give both steps"),
    ]
    # garbage where a run should be: result.json not JSON, an empty object, a garbage checkpoint
    for name, text in (("garbage", "garbage"), ("empty", "{}"), ("list", "[1]")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(text)
        cases.append(([str(tmp_path / name)], f"RUN_DIR: {tmp_path / name}/result.json is not a "
                                              "run's result"))
    shutil.copytree(run_dir, tmp_path / "torn", ignore=shutil.ignore_patterns("patch"))
    torn = analysis_path(tmp_path / "torn", first)
    torn.write_bytes(b"garbage")
    cases.append(([str(tmp_path / "torn"), "--pre", str(first), "--post", str(last)],
                  f"RUN_DIR: {torn} is not a checkpoint of this run (UnpicklingError on loading"))
    for args, message in cases:
        code, captured = cli("patch", *args)
        lines = captured.err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {message}"), lines
    assert not any((p / "patch").exists() for p in tmp_path.iterdir())
    assert sorted(p.name for p in run_dir.rglob("*")) == before
