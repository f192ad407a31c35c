"""The in-context tasks (induction, mqar): each generator obeys its rule, the held-out pairs are
never trained on, the per-sequence ground truth points at the answer, and the references are
right."""

import json

import pytest
import torch

from datamodules import TASKS, base, build_task
from datamodules.base import join_tokens
from datamodules.config import InductionConfig, MQARConfig

CPU = torch.device("cpu")


def induction(seed=0, **kw):
    return build_task(InductionConfig(**kw), seed=seed)


def mqar(**kw):
    """The block layout (the committed recall board's); zoology's: tests/datamodules/test_mqar.py"""
    return build_task(MQARConfig(layout="block", **kw), seed=0)


def test_induction_copies_a_run_of_its_random_tokens():
    task = induction(vocab_size=12, length=40, segment=6, n_repeats=3)
    c = task.config
    for tokens in (task.sample(64, torch.Generator().manual_seed(1)),
                   task.draw(64, torch.Generator().manual_seed(2)), task.eval_tokens()):
        assert tokens.shape[1] == 40 and (tokens[:, 0] == 0).all()
        assert ((tokens[:, 1:] >= 1) & (tokens[:, 1:] < 12)).all()
        prefix = tokens[:, 1 : 1 + c.prefix]
        windows = prefix.unfold(1, c.segment, 1)  # (N, O, m)
        for start in task.copy_starts():
            copy = tokens[:, start : start + c.segment]
            assert (windows == copy[:, None]).all(-1).any(1).all()  # some run equals the copy


def test_induction_scores_inside_the_copies_and_its_pattern_points_at_the_answer():
    task = induction(vocab_size=10, length=30, segment=5, n_repeats=2)
    mask = task.loss_mask()
    starts = task.copy_starts()
    assert mask.nonzero().squeeze(1).tolist() == [p for s in starts for p in range(s, s + 4)]
    tokens = task.eval_tokens()
    pattern = task.patterns(tokens)  # (N, P, L)
    at = task.scored_positions()
    # every position the pattern sets follows an earlier occurrence of the current token, and
    # the answer is among the tokens there (the copy's source is one of them)
    rows, p, q = pattern.nonzero(as_tuple=True)
    assert (tokens[rows, q - 1] == tokens[rows, at[p]]).all() and (q < at[p]).all()
    answer = tokens[:, at + 1]
    found = ((tokens[:, None, :-1] == answer[..., None]) & (pattern > 0)).any(-1)
    assert found.all()


def test_mqar_binds_distinct_keys_and_queries_recall_their_values():
    task = mqar(n_pairs=6, n_queries=4, n_keys=10, n_values=7, gap=3)
    assert task.n_tokens == 2 * 6 + 3 + 2 * 4 and task.vocab_size == 18
    for tokens in (task.sample(64, torch.Generator().manual_seed(1)),
                   task.draw(64, torch.Generator().manual_seed(2))):
        keys, values = tokens[:, 0:12:2], tokens[:, 1:12:2]
        assert ((keys >= 1) & (keys <= 10)).all() and ((values > 10) & (values <= 17)).all()
        assert all(len(set(row)) == 6 for row in keys.tolist())  # distinct keys
        assert (tokens[:, 12:15] == 0).all()  # the filler
        q, a = tokens[:, 15::2], tokens[:, 16::2]
        assert all(len(set(row)) == 4 for row in q.tolist())
        for i in range(64):
            bound = dict(zip(keys[i].tolist(), values[i].tolist()))
            assert all(bound[k] == v for k, v in zip(q[i].tolist(), a[i].tolist()))
    tokens = task.eval_tokens()
    pattern = task.patterns(tokens)
    assert (pattern.sum(-1) == 1).all()
    at = task.scored_positions()
    q = pattern.argmax(-1)  # the position read: the value bound to the query's key
    assert (tokens.gather(1, q) == tokens[:, at + 1]).all()
    assert (tokens.gather(1, q - 1) == tokens[:, at]).all()


def test_no_training_copy_comes_from_a_held_out_place_and_every_evaluated_one_does():
    task = induction(vocab_size=8, length=33, segment=4, seed=3)
    held = task.held
    assert held.any() and not held.all()
    assert task.leaks(range(300)) == 0  # 300 steps of 64 sequences
    for step in range(50):
        b = task.train_batch(step, CPU)
        match = task.sources_matching(join_tokens(b))
        assert (match & ~held).any(-1).all()  # every copy fits a training place
    es = task.eval_set(CPU)
    match = task.sources_matching(es.tokens[~es.probe])
    assert (match & held).any(-1).all()  # every evaluated copy fits a held-out place
    assert torch.equal(es.counted, task.loss_mask().expand(len(es.tokens), -1))


def test_no_training_sequence_binds_a_held_out_pair_and_only_they_are_counted():
    task = mqar(n_keys=8, n_values=8, n_pairs=4)
    assert task.held.any() and not task.held.all()
    assert task.leaks(range(300)) == 0
    for step in range(50):
        b = task.train_batch(step, CPU)
        tokens = join_tokens(b)
        assert not task.is_held_out(task.bindings(tokens)).any()
    es = task.eval_set(CPU)
    at = task.scored_positions()
    counted = es.counted[~es.probe]
    assert not counted[:, ~task.loss_mask()].any()  # only queries count
    assert torch.equal(counted[:, at], task.is_held_out(task.scored_pairs(es.tokens[~es.probe])))
    assert es.counted[es.probe][:, at].all()  # the probe counts every query


