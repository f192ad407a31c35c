"""The head screen's classes and default thresholds, and what is read from its per-checkpoint
ratios over training, with no heavy imports: `bench circuits` computes the ratios
(bench/measures/circuits.py) and the leaderboard reads these curves back from result.json."""

from __future__ import annotations

from typing import Any

CLASSES = ("induction", "duplicate", "previous", "first", "self", "local")
THRESHOLDS = {"induction": 50.0, "duplicate": 30.0, "previous": 30.0, "first": 30.0,
              "self": 30.0, "local": 10.0}


def half_and_shape(at: list[int], fraction: list[float]) -> tuple[int | None, str]:
    """A class's fraction over checkpoints `at` -> (the first step where it reaches half its
    final value, its shape): `jump` (one interval adds half the final fraction), `gradual`, or
    `none` (none at the end; no half step)."""
    if not fraction or fraction[-1] == 0:
        return None, "none"
    half = next(s for s, f in zip(at, fraction) if f >= fraction[-1] / 2)
    jumps = [b - a for a, b in zip(fraction, fraction[1:])]
    return half, "jump" if max(jumps, default=0) >= fraction[-1] / 2 else "gradual"


def sink_course(steps: list[dict[str, Any]], threshold: float = THRESHOLDS["first"]
                ) -> dict[str, Any]:
    """First-token (sink) heads counted whatever other class they reach (multi-label): a head
    is a sink at a checkpoint when its first-token ratio is >= `threshold`, even if it exceeds
    another class by more (an induction head that parks on the first token where no copy
    matches). From the per-checkpoint `ratios` of a screen: the fraction of all heads per
    checkpoint, its half step and shape, the steps with such a head in layer 0 or 1, and the
    layers with one at the last checkpoint."""
    k = CLASSES.index("first")
    at = [s["step"] for s in steps]
    fraction = [sum(h[k] >= threshold for layer in s["ratios"] for h in layer)
                / sum(len(layer) for layer in s["ratios"]) for s in steps]
    half, shape = half_and_shape(at, fraction)
    early = [s["step"] for s in steps
             if any(h[k] >= threshold for layer in s["ratios"][:2] for h in layer)]
    at_end = [i for i, layer in enumerate(steps[-1]["ratios"])
              if any(h[k] >= threshold for h in layer)]
    return {"fraction": fraction, "half_step": half, "shape": shape,
            "in_layers_0_1_at": early, "layers_at_end": at_end}
