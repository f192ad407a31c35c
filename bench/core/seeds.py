"""Seeds as a spec gives them: a count or a list, validated; tuning seeds start apart."""

from __future__ import annotations

from collections import Counter
from typing import Any

SEED_LIMIT = 2**32  # seeds are 0 .. 2^32 - 1 (numpy's range)
TUNE_SEED_START = 1000  # `tune: {seeds: n}` means seeds 1000 .. 1000 + n - 1


def seed_list(seeds: Any, where: str, start: int = 0) -> list[int]:
    """A count n (seeds start .. start+n-1) or an explicit list of seeds, validated."""
    if isinstance(seeds, bool) or not isinstance(seeds, int | list):
        raise ValueError(f"{where}: must be a count or a list of seeds, got {seeds!r}")
    if isinstance(seeds, int):
        if not 1 <= seeds <= MAX_SEEDS:
            raise ValueError(f"{where}: must be in 1..{MAX_SEEDS}, got {seeds}")
        return list(range(start, start + seeds))
    if not seeds or len(seeds) > MAX_SEEDS:
        raise ValueError(f"{where}: must list 1..{MAX_SEEDS} seeds, got {len(seeds)}")
    bad = [s for s in seeds if not (isinstance(s, int) and not isinstance(s, bool)
                                    and 0 <= s < SEED_LIMIT)]
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise ValueError(f"{where}: every seed must be an integer in 0..{SEED_LIMIT - 1}, "
                         f"got {bad[0]!r}{more}")
    twice = [s for s, n in Counter(seeds).items() if n > 1]
    if twice:
        raise ValueError(f"{where}: {twice[0]} is listed twice")
    return list(seeds)


MAX_SEEDS = 10_000
