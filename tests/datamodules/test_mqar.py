"""MQAR in zoology's layout, checked against zoology's definition (`multiquery_ar`): the
vocabulary split, distinct keys and values, power-law query slots, blanks or noise after each
query key, only the query keys scored; and the held-out bindings on top of it."""

import pytest
import torch
from scipy import stats

from datamodules import build_task
from datamodules.base import join_tokens
from datamodules.config import MQARConfig

CPU = torch.device("cpu")


def zoology(seed=0, **kw):
    kw = {"vocab_size": 256, "length": 64, "n_pairs": 8} | kw
    return build_task(MQARConfig(**kw), seed=seed)


def parts(task, tokens):
    """keys, values (N, P) of the context; the query region (N, length - 2P)."""
    P, L = task.config.n_pairs, task.config.length
    return tokens[:, 0 : 2 * P : 2], tokens[:, 1 : 2 * P : 2], tokens[:, 2 * P : L]


def query_slots(task, tokens):
    """(N, P) the slot index where each key (in context order) is queried."""
    keys, _, region = parts(task, tokens)
    slot_tokens = region[:, 0::2]  # (N, slots)
    match = slot_tokens[:, None, :] == keys[:, :, None]  # (N, P, slots)
    assert (match.sum(-1) == 1).all()  # every key queried exactly once
    return match.float().argmax(-1)


@pytest.mark.parametrize("noise", [True, False])
def test_sequences_follow_zoologys_layout(noise):
    task = zoology(random_non_queries=noise)
    c = task.config
    assert c.layout == "zoology" and task.vocab_size == 256 and task.seq_len == 64
    assert MQARConfig().vocab_size == 8192 and MQARConfig().power_a == 0.01  # zoology's defaults
    for tokens in (task.sample(256, torch.Generator().manual_seed(1)),
                   task.draw(256, torch.Generator().manual_seed(2)), task.eval_tokens()):
        keys, values, region = parts(task, tokens)
        assert ((keys >= 1) & (keys <= 127)).all() and ((values >= 128) & (values <= 255)).all()
        assert all(len(set(r)) == 8 for r in keys.tolist())  # distinct keys
        assert all(len(set(r)) == 8 for r in values.tolist())  # distinct values (zoology)
        slots = query_slots(task, tokens)
        queried = torch.zeros(region.shape, dtype=torch.bool)
        queried.scatter_(1, 2 * slots, True)
        if noise:  # every other token of the region is noise from the whole vocabulary
            assert region[~queried].unique().numel() > 200
        else:
            assert (region[~queried] == 0).all()
        # the token after a query key is never its answer
        after = region.gather(1, 2 * slots + 1)
        assert not (after == values).any()


def test_the_first_querys_slot_follows_the_power_law():
    """Slots are drawn without replacement with weight (i + 1)^(a - 1): the first key's slot
    follows those weights exactly (later keys' are drawn from what is left). Chi-square
    goodness of fit on 20,000 sequences; tolerance: p > 0.001 (a false alarm 1 in 1,000)."""
    for a in (0.01, 0.5, 1.0):
        task = zoology(power_a=a, length=48, vocab_size=512)
        tokens = task.sample(20_000, torch.Generator().manual_seed(3))
        first = query_slots(task, tokens)[:, 0]
        observed = torch.bincount(first, minlength=task.config.slots).double()
        expected = task.slot_weights() * len(first)
        assert stats.chisquare(observed.numpy(), expected.numpy()).pvalue > 1e-3, a
        if a == 0.01:  # the test can tell: the uniform law is rejected outright
            uniform = torch.full_like(expected, len(first) / task.config.slots)
            assert stats.chisquare(observed.numpy(), uniform.numpy()).pvalue < 1e-12
    w = zoology(power_a=0.01).slot_weights()
    assert torch.allclose(w[1] / w[0], torch.tensor(2.0 ** -0.99, dtype=w.dtype))