def test_a_keys_training_values_are_uniform_among_those_it_may_take():
    task = mqar(n_keys=8, n_values=8, n_pairs=4)
    pairs = torch.cat([task.bindings(join_tokens(task.train_batch(s, CPU))).view(-1, 2)
                       for s in range(200)])
    counts = torch.zeros(8, 8).index_put_((pairs[:, 0], pairs[:, 1]), torch.ones(len(pairs)),
                                          accumulate=True)
    assert torch.equal(counts > 0, ~task.held)  # every allowed value drawn, no held-out one
    expected = counts.sum(1, keepdim=True) / (~task.held).sum(1, keepdim=True)
    assert ((counts - expected).abs()[~task.held] < 0.25 * expected.expand(8, 8)[~task.held]).all()


@pytest.mark.parametrize("name", sorted(TASKS))
def test_references_in_chunks_of_rows_equal_one_pass(name, monkeypatch):
    whole = build_task(TASKS[name](), seed=1).references()
    monkeypatch.setattr(base, "REFERENCE_FLOATS", 1)  # one sequence per chunk
    chunked = build_task(TASKS[name](), seed=1).references()
    for ref in whole:
        for metric, value in whole[ref].items():
            assert chunked[ref][metric] == pytest.approx(value, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("name, fields", [("induction", {}), ("mqar", {"layout": "block"}),
                                          ("mqar", {"vocab_size": 64, "length": 32})])
def test_a_task_that_trains_on_its_held_out_pairs_is_caught(name, fields, monkeypatch):
    # (at zoology's 8,192 tokens a batch rarely binds one of the ~800 evaluated held-out pairs
    # among 16.7M: the check is against the evaluated ones, so a small vocabulary shows it)
    task = build_task(TASKS[name](**fields), seed=0)
    monkeypatch.setattr(task, "training_sequences", task.sample)  # no split applied
    assert task.leaks(range(20)) > 0


def test_references():
    big = induction(vocab_size=4096, length=33, segment=4, held_out=0.5)
    assert big.references()["ceiling"]["token_acc"] > 0.99  # tokens almost never recur
    small = induction(vocab_size=6, length=33, segment=4)
    ceiling = small.references()["ceiling"]["token_acc"]
    assert 0.3 < ceiling < 0.95  # a token recurs: several sources fit the copy so far
    refs = mqar().references()
    assert refs["ceiling"] == {"token_acc": 1.0, "loss": 0.0, "exact_acc": 1.0}
    assert refs["no_context"]["token_acc"] < 0.15  # 32 values


def test_bayes_ceiling_by_enumeration():
    """The posterior keeps the source places consistent with the copy so far: checked against
    counting them by hand."""
    task = induction(vocab_size=5, length=17, segment=3, n_repeats=1)
    tokens = task.eval_tokens()[:20]
    post = task.next_token_posterior(tokens)
    c = task.config
    for i, seq in enumerate(tokens.tolist()):
        prefix, copy = seq[1 : 1 + c.prefix], seq[1 + c.prefix :]
        for k in range(c.segment - 1):
            fits = [o for o in range(c.prefix - c.segment + 1)
                    if prefix[o : o + k + 1] == copy[: k + 1]]
            expect = torch.zeros(5)
            for o in fits:
                expect[prefix[o + k + 1]] += 1 / len(fits)
            assert torch.allclose(post[i, k], expect)


@pytest.mark.parametrize("name, fields, message", [
    ("induction", ["length=20", "segment=8"], "length: must be in 25..65536"),
    ("induction", ["vocab_size=3"], "vocab_size: must be in 4.."),
    ("induction", ["segment=1"], "segment: must be in 2.."),
    ("mqar", ["layout=block", "n_queries=9"], "n_queries: must be in 0..8"),
    ("mqar", ["layout=block", "n_keys=4"], "n_keys: must be in 8.."),
    ("mqar", ["layout=block", "gap=-1"], "gap: must be in 0.."),
    ("mqar", ["layout=block", "n_keys=1048576", "n_values=1048576"], "n_values: the binding table"),
    ("mqar", ["held_out=nan"], "held_out: must be in (0, 1)"),
    ("induction", ["n_repeats=0"], "n_repeats: must be in 1.."),
    ("induction", ["length=1e9"], "length"),
])
def test_bad_input_is_one_line(cli, name, fields, message):
    code, out = cli("task", name, *fields)
    assert code == 2
    assert out.err.strip().count("\n") == 0 and message in out.err, out.err


@pytest.mark.parametrize("name", ["induction", "mqar"])
def test_bench_task_shows_them(cli, name):
    code, out = cli("task", name, "--samples", "1")
    assert code == 0
    assert "held out (never in a training sequence)" in out.out and "Bayes-optimal" in out.out
    assert ("copy 1:" if name == "induction" else "query slots ([key->answer]") in out.out
    code, out = cli("task", name, "--json")
    data = json.loads(out.out)
    assert len(data["tokens"][0]) == len(data["loss_mask"]) + 1


def test_an_instance_must_hold_out_some_places_but_not_all():
    with pytest.raises(ValueError, match="held_out: .* holds out [01] of the 1 places"):
        induction(length=25, segment=8, n_repeats=2)  # one place only: all or nothing
