"""The head screen: planted heads are classified right, a real run's checkpoints are screened end
to end, and bad input is one line."""

import json
import shutil

import pytest
import torch
from torch import nn

from architectures import PatchesAttention
from bench.core.heads import CLASSES, THRESHOLDS, sink_course
from bench.measures.circuits import Screen, class_keys, classify, parse_thresholds
from bench.training.checkpoint import analysis_path, analysis_steps
from datamodules import build_task
from datamodules.config import InductionConfig

PLANTED = ("previous", "first", "self", "")  # head 3 spreads evenly: no class


class Planted(PatchesAttention, nn.Module):
    """Four heads with fixed attention: the previous token, the first token, itself, uniform."""

    def __init__(self, d: int):
        super().__init__()
        self.v = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, D = x.shape
        q = torch.arange(L)
        causal = (q[None, :] <= q[:, None]).float()
        probs = torch.zeros(B, 4, L, L)
        probs[:, 0, q, (q - 1).clamp_min(0)] = 1.0
        probs[:, 1, :, 0] = 1.0
        probs[:, 2, q, q] = 1.0
        probs[:, 3] = causal / causal.sum(-1, keepdim=True)
        probs = self.use_attention(probs)
        v = self.v(x).view(B, L, 4, D).transpose(1, 2)
        return self.out((probs @ v).transpose(1, 2).reshape(B, L, 4 * D))


