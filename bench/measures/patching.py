"""`bench patch RUN_DIR`: attention patching between two checkpoints of one run.

The first paper's causal test of "emergence is the learning of the sparse attention pattern":
run the pre-emergence model with some heads' attention probabilities replaced by the
post-emergence model's on the same held-out sequences, and measure the change in the mean
probability of the correct token (dp) and in token accuracy. Reported: every (layer, head)
alone; the greedy head set for K = 1..all (each step adds the head that raises p most), with the
fraction of the pre-to-post gap in p restored; and the ground-truth pattern (row-normalised)
patched into every head of a layer, and of all layers. Writes RUN_DIR/patch/ (patch.json,
patch.md, patch.png). Needs the run's analysis checkpoints (`measure.keep_checkpoints=true`) and
a mixer that declares `PatchesAttention`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from architectures import PatchesAttention

from ..core import markdown
from ..core.emergence import on_plateau
from ..core.errors import ConfigError
from ..core.record import RunRecord
from ..core.reports import pyplot, write_report
from ..training.checkpoint import analysis_steps, finished_run, load_analysis_module
from ..training.config import build_run_task, load_run_config


def default_steps(result: RunRecord, kept: list[int]) -> tuple[int, int]:
    """(pre, post): the last kept checkpoint on the plateau (its end, which analysis
    checkpoints keep; else the last at or before it; else the last before the emergence step)
    and the first at or after emergence."""
    if not result.emerged:
        raise ConfigError(f"--pre/--post: the run did not emerge ({result.status}); give both "
                          f"steps (kept checkpoints: {kept})")
    emerged = result.steps_to_emergence
    end = result.plateau_end
    before = [s for s in kept if s <= end] if end is not None else []
    before = before or [s for s in kept if s < emerged]
    after = [s for s in kept if s >= emerged]
    if not before or not after:
        raise ConfigError(f"--pre/--post: no kept checkpoints on both sides of step {emerged} "
                          f"(kept: {kept})")
    return before[-1], after[0]


class Patcher:
    """The pre and post models on the held-out set; scores the pre model under patches."""

    def __init__(self, run_dir: Path, pre: int, post: int, config: dict[str, Any] | None = None):
        if config is None:
            config = finished_run(run_dir).config
        self.run_dir = run_dir
        self.cfg = load_run_config(config)
        self.task = build_run_task(self.cfg)
        self.models = {"post": load_analysis_module(run_dir, post, self.cfg, self.task)}
        self.pre_step: int | None = None
        self.use_pre(pre)
        post_layers = [m for m in self.models["post"].model.modules()
                       if isinstance(m, PatchesAttention)]
        es = self.task.eval_set(torch.device("cpu"))
        batch = self.task.eval_batch(torch.device("cpu"))
        held = ~es.probe
        scored = self.models["pre"].scored
        self.inputs = batch.inputs[held]
        self.targets = batch.targets[held].index_select(1, scored)
        self.counted = batch.counted[held].index_select(1, scored)
        self.chunks = torch.arange(len(self.inputs)).split(self.task.eval_rows)
        self.post_probs = []  # per chunk, per layer (B, H, L, L)
        with torch.no_grad():
            for rows in self.chunks:
                for m in post_layers:
                    m.record_attention = True
                self.models["post"].model(self.inputs[rows])
                self.post_probs.append([m.last_attention for m in post_layers])
                for m in post_layers:
                    m.record_attention, m.last_attention = False, None
        # each sequence's ground truth (per sequence for an in-context task), rows normalised
        N, L = self.inputs.shape
        pattern = torch.zeros(N, L, L)
        pattern[:, scored] = self.task.patterns(es.tokens[held])
        self.truth = pattern / pattern.sum(-1, keepdim=True).clamp_min(1)  # (N, L, L)
        self.has_parents = pattern.sum(-1) > 0  # (N, L)
        self.n_heads = [p.shape[1] for p in self.post_probs[0]]  # per layer
        self.heads = [(i, h) for i, n in enumerate(self.n_heads) for h in range(n)]

    def use_pre(self, step: int) -> None:
        """Load the pre model from the checkpoint at `step` (unless it is loaded already); the
        post side stays as it is."""
        if step == self.pre_step:
            return
        self.pre_step = step
        self.models["pre"] = load_analysis_module(self.run_dir, step, self.cfg, self.task)
        self.layers = [m for m in self.models["pre"].model.modules()
                       if isinstance(m, PatchesAttention)]

    @torch.no_grad()
    def score(self, model: str = "pre", heads: frozenset = frozenset(),
              truth_layers: frozenset = frozenset()) -> tuple[float, float]:
        """(mean p of the correct token, token accuracy) over the counted held-out positions,
        with `heads` (layer, head) taking the post model's probabilities and every head of
        `truth_layers` the ground truth's (rows without parents keep their own)."""
        total_p, total_right, count = 0.0, 0, 0
        module = self.models[model]
        masks = [torch.tensor([(i, h) in heads for h in range(n)])
                 for i, n in enumerate(self.n_heads)]
        for c, rows in enumerate(self.chunks):
            for i, m in enumerate(self.layers if model == "pre" else []):
                m.attention_patch = _patch(self.post_probs[c][i], masks[i], self.truth[rows],
                                           self.has_parents[rows], i in truth_layers)
            try:
                logits = module.model(self.inputs[rows]).index_select(1, module.scored)
            finally:
                for m in self.layers:
                    m.attention_patch = None
            probs = logits.float().softmax(-1)
            target, keep = self.targets[rows], self.counted[rows]
            p = probs.gather(-1, target[..., None]).squeeze(-1)
            total_p += float(p[keep].sum())
            total_right += int((logits.argmax(-1) == target)[keep].sum())
            count += int(keep.sum())
        return total_p / count, total_right / count