def test_only_the_query_keys_are_scored_and_their_targets_are_the_values():
    task = zoology()
    tokens = task.draw(128, torch.Generator().manual_seed(4))
    batch = task.train_batch(0, CPU)
    keys, values, _ = parts(task, join_tokens(batch))
    counted = batch.counted
    assert (counted.sum(1) == 8).all()  # each key queried once, nothing else scored
    assert not counted[:, ~task.loss_mask()].any()  # only slot tokens
    rows, pos = counted.nonzero(as_tuple=True)
    asked = batch.inputs[rows, pos]
    which = (keys[rows] == asked[:, None]).float().argmax(-1)
    assert (keys[rows, which] == asked).all()
    assert torch.equal(batch.targets[rows, pos], values[rows, which])  # the bound value
    # every other target is the next input, and the next input after a query is not the answer
    split = task.split(tokens)
    assert torch.equal(split.inputs, tokens[:, :-1])
    other = ~task.probe_counted(tokens)
    assert torch.equal(split.targets[other], tokens[:, 1:][other])
    assert not (tokens[:, 1:][~other] == split.targets[~other]).any()


def test_the_pattern_points_at_the_value_and_the_references_hold():
    task = zoology()
    tokens = task.eval_tokens()
    pattern = task.patterns(tokens)  # (N, P, L)
    asked = task.asked(tokens)
    assert torch.equal(pattern.sum(-1) > 0, asked)  # a row per query, zero elsewhere
    q = pattern.argmax(-1)[asked]
    targets = task.split(tokens).targets[:, task.scored_positions()][asked]
    assert torch.equal(tokens[:, :-1].gather(1, pattern.argmax(-1))[asked], targets)
    assert (q % 2 == 1).all() and (q < 16).all()  # a value of the context
    refs = task.references()
    assert refs["ceiling"] == {"token_acc": 1.0, "loss": 0.0, "exact_acc": 1.0}
    assert refs["chance"]["token_acc"] == 1 / 256
    assert refs["no_context"]["token_acc"] < 0.1  # 128 values


def test_held_out_bindings_are_never_trained_on_and_only_they_count():
    task = zoology(vocab_size=64, n_pairs=4, length=32)
    assert task.leaks(range(200)) == 0
    for step in range(50):
        tokens = join_tokens(task.train_batch(step, CPU))
        assert not task.is_held_out(task.bindings(tokens)).any()
    es = task.eval_set(CPU)
    held = es.tokens[~es.probe]
    counted = es.counted[~es.probe][:, task.scored_positions()]
    assert counted.any() and torch.equal(
        counted, task.asked(held) & task.is_held_out(task.scored_pairs(held)))
    assert torch.equal(es.counted[es.probe], task.probe_counted(es.tokens[es.probe]))


def test_a_module_trains_on_the_query_keys_only():
    from architectures import TransformerConfig
    from bench.training.config import TrainConfig
    from bench.training.lightning_module import EmergenceModule

    task = zoology(vocab_size=64, n_pairs=4, length=32)
    module = EmergenceModule(TransformerConfig(d_model=16, n_layers=1, n_heads=2,
                                                       head_dim=8), TrainConfig(), task)
    batch = task.train_batch(0, CPU)
    logits = module.model(batch.inputs)
    keep = batch.counted
    expect = torch.nn.functional.cross_entropy(logits[keep], batch.targets[keep])
    assert torch.allclose(module.loss(batch), expect)


@pytest.mark.parametrize("fields, message", [
    (["length=63"], "length: must be even"),
    (["length=20"], "length: must be in 32.."),
    (["power_a=0"], "power_a: must be in (0, 1]"),
    (["power_a=2"], "power_a: must be in (0, 1]"),
    (["gap=3"], "gap: a field of layout block, not of layout zoology"),
    (["layout=block", "power_a=0.5"], "power_a: a field of layout zoology"),
    (["layout=ring"], "layout: must be one of zoology, block"),
    (["random_targets=true"], "random_targets: not available with layout zoology"),
    (["vocab_size=10"], "vocab_size: must be in 18.."),
])
def test_bad_input_is_one_line(cli, fields, message):
    code, out = cli("task", "mqar", *fields)
    assert code == 2
    assert out.err.strip().count("\n") == 0 and message in out.err, out.err


def test_bench_task_shows_the_layout(cli):
    code, out = cli("task", "mqar", "vocab_size=64", "n_pairs=4", "length=32", "--samples", "1")
    assert code == 0, out.err
    assert "zoology layout: 4 key-value pairs" in out.out and "12 query slots" in out.out
    assert "query slots ([key->answer], 4 of 12)" in out.out and "pairs:" in out.out
