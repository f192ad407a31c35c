"""The suite's scorecard finds what was planted: a mixer built three times slower than attention
in every cell is `later` everywhere with a ratio near 3, one drawn from attention's own steps is
`no detectable difference`, one three times faster is `sooner`; Holm runs over the whole suite;
a cell without attention is left out, said so; the files are written."""

import math

import numpy as np
import pytest

from bench.analysis.scorecard import score, to_markdown, write_scorecard
from tests.records import record

BUDGET = 20_000


def runs(mixer: str, steps, budget: int = BUDGET):
    return [record(status="emerged" if s < budget else "censored",
                   steps_to_emergence=int(s) if s < budget else None, budget_steps=budget,
                   accuracy={"heldout_token_acc": 1.0, "train_token_acc": 1.0, "gap": 0.01},
                   config={"arch": {"name": mixer}, "seed": i, "train": {"lr": 0.001}})
            for i, s in enumerate(steps)]


def cell(seed: int):
    rng = np.random.default_rng(seed)
    attention = rng.lognormal(np.log(600), 0.25, size=8).round()
    return {"transformer": runs("transformer", attention), "slow": runs("slow", 3 * attention),
            "same": runs("same", attention[::-1]), "fast": runs("fast", (attention / 3).round())}


REFERENCE = {"easy": "transformer", "hard": "transformer", "lonely": "transformer"}


@pytest.fixture(scope="module")
def card():
    return score({"easy": cell(0), "hard": cell(1), "lonely": {"slow": runs("slow", [100] * 8)}},
                 REFERENCE)


def test_planted_slowdowns_and_speedups_are_found(card):
    by = {(s.cell, s.mixer): s for s in card.cells}
    for c in ("easy", "hard"):
        assert by[c, "slow"].verdict == "later" and by[c, "slow"].ratio.value == pytest.approx(3)
        assert by[c, "fast"].verdict == "sooner"
        assert by[c, "same"].verdict == "no detectable difference"
        assert by[c, "same"].ratio.low < 1 < by[c, "same"].ratio.high
        assert by[c, "transformer"].ratio is None and by[c, "transformer"].verdict == "reference"
        assert by[c, "slow"].solve_rate == 1 and by[c, "slow"].gap == pytest.approx(0.01)
    assert card.comparisons == 6 and card.missing == ["lonely"]
    assert all(s.p_holm >= s.p for s in card.cells if s.ratio is not None)


def test_mixers_are_ranked_by_the_geometric_mean_with_a_sentence_each(card):
    assert [m.mixer for m in card.mixers] == ["fast", "same", "slow"]
    slow = card.mixers[-1]
    assert (slow.cells, slow.sooner, slow.later, slow.undetected) == (2, 0, 2, 0)
    assert slow.ratio.value == pytest.approx(3) and slow.ratio.low > 1
    text = slow.sentence(card.comparisons)
    assert text.startswith("**slow**: sooner than attention on 0 of 2 cells, later on 2, no "
                           "detectable difference on 0 (exact log-rank, Holm over the suite's "
                           "6 comparisons)")
    assert math.isfinite(slow.detectable)


def test_a_censored_mixer_counts_its_budget(card):
    never = score({"c": {"attention": runs("transformer", [500] * 8),
                         "never": runs("never", [BUDGET] * 8)}}, {"c": "attention"})
    s = next(s for s in never.cells if s.mixer == "never")
    assert s.solve_rate == 0 and s.rmst == BUDGET and s.ratio.value == pytest.approx(40)
    assert s.verdict == "later" and math.isinf(s.median)


def test_the_files(card, tmp_path):
    path = write_scorecard(card, tmp_path, "suite")
    text = path.read_text()
    assert text == to_markdown(card, "suite") and "| 1 | fast |" in text
    assert (tmp_path / "scorecard.png").stat().st_size > 1000
    assert '"verdict": "later"' in (tmp_path / "scorecard.json").read_text()
