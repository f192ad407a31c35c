"""The held-out part is held out: no training transition starts from a state the evaluation
scores, a lookup table of training transitions is no better than reading no context there, and
each task instance has its own split. Planted leaks and duplicate rows are caught."""

import pytest
import torch

from datamodules import TASKS, build_task
from datamodules.base import Batch, join_tokens, split_tokens
from datamodules.linear_map import LinearMap, LinearMapConfig
from datamodules.states import SMALL_HELD_OUT

CPU = torch.device("cpu")
SMALL = {
    "linear_map": {"state_size": 8, "sparsity": 2, "n_states": 4},
    "cellular_automaton": {"n_cells": 8, "n_colors": 2, "n_rules": 4, "n_states": 4},
}


def small(name: str, **fields):
    cfg = TASKS[name](**{**SMALL[name], **fields})
    return build_task(cfg, batch_size=64, seed=fields.pop("seed", 0))


@pytest.mark.parametrize("name", list(SMALL))
def test_no_held_out_source_ever_reaches_training(name):
    task = small(name)
    assert task.leaks(range(3000)) == 0  # 3000 steps of 64 sequences, 3 transitions each
    tokens = task.draw(4096, torch.Generator().manual_seed(1))
    assert not task.is_held_out(task.sources(tokens)).any()


@pytest.mark.parametrize("name", list(SMALL))
def test_a_planted_leak_is_caught(name):
    task = small(name)
    evaluated = task.eval_tokens(CPU)[:1]  # one held-out sequence slipped into training

    class Leaky(type(task)):
        def train_batch(self, step, device, rank=0, world=1):
            batch = super().train_batch(step, device, rank, world)
            if step == 7:
                leak = split_tokens(evaluated)
                return Batch(torch.cat([batch.inputs[1:], leak.inputs]),
                             torch.cat([batch.targets[1:], leak.targets]))
            return batch

    leaky = Leaky(task.config, batch_size=64, seed=0)
    assert leaky.leaks(range(10)) >= 1


@pytest.mark.parametrize("name", list(SMALL))
def test_small_held_out_part_is_evaluated_whole_each_state_once(name):
    task = small(name)
    sizes = task.split_sizes()
    assert sizes["states"] == 256 and sizes["held_out_states"] <= SMALL_HELD_OUT
    starts = task.eval_tokens(CPU)[:, : task.state_size]
    assert len({tuple(s) for s in starts.tolist()}) == len(starts) == sizes["held_out_states"]
    assert task.is_held_out(starts).all()
    everything = torch.cartesian_prod(*[torch.arange(2)] * 8)
    assert int(task.is_held_out(everything).sum()) == sizes["held_out_states"]
    assert 0.1 < sizes["held_out_states"] / 256 < 0.3  # about the 20% asked for


def test_a_large_held_out_part_is_sampled_without_repeats():
    task = build_task(LinearMapConfig(state_size=16, sparsity=2, n_states=2), eval_size=300)
    starts = task.eval_tokens(CPU)[:, :16]
    assert len(starts) == 300 and len({tuple(s) for s in starts.tolist()}) == 300
    assert task.is_held_out(starts).all()


@pytest.mark.parametrize("name", list(SMALL))
def test_only_transitions_from_held_out_sources_are_scored(name):
    task = small(name)
    batch = task.eval_batch(CPU)
    es = task.eval_set(CPU)
    held = ~batch.probe
    S = task.state_size
    # a target counts exactly when its transition's source is held out (or in the probe)
    for row in range(len(batch.inputs)):
        tokens = es.tokens[row].view(-1, S)
        for p in range(task.seq_len):
            t_next, _ = divmod(p + 1, S)
            expect = t_next >= 1 and (bool(batch.probe[row])
                                      or bool(task.is_held_out(tokens[t_next - 1])))
            assert bool(batch.counted[row, p]) == expect
    assert batch.counted[held][:, S - 1].all()  # the first transition always counts
    assert not task.is_held_out(task.sources(es.tokens[es.probe])).any()  # the probe is training