def _patch(post: torch.Tensor, mask: torch.Tensor, truth: torch.Tensor, has_parents: torch.Tensor,
           use_truth: bool):
    def apply(probs: torch.Tensor) -> torch.Tensor:
        out = torch.where(mask[None, :, None, None], post, probs)
        if use_truth:
            L = probs.shape[-1]
            rows = has_parents[:, None, :L, None]  # (B, 1, L, 1)
            out = torch.where(rows, truth[:, None, :L, :L].to(out.dtype).expand_as(out), out)
        return out
    return apply


def _checked(run_dir: Path, pre: int | None, post: int | None) -> tuple[RunRecord, int, int]:
    """(the run's record, pre, post) with the defaults filled in, or a one-line ConfigError."""
    result = finished_run(run_dir)
    kept = analysis_steps(run_dir)
    if not kept:
        raise ConfigError(f"RUN_DIR: {run_dir} has no analysis checkpoints; train it with "
                          "measure.keep_checkpoints=true")
    d_pre, d_post = (None, None) if pre is not None and post is not None else \
        default_steps(result, kept)
    given = pre is not None
    pre, post = (d_pre if pre is None else pre), (d_post if post is None else post)
    for flag, step in (("--pre", pre), ("--post", post)):
        if step not in kept:
            raise ConfigError(f"{flag}: no checkpoint at step {step}; kept: "
                              f"{', '.join(map(str, kept))}")
    if pre >= post:
        raise ConfigError(f"--pre: step {pre} must come before --post {post}" if given else
                          f"--post: step {post} must come after step {pre}, the default pre "
                          "checkpoint (the last on the plateau)")
    return result, pre, post


def _patcher(run_dir: Path, result: RunRecord, pre: int, post: int) -> Patcher:
    patcher = Patcher(run_dir, pre, post, result.config)
    if not patcher.layers:
        raise ConfigError(f"arch.name: mixer '{patcher.cfg.arch.name}' exposes no attention "
                          "probabilities to patch (it must declare PatchesAttention)")
    return patcher


