import math

import pytest
import torch

from datamodules.linear_map import (
    LinearMap,
    LinearMapConfig,
    draw_matrix,
    linear_map_batch,
    rank_mod,
)

CPU = torch.device("cpu")


def recompute(matrix: list[list[int]], x0: list[int], n_states: int, modulus: int) -> list[int]:
    """Independent, loop-by-loop recomputation of one sequence."""
    states, x = [list(x0)], list(x0)
    for _ in range(n_states - 1):
        x = [sum(a * b for a, b in zip(row, x)) % modulus for row in matrix]
        states.append(x)
    return [tok for state in states for tok in state]


def test_matrix_has_exactly_s_ones_per_row_and_is_fixed_by_task_seed():
    a = draw_matrix(9, 4, seed=3)
    assert a.shape == (9, 9)
    assert set(a.unique().tolist()) == {0, 1}
    assert (a.sum(1) == 4).all()
    assert torch.equal(a, draw_matrix(9, 4, seed=3))
    assert not torch.equal(a, draw_matrix(9, 4, seed=4))


def test_generator_obeys_the_rule():
    for modulus in (2, 3, 100_003):  # a large modulus: the float64 product stays exact
        task = LinearMap(LinearMapConfig(state_size=7, sparsity=3, n_states=5, modulus=modulus))
        gen = torch.Generator().manual_seed(0)
        tokens = task.sample(32, gen)
        assert tokens.shape == (32, 35)
        assert tokens.min() >= 0 and tokens.max() < modulus
        m = task.matrix.tolist()
        for seq in tokens.tolist():
            assert seq == recompute(m, seq[:7], 5, modulus)


def test_worked_example_from_the_docstring():
    gen = torch.Generator().manual_seed(0)
    a = torch.tensor([[0, 1], [1, 1]])
    tokens = linear_map_batch(a, 3, 64, 2, gen)
    row = next(r for r in tokens.tolist() if r[:2] == [1, 0])
    assert row == [1, 0, 0, 1, 1, 1]


def test_batches_are_deterministic_per_step_and_eval_set_is_disjoint():
    task = LinearMap(LinearMapConfig(state_size=8, sparsity=2), batch_size=16, seed=5)
    b0, b0_again, b1 = task.train_batch(0, CPU), task.train_batch(0, CPU), task.train_batch(1, CPU)
    assert torch.equal(b0.inputs, b0_again.inputs)
    assert not torch.equal(b0.inputs, b1.inputs)
    other_seed = LinearMap(LinearMapConfig(state_size=8, sparsity=2), batch_size=16, seed=6)
    assert not torch.equal(b0.inputs, other_seed.train_batch(0, CPU).inputs)
    ev = task.eval_batch(CPU)
    assert torch.equal(ev.inputs, task.eval_batch(CPU).inputs)  # one fixed held-out batch
    train_x0 = {tuple(task.train_batch(s, CPU).inputs[i, :8].tolist())
                for s in range(4) for i in range(16)}
    eval_seqs = {tuple(r) for r in ev.inputs.tolist()}
    train_seqs = {tuple(r) for s in range(4) for r in task.train_batch(s, CPU).inputs.tolist()}
    assert len(train_x0) > 1 and eval_seqs != train_seqs
    assert torch.equal(b0.targets[:, :-1], b0.inputs[:, 1:])  # targets are the next tokens


def test_ranks_split_one_global_batch():
    """With 2 devices, rank r gets its half of the very batch a single device would train on."""
    task = LinearMap(LinearMapConfig(state_size=6, sparsity=2), batch_size=8, eval_size=6, seed=1)
    for get in (lambda *a: task.train_batch(3, CPU, *a), lambda *a: task.eval_batch(CPU, *a)):
        whole, r0, r1 = get(), get(0, 2), get(1, 2)
        assert not torch.equal(r0.inputs, r1.inputs)  # the ranks' streams differ
        assert torch.equal(torch.cat([r0.inputs, r1.inputs]), whole.inputs)
        assert torch.equal(torch.cat([r0.targets, r1.targets]), whole.targets)


def test_long_sequences_are_evaluated_in_chunks_that_cover_the_set_once():
    task = LinearMap(LinearMapConfig(state_size=16, sparsity=2, n_states=64, held_out=0.01),
                     eval_size=100)
    assert task.n_tokens == 1024 and task.eval_rows == 32
    chunks = [task.eval_batch(CPU, chunk=c) for c in task.val_dataloader()]
    sizes = [len(c.inputs) for c in chunks]
    assert max(sizes) == 32 and sum(sizes) == len(task.eval_set(CPU).tokens)
    whole = task.eval_batch(CPU)
    for field in ("inputs", "counted", "probe"):
        assert torch.equal(torch.cat([getattr(c, field) for c in chunks]), getattr(whole, field))
    quick = LinearMap(LinearMapConfig(state_size=6, sparsity=2), eval_size=512)
    assert len(quick.val_dataloader()) == 1  # small tasks: the whole set in one pass


