"""Screened evaluation: a fixed subset at every evaluation, the whole set only where the
outcome could turn on it. The emergence step, status and width equal those of evaluating the
whole set every time, and every whole evaluation reads the same values."""

import math

import torch

from bench.core.emergence import SCREEN_MARGIN, EmergenceCriterion, EmergenceTracker
from bench.measures.run import train
from bench.training.config import load_run_config
from datamodules import TASKS, build_task

RUN = ["task.state_size=8", "task.sparsity=1", "task.n_states=2", "arch.d_model=32",
       "train.eval_every=25", "train.warmup_steps=20", "train.max_steps=600", "train.lr=3e-3",
       "emergence.threshold=0.95", "measure.influence_size=0", "seed=0"]


def test_the_whole_set_is_needed_only_near_the_threshold_or_in_a_streak():
    tracker = EmergenceTracker(EmergenceCriterion(threshold=0.9), baseline=0.5, solved=1.0)
    edge = 0.9 - SCREEN_MARGIN * 0.5  # the threshold's progress less the margin, in accuracy
    assert not tracker.needs_full(0.6) and not tracker.needs_full(edge - 0.01)
    assert tracker.needs_full(edge + 0.01) and tracker.needs_full(math.nan)
    tracker.update(100, 0.95)  # a streak under way: the next one decides it
    assert tracker.needs_full(0.55)
    tracker.update(150, 0.96)
    assert tracker.status == "emerged" and not tracker.needs_full(0.95)  # decided
    loss = EmergenceTracker(EmergenceCriterion(metric="val/loss", threshold=0.1), 0.7, 0.0)
    assert not loss.needs_full(0.6) and loss.needs_full(0.2)  # lower is better


def test_the_screen_comes_first_and_keeps_the_held_out_order():
    cfg = TASKS["linear_map"](state_size=8, sparsity=1, n_states=2)
    whole = build_task(cfg, seed=0)
    screened = build_task(cfg, seed=0, screen_size=20)
    a, b = whole.eval_set(torch.device("cpu")), screened.eval_set(torch.device("cpu"))
    assert torch.equal(a.tokens[~a.probe], b.tokens[~b.probe])
    assert torch.equal(a.tokens[a.probe], b.tokens[b.probe])
    assert b.probe[:30].tolist() == [False] * 20 + [True] * 10
    chunks = screened.eval_chunks()
    assert screened.screen_chunks() == 1 and chunks[0] == (0, 30) and chunks[-1][1] == len(b.tokens)
    assert whole.screen_chunks() == 0


def test_a_screen_of_long_sequences_holds_at_most_its_tokens():
    from datamodules.base import SCREEN_MIN_ROWS, SCREEN_TOKENS

    for state_size, rows in ((64, SCREEN_TOKENS // 128), (512, SCREEN_MIN_ROWS)):
        cfg = TASKS["linear_map"](state_size=state_size, sparsity=1, n_states=2)
        task = build_task(cfg, seed=0, eval_size=256, screen_size=128)
        es = task.eval_set(torch.device("cpu"))
        assert task.n_tokens == 2 * state_size
        assert es.probe[:rows + rows // 2].tolist() == [False] * rows + [True] * (rows // 2)
        assert task.screen_chunks() == 1 and task.eval_chunks()[0] == (0, rows + rows // 2)


def test_screened_runs_emerge_at_the_same_step_as_whole_evaluations(tmp_path):
    whole = train(load_run_config([*RUN, "runtime.screen_size=0"]), tmp_path / "whole",
                  progress=False)
    screened = train(load_run_config([*RUN, "runtime.screen_size=32"]), tmp_path / "screened",
                     progress=False)
    assert whole["status"] == screened["status"] == "emerged"
    for key in ("steps_to_emergence", "transition_width", "plateau_end", "rise_step"):
        assert whole[key] == screened[key], key
    full = screened["curves"]["val/full"]
    assert full[0] == 1 and full[-1] == 1 and 0 in full  # some evaluations were screens only
    assert all(v == 1 for v in whole["curves"]["val/full"])
    for i, f in enumerate(full):
        if f == 1:  # a whole evaluation reads what evaluating everything every time reads
            assert math.isclose(screened["curves"]["val/token_acc"][i],
                                whole["curves"]["val/token_acc"][i], abs_tol=1e-6)
        # the screen's reading is kept beside it; where only the screen ran, it is the value
        screen = screened["curves"]["val/screen"][i]
        if f == 0:
            assert screen == screened["curves"]["val/token_acc"][i]
        elif i > 0:  # a fixed subset of the same set: close to it, and a reading of it
            assert 0 <= screen <= 1 and abs(screen - whole["curves"]["val/token_acc"][i]) < 0.2
    assert "val/screen" not in whole["curves"]  # no screen, no reading


def test_the_screen_is_at_most_an_eighth_of_the_sequences_trained_between_evaluations():
    from bench.training.config import screen_size, task_instance

    def rows(*overrides):
        cfg = load_run_config(list(overrides))
        return task_instance(cfg.task, cfg).screen_rows

    assert rows() == 128 + 64  # the default: batch 64 every 50 steps trains 3,200 sequences
    assert rows("train.batch_size=8") == 50 + 25  # 400 sequences between evaluations
    assert rows("train.batch_size=8", "train.eval_every=10") == 16 + 8  # never fewer than 16
    assert rows("train.batch_size=8", "runtime.screen_size=0") == 0  # no screen stays none
    cfg = load_run_config(["train.batch_size=1", "train.eval_every=1", "runtime.screen_size=4"])
    assert screen_size(cfg) == 4  # a smaller screen asked for is kept
