"""The one Markdown table writer every page uses (leaderboard, tests, reproduce, status, perf)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def table(header: list[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    """Lines of a Markdown table: the header, its rule, one line per row (cells as str)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