def patch_run(run_dir: Path | str, pre: int | None = None, post: int | None = None) -> dict:
    """Patch and write RUN_DIR/patch/; return the report (as in patch.json)."""
    run_dir = Path(run_dir)
    result, pre, post = _checked(run_dir, pre, post)
    end = result.plateau_end
    report = {**analyse(_patcher(run_dir, result, pre, post), pre, post), "plateau_end": end,
              "on_plateau": on_plateau(pre, end)}
    write_files(run_dir / "patch", report)
    return report


def patch_curve(run_dir: Path | str, post: int | None = None) -> dict:
    """The patch from every kept checkpoint between the plateau's end (step 0 where none was
    observed) and `post`: does the post model's attention restore more of the gap as the pre
    model nears emergence? Writes RUN_DIR/patch/curve.{json,md,png}; returns the report."""
    run_dir = Path(run_dir)
    result, first, post = _checked(run_dir, None, post)
    end = result.plateau_end
    pres = [s for s in analysis_steps(run_dir) if min(first, end or 0) <= s < post]
    points, patcher = [], _patcher(run_dir, result, pres[0], post)
    for pre in pres:
        patcher.use_pre(pre)
        r = analyse(patcher, pre, post)
        points.append({"pre": pre, "on_plateau": on_plateau(pre, end), "p": r["pre"]["p"],
                       "acc": r["pre"]["acc"], "best_head": r["greedy"][0]["restored"],
                       "best_set": max((g["restored"] for g in r["greedy"]
                                        if g["restored"] is not None), default=None),
                       "all_heads": r["greedy"][-1]["restored"],
                       "truth_acc": r["ground_truth"][-1]["acc"]})
    post_p = r["post"]
    report = {"post": post_p, "plateau_end": end, "points": points}
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, label in (("best_head", "best head"), ("best_set", "best greedy set"),
                       ("all_heads", "all heads")):
        ax.plot(pres, [q[key] for q in points], marker="o", label=label)
    if end is not None:
        ax.axvline(end, color="grey", ls=":", label=f"plateau end (step {end})")
    ax.set_xlabel(f"pre checkpoint (post: step {post})")
    ax.set_ylabel("fraction of the gap in p restored")
    ax.legend(fontsize=7)
    write_report(run_dir / "patch", "curve", fig, report, curve_markdown(report))
    return report


def curve_markdown(r: dict[str, Any]) -> str:
    post, points = r["post"], r["points"]
    return "\n".join([
        f"# Attention patching from every kept checkpoint into step {post['step']} (post)", "",
        f"post p {fixed(post['p'])} / accuracy {fixed(post['acc'])}; "
        f"plateau end: {r['plateau_end']}. "
        "Restored: the fraction of each pre checkpoint's gap in p to the post model that the "
        "post model's attention closes.", "",
        *markdown.table(["pre", "on plateau", "p", "accuracy", "best head", "best greedy set",
                         "all heads", "ground truth accuracy"],
                        [[q["pre"], "yes" if q["on_plateau"] else "no", fixed(q["p"]),
                          fixed(q["acc"]), fixed(q["best_head"], 2), fixed(q["best_set"], 2),
                          fixed(q["all_heads"], 2), fixed(q["truth_acc"])] for q in points]),
        "", "![curve](curve.png)", ""])


def analyse(patcher: Patcher, pre: int, post: int) -> dict[str, Any]:
    p_pre, acc_pre = patcher.score("pre")
    p_post, acc_post = patcher.score("post")
    gap = p_post - p_pre

    def restored(p: float) -> float | None:
        return (p - p_pre) / gap if abs(gap) > 1e-9 else None

    singles = []
    for layer, head in patcher.heads:
        p, acc = patcher.score(heads=frozenset({(layer, head)}))
        singles.append({"layer": layer, "head": head, "dp": p - p_pre, "dacc": acc - acc_pre,
                        "restored": restored(p)})
    greedy, chosen = [], frozenset()
    remaining = list(patcher.heads)
    while remaining:
        scores = {h: patcher.score(heads=chosen | {h}) for h in remaining}
        best = max(remaining, key=lambda h: (scores[h][0], -h[0], -h[1]))
        chosen |= {best}
        remaining.remove(best)
        p, acc = scores[best]
        greedy.append({"k": len(chosen), "added": list(best), "p": p, "acc": acc,
                       "restored": restored(p)})
    n_layers = len(patcher.layers)
    truth = []
    for layers, label in [*((frozenset({i}), f"layer {i}") for i in range(n_layers)),
                          (frozenset(range(n_layers)), "all layers")]:
        p, acc = patcher.score(truth_layers=layers)
        truth.append({"where": label, "p": p, "acc": acc, "dp": p - p_pre, "dacc": acc - acc_pre,
                      "restored": restored(p)})
    return {"pre": {"step": pre, "p": p_pre, "acc": acc_pre},
            "post": {"step": post, "p": p_post, "acc": acc_post},
            "heads": singles, "greedy": greedy, "ground_truth": truth,
            "sequences": len(patcher.inputs), "job_id": patcher.cfg.job_id()}


