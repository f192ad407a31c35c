"""The tests a leaderboard spec declares for its claim, run on the rows' steps-to-emergence.

- `{compare: FIELD}` (optionally `against: VALUE`): a log-rank test between every two rows that
  differ only in FIELD (or between each row and the one at VALUE), with Fisher's exact test on
  their solve rates;
- `{trend: FIELD}`: a log-rank trend test across the rows ordered by FIELD (a monotone claim),
  scoring each row by its rank (equally spaced), so order is tested, not linearity in the value;

within each series (the rows that agree on every other field). The p-values of one entry are
one family: Holm-adjusted together. Tests are permutation tests below 20 seeds a group (see
`bench.core.stats`), so the p-values are exact at the seed counts of the committed leaderboards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core import markdown
from ..core.errors import ConfigError
from ..core.rows import survival_sample
from ..core.stats import holm, logrank_test, smallest_detectable, solve_rate_p, trend_test
from ..sweeps.axes import AxisError
from .labels import factor_groups

ALPHA = 0.05  # the level a verdict rejects at (after Holm) and a detectable effect is sized for


@dataclass
class Comparison:
    test: str
    """`compare FIELD` or `trend FIELD`"""
    series: str
    between: str
    """what was compared (`a vs b`, or the ordered values)"""
    p: float
    method: str
    direction: str
    """which way the data lean: `a sooner`, `higher FIELD sooner`, ..."""
    p_solve_rate: float | None = None
    p_holm: float = 1.0
    reference: tuple[list[float], list[bool], float] | None = None
    n_other: int = 0
    """seeds of the other row"""
    """the reference row's (steps, emerged, budget): what a slowdown is simulated from"""
    budget_decides: str = "no"
    """the compared levels with more than half their seeds censored (`24: 7/8`), else `no`:
    where a level has, its order against the others may be the budget's, not the mixers'"""
    detectable: float | None = None
    """where the test did not reject: the smallest slowdown of the reference row's steps its
    seed counts detect with 80% power at p < ALPHA (inf: none up to the largest ratio tried)"""


def _sample(row: dict[str, Any]):
    return survival_sample(row["runs"])