def test_loss_mask_scores_every_token_after_the_first_state():
    task = LinearMap(LinearMapConfig(state_size=5, sparsity=2, n_states=3))
    mask = task.loss_mask()
    assert task.seq_len == 14 and mask.shape == (14,)
    # output p predicts token p + 1; tokens 5.. (x_1, x_2) are scored
    assert mask.tolist() == [False] * 4 + [True] * 10


def test_attention_target_matches_the_rule():
    """Flipping a parent input changes the target token; flipping a non-parent never does."""
    S, T = 6, 3
    task = LinearMap(LinearMapConfig(state_size=S, sparsity=2, n_states=T))
    target = task.attention_target()
    assert target.shape == (task.seq_len, task.seq_len)
    assert torch.equal(target, target.tril())  # the pattern is causal
    a = task.matrix
    tokens = task.sample(1, torch.Generator().manual_seed(1))[0]
    for p in range(task.seq_len):
        t_next, i = divmod(p + 1, S)
        for q in range(p + 1):
            flipped = tokens.clone()
            flipped[q] ^= 1
            if t_next == 0 or q // S != t_next - 1:
                assert target[p, q] == 0
                continue
            prev = flipped[(t_next - 1) * S : t_next * S]
            new_token = int((a[i] * prev).sum() % 2)
            assert (new_token != int(tokens[p + 1])) == bool(target[p, q])


def test_full_sparsity_is_the_parity_shortcut_and_is_refused():
    """s = S: every token of every later state is the parity of x_0 (a shortcut)."""
    tokens = linear_map_batch(torch.ones(5, 5, dtype=torch.long), 3, 64, 2,
                              torch.Generator().manual_seed(0)).view(64, 3, 5)
    parity = tokens[:, 0].sum(1) % 2
    assert (tokens[:, 1] == parity[:, None]).all()
    with pytest.raises(ValueError, match="sparsity: must be in 1..state_size-1"):
        LinearMapConfig(state_size=5, sparsity=5)


def test_rows_are_distinct_unless_repeats_are_allowed():
    for seed in range(50):  # S = 6, s = 2: 15 possible rows, so repeats are common when allowed
        a = draw_matrix(6, 2, seed)
        assert len({tuple(r) for r in a.tolist()}) == 6 and (a.sum(1) == 2).all()
    repeats = [draw_matrix(6, 2, seed, distinct=False) for seed in range(50)]
    assert any(len({tuple(r) for r in a.tolist()}) < 6 for a in repeats)


def test_a_planted_duplicate_row_is_flagged():
    task = LinearMap(LinearMapConfig(state_size=6, sparsity=2, n_states=2))
    assert not any("repeats a row" in f for f in task.flags())
    task.matrix[3] = task.matrix[2]
    assert any("repeats a row" in f for f in task.flags())


def test_singular_maps_are_flagged_with_their_ranks():
    """Every even-s map over Z_2 is singular (A 1 = 0); a permutation (s = 1) never is."""
    even = LinearMap(LinearMapConfig(state_size=8, sparsity=2, n_states=3))
    assert even.ranks[0] < 8 and any("singular" in f for f in even.flags())
    one_step = LinearMap(LinearMapConfig(state_size=8, sparsity=2, n_states=2))
    assert one_step.ranks[0] < 8 and one_step.flags() == []  # x_1 is never a source
    assert rank_mod(torch.eye(4, dtype=torch.long), 2) == 4
    assert rank_mod(torch.tensor([[1, 1], [1, 1]]), 2) == 1
    assert rank_mod(torch.tensor([[2, 0], [0, 1]]), 4) == 1  # 2 is not a unit mod 4
    perm = LinearMap(LinearMapConfig(state_size=8, sparsity=1, n_states=4))
    assert perm.ranks == [8, 8, 8] and perm.flags() == []


def test_a_map_that_sends_later_sources_to_zero_is_refused(monkeypatch):
    nilpotent = torch.tensor([[0, 1, 0], [0, 0, 1], [0, 0, 0]])
    monkeypatch.setattr("datamodules.linear_map.draw_matrix", lambda *a: nilpotent)
    with pytest.raises(ValueError, match="sends every state to 0"):
        LinearMap(LinearMapConfig(state_size=3, sparsity=1, n_states=5))


def test_default_sits_where_few_supports_compete():
    c = LinearMapConfig()
    assert math.comb(c.state_size, c.sparsity) <= 20


def test_random_targets_break_the_rule():
    task = LinearMap(LinearMapConfig(state_size=6, sparsity=2, n_states=4, random_targets=True))
    tokens = task.draw(256, torch.Generator().manual_seed(0))
    m = task.matrix.tolist()
    agree = sum(seq == recompute(m, seq[:6], 4, 2) for seq in tokens.tolist())
    assert agree < 5
