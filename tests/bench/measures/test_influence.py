"""Influence maps: a constructed mixer with a known pattern is recovered; every mixer, plug-ins
included, gets one at every evaluation, without touching the parameters' gradients."""

import math
from fractions import Fraction

import pytest
import torch
from torch import nn

from bench.measures.influence import SHARE, alignment, cadence, influence_map, row_sample
from bench.measures.run import train
from bench.training.config import load_run_config
from datamodules.states import state_candidates


class Shift(nn.Module):
    """Output p = W x[p - k] (zero for p < k) plus the residual x[p]: reads exactly p - k."""

    def __init__(self, vocab: int, d: int, k: int):
        super().__init__()
        self.k = k
        self.embed = nn.Embedding(vocab, d)
        self.mix = nn.Linear(d, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        shifted = torch.nn.functional.pad(x, (0, 0, self.k, 0))[:, : x.shape[1]]
        return self.head(torch.tanh(x + self.mix(shifted)))


def shift_pattern(L: int, k: int) -> torch.Tensor:
    return torch.diag(torch.ones(L - k), -k)  # row p has its parent at column p - k


def test_a_known_pattern_is_recovered():
    torch.manual_seed(0)
    L, k = 12, 3
    model = Shift(vocab=5, d=8, k=k)
    tokens = torch.randint(0, 5, (16, L + 1))
    scored = torch.arange(k, L)
    influence = influence_map(model, model.embed, tokens[:, :-1], tokens[:, 1:], scored)
    assert influence.shape == (L - k, L)
    assert torch.allclose(influence.sum(-1), torch.ones(L - k))
    off = influence.clone()
    off[torch.arange(L - k), scored] = 0  # the residual: each position reads itself
    for row, p in enumerate(scored.tolist()):
        assert off[row].argmax() == p - k and off[row].sum() == off[row, p - k] > 0
    assert all(p.grad is None for p in model.parameters())  # gradients taken, none kept
    truth = shift_pattern(L, k)[scored]
    # one parent per row, at the start of a "state" of k tokens: the other candidates are the
    # rest of that state
    assert alignment(influence, truth, scored, state_candidates(truth, scored, k)) == (1.0, 1.0)
    wrong = shift_pattern(L, k - 1)[scored]  # the neighbouring position, never read
    mass, auroc = alignment(influence, wrong, scored, state_candidates(wrong, scored, k))
    assert mass == 0.0 and auroc < 0.5


def test_the_mass_is_a_share_when_a_row_may_read_itself():
    # Dyck poses the current token as a candidate; the residual makes its influence large
    influence = torch.tensor([[0.1, 0.1, 0.8, 0.0]])
    scored = torch.tensor([2])
    truth = torch.tensor([[0.0, 0.0, 1.0, 0.0]])  # the parent is p itself
    candidates = torch.tensor([[True, True, True, False]])
    mass, auroc = alignment(influence, truth, scored, candidates)
    assert mass == pytest.approx(0.8) and auroc == 1.0  # was 0.8 / 0.2 = 4


def test_alignment_without_candidates_is_nan():
    influence = torch.full((2, 4), 0.25)
    scored = torch.tensor([2, 3])
    assert all(math.isnan(v) for v in alignment(influence, torch.zeros(2, 4), scored,
                                                     torch.zeros(2, 4, dtype=torch.bool)))


@pytest.mark.parametrize("arch", ["mlp_mixer", "examples.custom_mixer:CausalConvMixer"])
def test_every_mixer_logs_its_influence_at_every_evaluation(arch, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(__import__("pathlib").Path(__file__).resolve().parents[3]))
    import architectures

    monkeypatch.setattr(architectures, "ARCHITECTURES", dict(architectures.ARCHITECTURES))
    cfg = load_run_config(["task.state_size=8", "task.sparsity=2", "task.n_states=2",
                           f"arch.name={arch}", "arch.d_model=16", "train.eval_every=10",
                           "train.max_steps=20", "train.eval_size=64", "train.probe_size=16",
                           "measure.influence_every=1"])
    result = train(cfg, tmp_path / "r", progress=False)
    curves = result["curves"]
    assert curves["step"] == [0, 10, 20]
    for name in ("influence", "intervention"):  # the gradient map and the intervention map
        for key in (f"val/{name}_mass", f"val/{name}_auroc"):
            assert len(curves[key]) == 3 and all(0 <= v <= 1 for v in curves[key])
        assert result[name]["steps"] == [0, 20]
        first = torch.tensor(result[name]["maps"][0])
        assert first.shape == (8, 15)  # the scored positions (state 1) x the input positions
        assert torch.allclose(first.sum(-1), torch.ones(8), atol=0.01)
        future = torch.arange(15)[None, :] > torch.arange(7, 15)[:, None]
        assert (first[future] == 0).all()  # causal: no influence from later positions


def test_influence_is_not_part_of_the_experiment():
    base = ["task.state_size=8", "task.sparsity=2"]
    ids = {load_run_config([*base, *extra]).job_id()
           for extra in ([], ["measure.influence_size=0"], ["measure.influence_size=64"],
                         ["measure.influence_rows=0"], ["measure.influence_every=3"])}
    assert len(ids) == 1


def test_the_row_sample_is_even_fixed_and_whole_when_small():
    assert row_sample(36, 8).tolist() == [0, 5, 10, 15, 20, 25, 30, 35]
    assert row_sample(12, 0).tolist() == row_sample(12, 12).tolist() == list(range(12))
    assert row_sample(12, 50).tolist() == list(range(12))
    assert row_sample(5, 1).tolist() == [0]


def test_the_automatic_cadence_keeps_the_map_within_its_share_of_training():
    assert SHARE == Fraction(3, 100)
    # 16 sequences x 8 rows = 128 passes; 3% of 50 steps x 64 sequences = 96: every 2nd
    assert cadence(16, 8, eval_every=50, batch_size=64) == 2
    assert cadence(16, 8, eval_every=50, batch_size=512) == 1  # 768 sequences: every time
    # at 8 sequences a step only 12 training sequences per evaluation are the share: every 11th
    assert cadence(16, 8, eval_every=50, batch_size=8) == 11
    for size, rows, every, batch in ((16, 8, 50, 8), (4, 3, 10, 2), (64, 1000, 50, 64)):
        k = cadence(size, rows, every, batch)
        assert size * rows <= SHARE * k * every * batch + 1e-9  # within the share
        assert k == 1 or size * rows > SHARE * (k - 1) * every * batch  # and the smallest such
    assert cadence(16, 8, 50, 8, every=2) == 2  # a set cadence is kept
    # the intervention map's copies count a third of a gradient pass each: 16 x 23 flips of a
    # 12-token linear map's inputs = 123 more, 251 in all against 96: every 3rd
    assert cadence(16, 8, eval_every=50, batch_size=64, replaced=23) == 3


def test_sampled_rows_are_the_full_maps_rows_at_the_automatic_cadence(tmp_path):
    base = ["task.state_size=8", "task.sparsity=2", "task.n_states=2", "arch.name=mlp_mixer",
            "arch.d_model=16", "train.eval_every=10", "train.max_steps=40", "train.batch_size=80",
            "train.eval_size=64", "train.probe_size=16", "measure.influence_size=8"]
    full = train(load_run_config([*base, "measure.influence_rows=0", "measure.influence_every=1"]),
                 tmp_path / "full", progress=False)
    # 8 sequences x 3 rows = 24 gradient passes and 8 x 15 flips (the intervention map's
    # copies, a third each: 40) against 3% of 10 steps x 80 sequences = 24: every 3rd
    sampled = train(load_run_config([*base, "measure.influence_rows=3"]), tmp_path / "sampled",
                    progress=False)
    assert sampled["curves"]["step"] == full["curves"]["step"] == [0, 10, 20, 30, 40]
    assert [math.isfinite(v) for v in sampled["curves"]["val/influence_mass"]] == \
        [True, False, False, True, False]
    assert sampled["influence"]["steps"] == [0, 30]
    scored = list(range(7, 15))
    assert sampled["influence"]["rows"] == [7, 11, 14] and full["influence"]["rows"] == scored
    assert full["influence"]["steps"][0] == 0  # the same initialisation, the rows sampled
    whole = torch.tensor(full["influence"]["maps"][0])
    assert torch.allclose(torch.tensor(sampled["influence"]["maps"][0]), whole[[0, 4, 7]],
                          atol=2e-3)
    assert sampled["curves"]["val/loss"] == full["curves"]["val/loss"]  # training untouched
    # and with both maps off: a rerun that adds them (bench sweep --reuse-tuning) trains the same
    off = train(load_run_config([*base, "measure.influence_size=0"]), tmp_path / "off",
                progress=False)
    assert "val/intervention_mass" not in off["curves"]
    assert off["curves"]["val/loss"] == full["curves"]["val/loss"]


def test_chunking_over_sequences_and_positions_changes_nothing(monkeypatch):
    from bench.measures import influence

    torch.manual_seed(0)
    model = Shift(vocab=5, d=8, k=3)
    tokens = torch.randint(0, 5, (40, 13))
    scored = torch.arange(3, 12)
    whole = influence_map(model, model.embed, tokens[:, :-1], tokens[:, 1:], scored)
    monkeypatch.setattr(influence, "TOKEN_BUDGET", 30)  # 2 sequences a pass, 1 position
    chunked = influence_map(model, model.embed, tokens[:, :-1], tokens[:, 1:], scored)
    assert torch.allclose(whole, chunked, atol=1e-6)


class Pointer(nn.Module):
    """Output p = W x[token p] (the token is a position, always earlier here) plus the
    residual: reads a position that changes with every sequence."""

    def __init__(self, vocab: int, d: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.mix = nn.Linear(d, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        read = x.gather(1, tokens[..., None].expand_as(x))
        return self.head(torch.tanh(x + self.mix(read)))


def test_a_per_sequence_pattern_is_recovered_map_by_map():
    torch.manual_seed(0)
    L, B = 10, 12
    model = Pointer(vocab=L, d=8)
    positions = torch.arange(L)
    tokens = (torch.rand(B, L + 1) * positions.clamp_min(1).repeat(1, 2)[:, : L + 1]).long()
    tokens[:, 0] = 0
    scored = torch.arange(2, L)
    inputs = tokens[:, :-1]
    truth = torch.nn.functional.one_hot(inputs[:, scored], L).float()  # (B, P, L)
    before = (positions[None, :] < scored[:, None]).expand(B, -1, -1)
    per_sequence = influence_map(model, model.embed, inputs, tokens[:, 1:], scored,
                                 per_sequence=True)
    assert per_sequence.shape == (B, len(scored), L)
    keep = (truth.argmax(-1) < scored).all(-1)  # rows that point at an earlier position
    mass, auroc = alignment(per_sequence[keep], truth[keep], scored, before[keep])
    assert mass > 0.9 and auroc == 1.0
    mean = influence_map(model, model.embed, inputs, tokens[:, 1:], scored)
    # the mean map against each sequence's truth blurs it: far from the per-sequence reading
    blurred, _ = alignment(mean.expand(int(keep.sum()), -1, -1), truth[keep], scored,
                           before[keep])
    assert blurred < mass - 0.2
