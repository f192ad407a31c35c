"""What an analysis of a run directory writes (`bench patch`, `bench circuits`): a figure, the
report as JSON and as markdown, side by side, each replaced atomically."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from .files import write_atomic


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_report(out: Path, stem: str, fig: Any, report: dict[str, Any], text: str) -> None:
    """out/STEM.png (closing `fig`), out/STEM.json and out/STEM.md."""
    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    pyplot().close(fig)
    write_atomic(out / f"{stem}.png", png.getvalue())
    write_atomic(out / f"{stem}.json", json.dumps(report, indent=2) + "\n")
    write_atomic(out / f"{stem}.md", text)
