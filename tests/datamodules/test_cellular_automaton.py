import math

import pytest
import torch

from datamodules.base import make_generator
from datamodules.cellular_automaton import (
    CellularAutomaton,
    CellularAutomatonConfig,
    apply_rule,
)


def step_by_hand(state: list[int], table: list[int], k: int, r: int) -> list[int]:
    S = len(state)
    out = []
    for i in range(S):
        index = 0
        for d in range(-r, r + 1):
            index = index * k + state[(i + d) % S]  # leftmost cell most significant
        out.append(table[index])
    return out


@pytest.mark.parametrize(
    "cfg",
    [
        dict(n_cells=8, n_colors=4, radius=1, n_rules=1),
        dict(n_cells=9, n_colors=2, radius=2, rule_applications=2, n_rules=3),
        dict(n_cells=5, n_colors=3, radius=1, rule_applications=2, n_rules=4, n_states=5),
    ],
)
def test_generator_obeys_the_rule(cfg):
    task = CellularAutomaton(CellularAutomatonConfig(**cfg))
    c = task.config
    tokens, rule_index = task.sample_with_rules(64, torch.Generator().manual_seed(0))
    assert tokens.shape == (64, c.n_cells * c.n_states)
    assert set(rule_index.tolist()) <= set(range(c.n_rules))
    if c.n_rules > 1:
        assert len(set(rule_index.tolist())) > 1
    for seq, ri in zip(tokens.tolist(), rule_index.tolist()):
        table = task.rules[ri].tolist()
        states = [seq[t * c.n_cells : (t + 1) * c.n_cells] for t in range(c.n_states)]
        for before, after in zip(states, states[1:]):
            x = before
            for _ in range(c.rule_applications):
                x = step_by_hand(x, table, c.n_colors, c.radius)
            assert x == after


def test_window_index_reads_leftmost_cell_as_most_significant():
    table = torch.arange(8)[None]  # identity table: output = window index
    x = torch.tensor([[1, 0, 1, 0]])
    # cell 1 reads (x0, x1, x2) = (1, 0, 1) -> 5; cell 0 wraps: (x3, x0, x1) = (0, 1, 0) -> 2
    assert apply_rule(x, table, 2, 1).tolist() == [[2, 5, 2, 5]]


def test_rule_pool_is_fixed_by_task_seed():
    a = CellularAutomaton(CellularAutomatonConfig(n_rules=3, task_seed=1)).rules
    assert torch.equal(a, CellularAutomaton(CellularAutomatonConfig(n_rules=3, task_seed=1)).rules)
    assert not torch.equal(a, CellularAutomaton(CellularAutomatonConfig(n_rules=3)).rules)
    assert a.shape == (3, 4**3)


def test_attention_target_matches_the_rule():
    """A non-parent never changes the next state; every parent changes it for some input."""
    cfg = CellularAutomatonConfig(n_cells=9, n_colors=3, radius=1, rule_applications=2)
    task = CellularAutomaton(cfg)
    parents = task.parents()
    assert (parents.sum(1) == 5).all() and parents[0, 7] == 1 and parents[0, 3] == 0
    table = task.rules[:1].expand(256, -1)
    x = torch.randint(3, (256, 9), generator=torch.Generator().manual_seed(0))

    def advance(state):
        for _ in range(2):
            state = apply_rule(state, table, 3, 1)
        return state

    base = advance(x)
    for j in range(9):
        changed = x.clone()
        changed[:, j] = (changed[:, j] + 1) % 3
        differs = (advance(changed) != base).any(0)  # (S,) which outputs ever changed
        assert torch.equal(differs, parents[:, j].bool())
    target = task.attention_target()
    S = 9
    assert torch.equal(target[S - 1 + 4, :S], parents[4])  # row predicting x_1[4] reads x_0


def test_the_bayes_ceiling_infers_the_rule_from_the_prefix():
    task = CellularAutomaton(CellularAutomatonConfig(n_cells=6, n_colors=2, n_rules=3,
                                                     n_states=3), eval_size=64)
    tokens, rule = task.sample_with_rules(64, make_generator(0, 9, 0, torch.device("cpu")))
    post = task.next_token_posterior(tokens)  # (B, 12, 2)
    assert post.shape == (64, 12, 2) and torch.allclose(post.sum(-1), torch.ones(64, 12))
    truth = tokens[:, 6:]
    assert (post.gather(-1, truth[..., None]) > 0).all()  # the true rule is never ruled out
    # the first scored token: the share of the pool's rules that predict each colour
    x0 = tokens[:, :6]
    first = torch.stack([apply_rule(x0, t.expand(64, -1), 2, 1)[:, 0] for t in task.rules], 1)
    assert torch.allclose(post[:, 0, 1], first.float().mean(1))
    # brute force over the pool: the posterior is the mixture of the consistent rules
    for b in range(8):
        seq = tokens[b].view(3, 6)
        for p in range(12):
            t, i = divmod(p, 6)
            alive = [r for r in task.rules
                     if all(torch.equal(apply_rule(seq[u][None], r[None], 2, 1)[0, :],
                                        seq[u + 1]) for u in range(t))
                     and torch.equal(apply_rule(seq[t][None], r[None], 2, 1)[0, :i],
                                     seq[t + 1, :i])]
            ones = sum(int(apply_rule(seq[t][None], r[None], 2, 1)[0, i]) for r in alive)
            assert post[b, p, 1].item() == pytest.approx(ones / len(alive))
    accuracy, loss = task.ceiling()
    assert 0.5 < accuracy < 1 and loss > 0


def test_one_rule_or_a_linear_map_has_a_perfect_ceiling_and_random_targets_none():
    assert CellularAutomaton(CellularAutomatonConfig(n_rules=1)).ceiling() == (1.0, 0.0)
    noise = CellularAutomaton(CellularAutomatonConfig(n_colors=4, random_targets=True))
    accuracy, loss = noise.ceiling()
    assert accuracy == pytest.approx(0.25) and loss == pytest.approx(math.log(4))
