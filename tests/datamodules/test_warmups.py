"""The pre-pretraining corpora obey their rules: Dyck sequences are balanced, bounded and closed
where forced by the matching bracket; every NCA sequence follows one function of 3x3 windows.
Their held-out parts never reach training, and bad input is one line."""

import json

import pytest
import torch

from datamodules import TASKS, build_task
from datamodules.nca import draw_networks, nca_step

CPU = torch.device("cpu")


def dyck(**fields):
    return build_task(TASKS["dyck"](**fields), batch_size=64, seed=fields.pop("seed", 0))


def nca(**fields):
    return build_task(TASKS["nca"](**fields), batch_size=64, seed=0)


def reference_read(seq: list[int], k: int) -> list[tuple[int, int]]:
    """(depth, position of the innermost open bracket) after each token, by a plain stack."""
    stack, out = [], []
    for i, t in enumerate(seq):
        if t < k:
            stack.append((t, i))
        else:
            assert stack and stack[-1][0] == t - k, "a close that does not match"
            stack.pop()
        out.append((len(stack), stack[-1][1] if stack else -1))
    return out


@pytest.mark.parametrize("fields", [{}, {"n_types": 3, "max_depth": 3, "length": 20},
                                    {"n_types": 1, "max_depth": 10, "length": 40, "held_out": 0.4}])
def test_dyck_sequences_are_balanced_bounded_and_closed_by_the_matching_bracket(fields):
    task = dyck(**fields)
    c = task.config
    tokens = task.sample(300, torch.Generator().manual_seed(0))
    train = task.draw(300, torch.Generator().manual_seed(1))
    for seq in torch.cat([tokens, train]).tolist():
        read = reference_read(seq, c.n_types)
        assert read[-1] == (0, -1) and max(d for d, _ in read) <= c.max_depth
    trace = task.trace(tokens)
    for seq, depth, top, forced in zip(tokens.tolist(), trace.depth.tolist(),
                                       trace.top_pos.tolist(), trace.forced.tolist()):
        read = reference_read(seq, c.n_types)
        assert depth == [d for d, _ in read] and top == [p for _, p in read]
        for i in range(len(seq) - 1):
            left = len(seq) - 1 - i
            assert forced[i] == (depth[i] > 0 and depth[i] in (left, c.max_depth))
            if forced[i]:  # the next token is the closer of the innermost open bracket
                assert seq[i + 1] == seq[top[i]] + c.n_types


def test_dyck_pattern_points_at_the_bracket_a_forced_close_matches():
    task = dyck()
    tokens = task.eval_tokens()[:50]
    pattern = task.patterns(tokens)  # (N, L, L)
    counted = task.eval_set(CPU).counted[:50]
    n, p = counted.nonzero()[0].tolist()
    q = int(pattern[n, p].argmax())
    assert pattern[n, p].sum() == 1 and tokens[n, p + 1] == tokens[n, q] + task.config.n_types
    assert task.candidates(pattern)[n, p, q]  # it may be the current token itself


def test_dyck_held_out_stacks_never_reach_training_and_only_they_count():
    task = dyck()
    assert task.leaks(range(300)) == 0
    total, held = task.held_counts()
    assert total == 4 + 8 + 16 and 0 < held < total
    free = task.sample(2000, torch.Generator().manual_seed(3))
    assert task.trace(free).held.any(1).float().mean() > 0.2  # the free generator holds them
    es = task.eval_set(CPU)
    held_rows = es.counted[~es.probe]
    trace = task.trace(es.tokens[~es.probe])
    assert held_rows.any(1).all()
    assert torch.equal(held_rows, (trace.forced & trace.held)[:, :-1])
    probe = task.trace(es.tokens[es.probe])
    assert torch.equal(es.counted[es.probe], probe.forced[:, :-1])  # like with like
    assert not probe.held.any()


def test_a_dyck_task_that_trains_on_free_sequences_is_caught(monkeypatch):
    task = dyck()
    monkeypatch.setattr(task, "training_sequences", task.sample)
    assert task.leaks(range(5)) > 0