def run_tests(tests: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[Comparison]:
    """Every comparison the spec's tests ask for, Holm-adjusted per entry."""
    out: list[Comparison] = []
    for entry in tests:
        field = entry.get("compare") or entry.get("trend")
        try:
            groups = factor_groups(rows, [field])
        except AxisError as e:
            raise ConfigError(f"tests: {e}") from None
        family: list[Comparison] = []
        for name, members in groups.items():
            members = sorted(members, key=lambda m: _order(m[0][0]))
            if len(members) < 2:
                continue
            if "trend" in entry:
                family.append(_trend(field, name, members))
            else:
                family += _pairs(field, name, members, entry.get("against"))
        for c, p in zip(family, holm([c.p for c in family])):
            c.p_holm = p
            if p >= ALPHA and c.reference is not None:
                c.detectable = smallest_detectable(*c.reference, c.n_other, ALPHA)
        out += family
    return out


def _order(value: Any):
    return (0, value) if isinstance(value, int | float) else (1, str(value))


def _trend(field: str, name: str, members) -> Comparison:
    values = [v[0] for v, _ in members]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        raise ConfigError(f"tests: trend {field} needs numeric values, got {values}")
    # scores are the ranks of the values: a monotone order is tested, not linearity in the value
    samples = [_sample(r) for _, r in members]
    res = trend_test(samples, list(range(len(values))))
    lean = f"higher {field} sooner" if res.statistic > 0 else f"higher {field} later"
    return Comparison(f"trend {field}", name, " < ".join(f"{v:g}" for v in values), res.p,
                      res.method, lean if abs(res.statistic) > 1e-12 else "none",
                      budget_decides=_censored(zip(values, (e for _, e in samples))))


def _order_fixed(ta, ea, tb, eb, statistic: float) -> bool:
    """Whether no longer budget could reverse which of two levels the test found sooner (a when
    `statistic` > 0): the sooner level has every seed emerged, and each censored seed of the
    other ran past all of those emergences (a censored seed can only emerge later than it was
    censored, which moves its level further behind)."""
    def before(t1, e1, t2, e2) -> bool:
        return all(e1) and not all(e2) and min(
            t for t, e in zip(t2, e2) if not e) >= max(t1)
    if statistic > 0:
        return before(ta, ea, tb, eb)
    return statistic < 0 and before(tb, eb, ta, ea)


def _censored(levels, order_fixed: bool = False) -> str:
    """Of (value, emerged flags) per level: the levels with more than half their seeds censored
    at the budget, `value: n/seeds` (`; order fixed` where no longer budget could reverse the
    pair's order)."""
    out = []
    for value, emerged in levels:
        censored = sum(1 for e in emerged if not e)
        if 2 * censored > len(emerged):
            out.append(f"{value:g}: {censored}/{len(emerged)}" if isinstance(value, int | float)
                       else f"{value}: {censored}/{len(emerged)}")
    if out and order_fixed:
        out.append("order fixed")
    return "; ".join(out) or "no"


def _pairs(field: str, name: str, members, against: Any) -> list[Comparison]:
    out = []
    for i, first in enumerate(members):
        for second in members[i + 1:]:
            if against is not None and against not in (first[0][0], second[0][0]):
                continue
            (va, ra), (vb, rb) = first, second
            if against is not None and va[0] == against:  # the reference level second
                (va, ra), (vb, rb) = second, first
            (ta, ea), (tb, eb) = _sample(ra), _sample(rb)
            res = logrank_test(ta, ea, tb, eb)
            lean = (f"{va[0]} sooner" if res.statistic > 0 else f"{vb[0]} sooner"
                    if res.statistic < 0 else "none")
            # a slowdown of the reference level (`against`, else the first in order)
            ref, other = (rb, ta) if against is not None else (ra, tb)
            budget = max(r.budget_steps for r in ref["runs"])
            out.append(Comparison(f"compare {field}", name, f"{va[0]} vs {vb[0]}", res.p,
                                  res.method, lean,
                                  solve_rate_p(sum(ea), len(ea), sum(eb), len(eb)),
                                  reference=(*_sample(ref), budget), n_other=len(other),
                                  budget_decides=_censored([(va[0], ea), (vb[0], eb)],
                                                           _order_fixed(ta, ea, tb, eb,
                                                                        res.statistic))))
    return out


def to_markdown(comparisons: list[Comparison]) -> list[str]:
    if not comparisons:
        return []
    lines = ["## Tests", "",
             "Log-rank tests on steps-to-emergence (censored seeds kept); p is exact by "
             "permutation below 20 seeds a group. Holm: adjusted over the comparisons of one "
             "test entry (one claim). Fisher: exact test of the solve rates. Detects: where a "
             f"comparison does not reject (Holm p >= {ALPHA}), the smallest slowdown of the "
             "reference row's steps (the `against` level, else the first) that these seed "
             f"counts detect with 80% power at p < {ALPHA}, simulated by resampling its seeds "
             "(none: not even 8x; a trend: not simulated). Mostly censored: the compared levels "
             "with more than half their seeds censored at the budget (censored/seeds); where "
             "any is, the budget rather than the mixers may have decided the order, unless it "
             "says order fixed: one level emerged on every seed and every censored seed of the "
             "other ran past all of those emergences, so no longer budget could reverse it.", ""]
    lines += markdown.table(
        ["test", "series", "between", "leans", "p", "Holm p", "Fisher p (solve rate)",
         "detects (80% power)", "mostly censored", "method"],
        [[c.test, c.series, c.between, c.direction, f"{c.p:.3g}", f"{c.p_holm:.3g}",
          "-" if c.p_solve_rate is None else f"{c.p_solve_rate:.3g}", _detects(c),
          c.budget_decides, c.method]
         for c in comparisons])
    return [*lines, ""]


def _detects(c: Comparison) -> str:
    if c.detectable is None:
        return "-"
    return "none" if c.detectable == float("inf") else f"{c.detectable:g}x"