@pytest.mark.parametrize("name", list(SMALL))
def test_a_lookup_table_of_training_transitions_is_no_better_than_no_context(name):
    """Memorising every training transition predicts nothing about held-out sources."""
    task = small(name)
    S = task.state_size
    table, votes = {}, {}
    for step in range(300):
        b = task.train_batch(step, CPU)
        tokens = join_tokens(b).view(64, -1, S).tolist()
        for seq in tokens:
            for t, (src, nxt) in enumerate(zip(seq, seq[1:])):
                table[tuple(src)] = nxt
                for i, x in enumerate(nxt):
                    votes.setdefault((t, i), []).append(x)
    es = task.eval_set(CPU)
    held_tokens, flags = es.tokens[~es.probe], task.held_out_transitions(es)[~es.probe]
    majority = torch.tensor(task.references()["no_context"]["token_acc"])
    # the table's fallback: each position's most frequent training token
    train_majority = {k: max(set(v), key=v.count) for k, v in votes.items()}
    right = total = hits = 0
    for seq, counts in zip(held_tokens.view(len(held_tokens), -1, S).tolist(), flags.tolist()):
        for t, counted in enumerate(counts):
            if not counted:
                continue
            src, nxt = tuple(seq[t]), seq[t + 1]
            hits += src in table
            guess = table.get(src) or [train_majority[t, i] for i in range(S)]
            right += sum(g == x for g, x in zip(guess, nxt))
            total += S
    assert hits == 0
    assert right / total <= float(majority) + 1e-9


def test_every_seed_is_its_own_instance_with_its_own_split():
    a, b = (LinearMap(LinearMapConfig(state_size=8, sparsity=2), seed=s) for s in (0, 1))
    assert not torch.equal(a.matrix, b.matrix)
    states = torch.cartesian_prod(*[torch.arange(2)] * 8)
    assert not torch.equal(a.is_held_out(states), b.is_held_out(states))
    fixed = [LinearMap(LinearMapConfig(state_size=8, sparsity=2, task_seed=5), seed=s)
             for s in (0, 1)]
    assert torch.equal(fixed[0].matrix, fixed[1].matrix) and fixed[0].instance_seed == 5
    again = LinearMap(LinearMapConfig(state_size=8, sparsity=2), seed=1)
    assert torch.equal(again.matrix, b.matrix)  # an instance is a function of the seed


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, float("nan"), float("inf")])
def test_held_out_fraction_outside_the_unit_interval_is_refused(fraction):
    with pytest.raises(ValueError, match="held_out: must be in"):
        LinearMapConfig(held_out=fraction)


def test_long_sequences_with_a_large_held_out_part_are_refused():
    with pytest.raises(ValueError, match="held_out: a training sequence of n_states=64"):
        LinearMapConfig(state_size=16, n_states=64)


@pytest.mark.parametrize("value", ["sometimes", -1, True, 2**64, 1.5])
def test_task_seed_is_an_integer_or_per_seed(value):
    with pytest.raises(ValueError, match="task_seed: must be an integer"):
        LinearMapConfig(task_seed=value)


def test_an_empty_held_out_part_is_a_clear_error():
    task = build_task(LinearMapConfig(state_size=2, sparsity=1, n_states=2, held_out=0.01))
    with pytest.raises(ValueError, match="held_out: none of the 4 states"):
        task.eval_tokens(CPU)


def test_state_space_helpers():
    from datamodules.split import all_states, chunk_bounds, state_hash

    assert all_states(2, 2).tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert len({tuple(s) for s in all_states(3, 4).tolist()}) == 81
    h = state_hash(all_states(2, 12), salt=7)
    assert ((0 <= h) & (h < 1)).all() and abs(float((h < 0.2).float().mean()) - 0.2) < 0.03
    assert torch.equal(h, state_hash(all_states(2, 12), salt=7))
    assert not torch.equal(h, state_hash(all_states(2, 12), salt=8))
    assert chunk_bounds(65, 32, 2) == [(0, 32), (32, 65)]  # a last chunk of 1 row is merged
    assert chunk_bounds(70, 32, 2) == [(0, 32), (32, 64), (64, 70)]