def test_dyck_posterior_is_the_free_generator():
    task = dyck(p_open=0.3)
    tokens = task.eval_tokens()[:40]
    post = task.next_token_posterior(tokens)  # (N, L, V)
    assert torch.allclose(post.sum(-1), torch.ones(40, task.seq_len))
    p_actual = post.gather(-1, tokens[:, 1:, None])[..., 0]
    trace = task.trace(tokens)
    forced, depth = trace.forced[:, :-1], trace.depth[:, :-1]
    assert (p_actual[forced] == 1).all()
    opens = tokens[:, 1:] < task.config.n_types
    assert torch.allclose(p_actual[opens & (depth == 0)], torch.tensor(0.5))
    assert torch.allclose(p_actual[opens & (depth > 0) & ~forced], torch.tensor(0.15))
    assert torch.allclose(p_actual[~opens & ~forced], torch.tensor(0.7))
    refs = task.references()
    assert refs["ceiling"]["token_acc"] == 1.0 and refs["no_context"]["token_acc"] < 0.8


def test_nca_transitions_are_one_function_of_the_3x3_window_per_sequence():
    task = nca(height=4, width=5, n_colors=3, n_states=4)
    c = task.config
    tokens = task.sample(200, torch.Generator().manual_seed(0))
    states = tokens.view(200, c.n_states, c.height, c.width)
    rules = []
    for seq in states:
        rule: dict[tuple, int] = {}
        for t in range(c.n_states - 1):
            x = seq[t]
            for i in range(c.height):
                for j in range(c.width):
                    window = tuple(int(x[(i + di) % c.height, (j + dj) % c.width])
                                   for di in (-1, 0, 1) for dj in (-1, 0, 1))
                    assert rule.setdefault(window, int(seq[t + 1, i, j])) == seq[t + 1, i, j]
        rules.append(rule)
    # rules differ between sequences: some window maps to different colours in two of them
    shared = [w for w in rules[0] if any(w in r and r[w] != rules[0][w] for r in rules[1:])]
    assert shared
    assert task.stalled(tokens).float().mean() < 0.05  # stalled rules were redrawn


def test_nca_step_reads_the_window_in_the_documented_order():
    nets = draw_networks(1, 2, 8, torch.Generator().manual_seed(0))
    x = torch.randint(2, (1, 3, 4), generator=torch.Generator().manual_seed(1))
    shifted = torch.roll(x, shifts=(1, 2), dims=(1, 2))
    assert torch.equal(nca_step(shifted, nets, 2), torch.roll(nca_step(x, nets, 2), (1, 2),
                                                              (1, 2)))  # commutes with shifts
    w1, w2 = nets
    window = [int(x[0, (0 + di) % 3, (1 + dj) % 4]) for di in (-1, 0, 1) for dj in (-1, 0, 1)]
    onehot = torch.zeros(18)
    onehot[[2 * o + v for o, v in enumerate(window)]] = 1
    assert nca_step(x, nets, 2)[0, 0, 1] == (torch.tanh(onehot @ w1[0]) @ w2[0]).argmax()


def test_nca_ground_truth_is_the_window_and_held_out_sources_never_train():
    task = nca()
    par = task.parents()
    assert (par.sum(1) == 9).all() and par[5].view(4, 4)[0:3, 0:3].all()
    assert task.leaks(range(50)) == 0
    tokens = task.draw(512, torch.Generator().manual_seed(2))
    assert not task.is_held_out(task.sources(tokens)).any()


@pytest.mark.parametrize("name, fields, message", [
    ("dyck", ["length=31"], "length: must be even"),
    ("dyck", ["max_depth=1"], "max_depth: must be in 2..64"),
    ("dyck", ["n_types=4", "max_depth=12"], "max_depth: (n_types+1)^max_depth"),
    ("dyck", ["p_open=nan"], "p_open: must be in (0, 1)"),
    ("dyck", ["p_open=1"], "p_open: must be in (0, 1)"),
    ("nca", ["height=2"], "height: must be in 3.."),
    ("nca", ["width=40", "height=40"], "width: a state of height*width"),
    ("nca", ["n_colors=1"], "n_colors: must be in 2..1024"),
])
def test_bad_input_is_one_line(cli, name, fields, message):
    code, out = cli("task", name, *fields)
    assert code == 2
    assert out.err.strip().count("\n") == 0 and message in out.err, out.err


@pytest.mark.parametrize("name, shown", [("dyck", "held-out stacks"), ("nca", "upper bound")])
def test_bench_task_shows_them(cli, name, shown):
    code, out = cli("task", name, "--samples", "1")
    assert code == 0 and shown in out.out and "Bayes-optimal" in out.out
    code, out = cli("task", name, "--json")
    data = json.loads(out.out)
    assert len(data["tokens"][0]) == len(data["loss_mask"]) + 1