class Model(nn.Module):
    def __init__(self, vocab: int, d: int = 8):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.mix = Planted(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        return self.head(x + self.mix(x))


def test_planted_heads_are_classified_right():
    torch.manual_seed(0)
    task = build_task(InductionConfig(vocab_size=12, length=30, segment=5), seed=0)
    tokens = task.sample(200, torch.Generator().manual_seed(0))
    module = nn.Module()
    module.model = Model(task.vocab_size)
    screen = Screen(module, task, tokens)
    ratios = screen.ratios(class_keys(task, tokens))
    assert ratios.shape == (1, 4, len(CLASSES))
    assert classify(ratios, THRESHOLDS) == [list(PLANTED)]
    uniform = ratios[0, 3]
    assert torch.allclose(uniform, torch.ones(len(CLASSES)), atol=0.35)  # no preference
    pr = screen.participation()
    assert pr.shape == (1, 4)
    assert pr[0, 1] == 0  # the sink head writes the first token's value everywhere: no variance
    assert ((pr[0, [0, 2, 3]] >= 1) & (pr[0, [0, 2, 3]] <= 8 + 1e-4)).all()
    base = screen.loss()
    every = {0: torch.tensor([True, True, True, True])}
    assert screen.loss(every) != base
    # every planted head's pattern is positional, so its mean over the batch is the pattern
    # itself: mean-pattern ablation leaves the model as it is, zeroing does not
    assert screen.loss(every, mean=True) == pytest.approx(base, rel=1e-5)
    mean = screen.mean_attention()[0]
    assert torch.allclose(mean.sum(-1), torch.ones(4, task.seq_len))
    assert (mean.triu(1) == 0).all()  # still causal


def test_thresholds_are_checked():
    assert parse_thresholds(["induction=20"])["induction"] == 20
    for bad in ["induction=1", "first=0.5", "first=nan", "first=inf", "first", "sink=30",
                "first=abc"]:
        with pytest.raises(Exception, match="--threshold"):
            parse_thresholds([bad])


def test_the_one_class_rule_files_a_parking_induction_head_under_induction():
    # an induction head (200x) that also parks on the first token (65x); the multi-label view
    # (bench.core.heads.sink_course) counts it as a sink too
    ratios = torch.ones(1, 2, len(CLASSES))
    ratios[0, 0, CLASSES.index("induction")] = 200
    ratios[0, 0, CLASSES.index("first")] = 65
    ratios[0, 1, CLASSES.index("first")] = 31
    assert classify(ratios, THRESHOLDS) == [["induction", "first"]]


@pytest.fixture(scope="module")
def induction_run(tmp_path_factory):
    from bench.measures.run import train
    from bench.training.config import load_run_config

    out = tmp_path_factory.mktemp("circuits") / "run"
    cfg = load_run_config(["task.name=induction", "task.vocab_size=8", "task.length=21",
                           "task.segment=4", "task.n_repeats=1", "arch.name=transformer",
                           "arch.d_model=16", "arch.n_layers=2", "arch.n_heads=2",
                           "arch.head_dim=8", "train.max_steps=40", "train.eval_every=10",
                           "train.eval_size=64", "train.probe_size=16",
                           "measure.keep_checkpoints=true", "measure.circuits=true",
                           "emergence.threshold=0.5"])
    train(cfg, out, progress=False)
    return out


def test_a_run_with_train_circuits_keeps_the_summary(induction_run):
    from bench.measures.circuits import SUMMARY_KEYS

    result = json.loads((induction_run / "result.json").read_text())
    summary = result["circuits"]
    assert set(SUMMARY_KEYS) <= set(summary) and summary["sequences"] == 2000
    kept = sorted(int(p.stem.split("=")[1])
                  for p in (induction_run / "checkpoints").glob("step=*.ckpt"))
    assert [s["step"] for s in summary["steps"]] == kept and len(kept) >= 3
    assert (induction_run / "circuits" / "circuits.md").is_file()
    # the ratios are kept (rounded), so the multi-label sink view reads the same from result.json
    full = json.loads((induction_run / "circuits" / "circuits.json").read_text())["steps"]
    for kept_step, step in zip(summary["steps"], full):
        assert torch.allclose(torch.tensor(kept_step["ratios"]), torch.tensor(step["ratios"]),
                              rtol=1e-3)
    assert sink_course(summary["steps"]) == sink_course(full)
    ablation = summary["ablation"]
    for key in ("dloss_induction", "dloss_control", "dloss_induction_mean", "dloss_control_mean"):
        assert ablation[key] is None or ablation[key] == ablation[key]  # a number, not NaN
    assert (ablation["dloss_induction"] is None) == (ablation["dloss_induction_mean"] is None)


def test_train_circuits_needs_checkpoints_and_notes_other_tasks(tmp_path):
    from bench.core.errors import ConfigError
    from bench.measures.run import circuits_summary
    from bench.training.config import load_run_config

    with pytest.raises(ConfigError, match="circuits: needs keep_checkpoints=true"):
        load_run_config(["measure.circuits=true"])
    from tests.records import record

    run = record(config=load_run_config(["task.state_size=8"]).to_dict())
    (tmp_path / "result.json").write_text(json.dumps(run.to_json()))
    assert circuits_summary(tmp_path).startswith("not screened: RUN_DIR: the head screen needs")


def test_a_run_is_screened_over_its_checkpoints(cli, induction_run):
    code, captured = cli("circuits", str(induction_run), "--sequences", "64",
                         "--threshold", "induction=20")
    assert code == 0, captured.err
    report = json.loads((induction_run / "circuits" / "circuits.json").read_text())
    kept = sorted(int(p.stem.split("=")[1])
                  for p in (induction_run / "checkpoints").glob("step=*.ckpt"))
    assert [s["step"] for s in report["steps"]] == kept and kept[0] == 0
    assert report["thresholds"]["induction"] == 20 and report["sequences"] == 64
    for s in report["steps"]:
        assert len(s["classes"]) == 2 and all(len(layer) == 2 for layer in s["classes"])
        assert all(c in ("", *CLASSES) for layer in s["classes"] for c in layer)
    assert set(report["overall"]) == set(CLASSES) == set(report["formation"])
    for c, step in report["formation"].items():  # the first checkpoint with a head of the class
        first = [s["step"] for s in report["steps"] if any(c in layer for layer in s["classes"])]
        assert step == (first[0] if first else None)
    assert report["sink_shape"] in ("none", "gradual", "jump")
    assert (induction_run / "circuits" / "circuits.png").stat().st_size > 0
    assert "# Head screen" in captured.out


def test_bad_input_is_one_line_and_writes_nothing(cli, induction_run, tmp_path):
    code, captured = cli("circuits", str(induction_run), "--threshold", "first=1")
    assert code == 2 and "--threshold: first must be a number > 1" in captured.err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, captured = cli("circuits", str(empty))
    assert code == 2 and "holds no finished run" in captured.err
    assert not (empty / "circuits").exists()
    bare = tmp_path / "bare"
    bare.mkdir()
    result = json.loads((induction_run / "result.json").read_text())
    (bare / "result.json").write_text(json.dumps(result))
    code, captured = cli("circuits", str(bare))
    assert code == 2 and "no analysis checkpoints" in captured.err
    for text in ("garbage", "{}", '{"config": 5}'):
        (bare / "result.json").write_text(text)
        code, captured = cli("circuits", str(bare))
        assert code == 2 and captured.err.strip().startswith(
            f"error: RUN_DIR: {bare}/result.json is not a run's result"), captured.err
    torn = tmp_path / "torn"
    shutil.copytree(induction_run, torn, ignore=shutil.ignore_patterns("circuits"))
    analysis_path(torn, analysis_steps(torn)[0]).write_bytes(b"garbage")
    code, captured = cli("circuits", str(torn))
    assert code == 2 and len(captured.err.strip().splitlines()) == 1 and (
        "is not a checkpoint of this run (UnpicklingError on loading it)") in captured.err
    assert not (torn / "circuits").exists()
    result["config"]["task"] = {"name": "linear_map"}
    (bare / "result.json").write_text(json.dumps(result))
    code, captured = cli("circuits", str(bare))
    assert code == 2 and "needs a run on the induction task" in captured.err
    assert not (bare / "circuits").exists()
