"""Analysis checkpoints and the exact emergence step: the replay from the checkpoint before the
crossing reproduces the run's weights bit for bit on CPU, and the refined step lies within the
bracketing evaluations."""

import dataclasses

import pytest
import torch

from bench.core.emergence import EmergenceCriterion, EmergenceTracker
from bench.core.rows import survival_sample
from bench.measures.refine import refine
from bench.measures.run import train
from bench.training.checkpoint import AnalysisCheckpoint, analysis_path, analysis_steps
from bench.training.config import build_run_task, load_run_config
from bench.training.run import trainer_options
from tests.records import record

RUN = ["task.state_size=8", "task.sparsity=1", "task.n_states=2", "arch.name=mlp_mixer",
       "arch.d_model=16", "train.eval_every=25", "train.eval_size=128", "train.probe_size=64",
       "train.warmup_steps=20", "train.lr=3e-3", "train.max_steps=400"]


@pytest.fixture(scope="module")
def refined(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("refined") / "r"
    cfg = load_run_config([*RUN, "measure.refine=true", "measure.keep_checkpoints=true"])
    return cfg, run_dir, train(cfg, run_dir, progress=False)


def test_the_refined_step_lies_in_the_bracket_and_the_replay_is_exact(refined):
    cfg, run_dir, result = refined
    assert result["status"] == "emerged"
    evaluated, done = result["steps_to_emergence"], result["refine"]
    assert done["upper"] == evaluated and done["lower"] == evaluated - 25
    assert done["lower"] < result["refined_step"] <= done["upper"]
    assert done["exact"] is True  # replayed weights at `upper` == the run's checkpoint there
    steps = [s for s, _ in done["curve"]]
    assert steps == list(range(done["lower"] + 1, done["upper"] + 1))  # every step evaluated
    passing = [s for s, v in done["curve"] if v >= cfg.emergence.threshold]
    assert passing[0] == result["refined_step"]
    at_upper = dict(result["curve"])[evaluated]
    assert done["curve"][-1][1] == at_upper  # the replay's evaluation there is the run's


def test_checkpoints_kept_are_initialisation_log_spaced_bracket_and_end(refined):
    _, run_dir, result = refined
    evaluated = result["steps_to_emergence"]
    kept = analysis_steps(run_dir)
    assert {int(s) for s in result["checkpoints"]} == set(kept)
    assert {0, 25, 50} <= set(kept)  # initialisation, 1 and 2 evaluations in
    assert {evaluated - 25, evaluated, result["steps"]} <= set(kept)
    logspaced = {0, 25, 50, 100, 200, 400}
    plateau = result["plateau_end"]  # patching's pre model, where a plateau was observed
    assert plateau is None or plateau in kept
    assert set(kept) <= logspaced | {evaluated - 25, evaluated, result["steps"], plateau}
    state = torch.load(analysis_path(run_dir, evaluated), weights_only=True)
    assert state["global_step"] == evaluated and state["optimizer_states"]  # a full checkpoint


def test_a_replay_that_differs_from_the_run_is_reported_not_exact(refined, tmp_path):
    cfg, run_dir, result = refined
    upper = result["steps_to_emergence"]
    copy = tmp_path / "r"
    (copy / "checkpoints").mkdir(parents=True)
    for s in (upper - 25, upper):
        analysis_path(copy, s).write_bytes(analysis_path(run_dir, s).read_bytes())
    state = torch.load(analysis_path(copy, upper), weights_only=True)
    name = next(iter(state["state_dict"]))
    state["state_dict"][name] = state["state_dict"][name] + 1e-6  # not the run's weights
    torch.save(state, analysis_path(copy, upper))
    done = refine(cfg, build_run_task(cfg), copy, upper, trainer_options(cfg, False))
    assert done["exact"] is False and done["refined_step"] == result["refined_step"]


def test_a_replay_from_the_initialisation_checkpoint(refined, tmp_path):
    cfg, run_dir, _ = refined
    done = refine(cfg, build_run_task(cfg), run_dir, 25, trainer_options(cfg, False))
    assert (done["lower"], done["upper"], done["exact"]) == (0, 25, True)
    assert [s for s, _ in done["curve"]] == list(range(1, 26))


def test_refine_alone_keeps_no_checkpoints(tmp_path):
    result = train(load_run_config([*RUN, "measure.refine=true"]), tmp_path / "r",
                   progress=False)
    assert result["status"] == "emerged" and result["refine"]["exact"] is True
    assert result["checkpoints"] == {} and not (tmp_path / "r" / "checkpoints").exists()
    plain = load_run_config(RUN)
    assert load_run_config([*RUN, "measure.refine=true",
                            "measure.keep_checkpoints=true"]).job_id() == plain.job_id()


class FakeTrainer:
    sanity_checking, is_global_zero = False, True

    def __init__(self):
        self.global_step = 0

    def save_checkpoint(self, path, weights_only=False):
        open(path, "wb").close()


def test_bracket_candidates_go_when_a_passing_run_breaks_off(tmp_path):
    crit = EmergenceCriterion(threshold=0.9, consecutive=3)
    tracker = EmergenceTracker(crit, 0.5, 1.0)
    cb = AnalysisCheckpoint(tmp_path, "job", tracker, eval_every=10)
    (tmp_path / "checkpoints").mkdir()
    trainer = FakeTrainer()
    values = {10: 0.5, 20: 0.6, 30: 0.6, 40: 0.6, 50: 0.95, 60: 0.5, 70: 0.6, 80: 0.6,
              90: 0.6, 100: 0.6, 110: 0.95, 120: 0.96, 130: 0.97, 140: 0.99}
    for step, value in values.items():
        trainer.global_step = step
        tracker.update(step, value)
        cb.on_validation_end(trainer, None)
        if step == 50:  # a candidate crossing: its lower side is kept while it lasts
            assert {40, 50} <= set(cb.saved)
        if step == 60:  # it broke off: 40 and 50 go (neither log-spaced)
            assert cb.saved == [10, 20, 40, 60]
        if step == 100:  # the plateau's end so far (0.5 at 60 is <= 10% up) stays
            assert 60 in cb.saved
    assert tracker.status == "emerged" and tracker.step == 110
    cb.on_train_end(trainer, None)
    # 60: the plateau's end, patching's pre model (it came back to 0.5 after a false start)
    assert cb.saved == [10, 20, 40, 60, 80, 100, 110, 140]
    assert tracker.transition()[0] == 60
    assert analysis_steps(tmp_path) == cb.saved


def test_tables_use_the_refined_step_where_a_run_has_one():
    run = record(status="emerged", steps_to_emergence=75, budget_steps=400)
    assert run.emergence_step == 75
    refined = dataclasses.replace(run, refined_step=57)
    assert survival_sample([refined, run]) == ([57, 75], [True, True])
    # a measurement, not part of the criterion (nor of the job id)
    assert "refine" not in {f.name for f in dataclasses.fields(EmergenceCriterion)}


def test_a_sweep_that_keeps_checkpoints_prints_their_cost(tmp_path, capsys):
    import yaml

    from bench.sweeps.spec import load_spec
    from bench.sweeps.sweep import run_sweep
    from tests.bench.conftest import TINY

    spec = {**TINY, "archs": [TINY["archs"][1]], "seeds": 1,
            "train": {**TINY["train"], "max_steps": 40}, "measure": {"keep_checkpoints": True}}
    path = tmp_path / "keep.yaml"
    path.write_text(yaml.safe_dump(spec))
    run_sweep(load_spec(path), tmp_path / "keep", progress=False)
    err = capsys.readouterr().err
    assert "analysis checkpoints (measure.keep_checkpoints): up to " in err and " for 1 runs" in err
    (run,) = (tmp_path / "keep" / "runs").iterdir()
    assert analysis_steps(run) == [0, 20, 40]  # initialisation, 1 and 2 evaluations in