def fixed(x: float | None, digits: int = 3) -> str:
    """x with `digits` decimals, or '-' where it is missing."""
    return "-" if x is None else f"{x:.{digits}f}"


def _off_plateau(r: dict[str, Any]) -> list[str]:
    if r.get("on_plateau", True):
        return []
    end = r.get("plateau_end")
    where = f"it ended at step {end}" if end is not None else "none was observed"
    return ["", f"The pre checkpoint is not on the plateau ({where}): the gap is what changed "
            "between two nearby checkpoints, and the fractions restored are unstable."]


def to_markdown(r: dict[str, Any]) -> str:
    pre, post = r["pre"], r["post"]
    lines = [f"# Attention patching: step {pre['step']} (pre) <- step {post['step']} (post)", "",
             f"{r['sequences']} held-out sequences. Mean probability of the correct token p and "
             f"token accuracy: pre {fixed(pre['p'])} / {fixed(pre['acc'])}, "
             f"post {fixed(post['p'])} / "
             f"{fixed(post['acc'])}. Restored: the fraction of the pre-to-post gap in p a patch "
             "closes.", *_off_plateau(r), "", "## One head at a time", "",
             *markdown.table(["layer", "head", "dp", "d accuracy", "restored"],
                             [[h["layer"], h["head"], fixed(h["dp"]), fixed(h["dacc"]),
                               fixed(h["restored"], 2)] for h in r["heads"]]),
             "", "## Greedy head sets", "",
             *markdown.table(["K", "added (layer, head)", "p", "accuracy", "restored"],
                             [[g["k"], tuple(g["added"]), fixed(g["p"]), fixed(g["acc"]),
                               fixed(g["restored"], 2)] for g in r["greedy"]]),
             "", "## The ground-truth pattern patched into every head", "",
             *markdown.table(["where", "p", "accuracy", "dp", "restored"],
                             [[t["where"], fixed(t["p"]), fixed(t["acc"]), fixed(t["dp"]),
                               fixed(t["restored"], 2)] for t in r["ground_truth"]]),
             "", "![patching](patch.png)", ""]
    return "\n".join(lines)


def write_files(out: Path, report: dict[str, Any]) -> None:
    """patch.json, patch.md and patch.png in `out`, each replaced atomically."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    labels = [f"L{h['layer']}H{h['head']}" for h in report["heads"]]
    a.bar(labels, [h["dp"] for h in report["heads"]])
    a.set_title("one head patched: change in p(correct)")
    a.tick_params(axis="x", rotation=90)
    b.plot([g["k"] for g in report["greedy"]], [g["p"] for g in report["greedy"]], marker="o",
           label="greedy head set")
    b.axhline(report["pre"]["p"], color="grey", ls=":", label=f"pre (step {report['pre']['step']})")
    b.axhline(report["post"]["p"], color="k", ls="--",
              label=f"post (step {report['post']['step']})")
    b.axhline(report["ground_truth"][-1]["p"], color="tab:green", ls="-.",
              label="ground truth, all heads")
    b.set_xlabel("heads patched (K)")
    b.set_ylabel("p(correct)")
    b.legend(fontsize=7)
    write_report(out, "patch", fig, report, to_markdown(report))
