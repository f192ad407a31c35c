"""`bench circuits RUN_DIR`: a head screen over a run's checkpoints ("When do attention circuits
form?").

On a fixed batch of `SCREEN_SEQUENCES` sequences of the run's own induction task (drawn from the
task's generator with a fixed stream, never a training batch), every attention head at every
analysis checkpoint gets a **selectivity ratio** per class: the mean attention a query puts on
the class's key positions divided by its mean attention on the other keys it may read, pooled
over the queries where the class is defined (both sums over queries before dividing):

| class | queries | keys |
|---|---|---|
| induction | inside the copies (the second A) | after each earlier occurrence of its token (B) |
| duplicate | inside the copies | each earlier occurrence of the current token (the first A) |
| previous | every position but the first | the position before |
| first | every position but the first | the first token (an attention sink) |
| self | every position but the first | the query's own position |
| local | positions with a full window | the `LOCAL_WINDOW` positions before |

A head is in a class when its ratio reaches the class's threshold (defaults `THRESHOLDS`: 50x for
induction and 30x for the first token as in the paper; the others are this suite's choice, all
settable); a head above several thresholds is assigned the class it exceeds by the largest
factor, one below all is unclassified. Beside the ratios, each head's **participation ratio**
(PR = (sum of eigenvalues)^2 / sum of squares, of the covariance of the head's output at the
copies' queries in the batch's first chunk of `eval_rows` sequences: the number of directions it
writes, 1 .. d) measures the spectral diversity of its output; a head's output is read as the
mixer's output with every other head's attention zeroed, so any `PatchesAttention` mixer can be
screened.

Over the checkpoints: per layer, the fraction of heads in each class; the formation step of
induction (first checkpoint with an induction head) and of sinks (first checkpoint where the
fraction of first-token heads reaches half its final value); the early-identification curve
(the fraction of the final induction heads already classified induction); per final induction
head, whether its PR rises (first reaches half way from its first to its largest value) at or
before the checkpoint where its induction ratio crosses the threshold; and, at the last
checkpoint, group ablation: the change in loss on the scored targets of the batch when the
induction heads' attention is zeroed, beside zeroing as many other heads; and the same with the
heads' attention replaced by its mean pattern over the batch (mean-pattern ablation: a head keeps
what it does at each position on average and loses only what depends on the content, so a
positional head such as previous-token is left intact; zeroing 4-8 heads of a small model breaks
it whichever heads they are).
Writes RUN_DIR/circuits/ (circuits.json, circuits.md, circuits.png).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from architectures import PatchesAttention

from ..core import markdown
from ..core.errors import ConfigError
from ..core.heads import CLASSES, THRESHOLDS, half_and_shape
from ..core.record import RunRecord
from ..core.reports import pyplot, write_report
from ..training.checkpoint import analysis_steps, finished_run, load_analysis_module
from ..training.config import build_run_task, load_run_config

SCREEN_SEQUENCES = 2000
SCREEN_STREAM = 5  # the screen batch's own generator stream
LOCAL_WINDOW = 4
ABLATION_SEED = 0
SUMMARY_KEYS = ("thresholds", "overall", "formation", "induction_formation_step", "sink_half_step",
                "sink_shape", "early_identification", "induction_heads",
                "sinks_in_layers_0_1_at", "ablation", "sequences")


def parse_thresholds(items: list[str]) -> dict[str, float]:
    """`class=value` overrides of THRESHOLDS; one line unless every class is known and every
    value a finite number > 1."""
    out = dict(THRESHOLDS)
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in THRESHOLDS:
            raise ConfigError(f"--threshold: must be CLASS=VALUE with CLASS one of "
                              f"{', '.join(CLASSES)}, got {item!r}")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and number > 1):
            raise ConfigError(f"--threshold: {name} must be a number > 1 (a ratio of attention "
                              f"on the class's keys to the others'), got {value!r}")
        out[name] = number
    return out


def class_keys(task: Any, tokens: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per class: (queries (N, L) bool, keys (N, L, L) bool) over input positions."""
    N, L = len(tokens), task.seq_len
    inputs = tokens[:, :L]
    q = torch.arange(L)
    causal = q[None, :] <= q[:, None]  # (L, L) key <= query
    copies = task.loss_mask().expand(N, L)
    induction = torch.zeros(N, L, L, dtype=torch.bool)
    induction[:, task.scored_positions()] = task.patterns(tokens) > 0
    same = (inputs[:, :, None] == inputs[:, None, :]) & (q[None, :] < q[:, None])
    later = (q >= 1).expand(N, L)

    def offsets(*back: int) -> torch.Tensor:
        keys = torch.zeros(L, L, dtype=torch.bool)
        for b in back:
            keys |= q[None, :] == (q[:, None] - b)
        return keys.expand(N, L, L)

    first = torch.zeros(L, L, dtype=torch.bool)
    first[1:, 0] = True
    return {"induction": (copies, induction), "duplicate": (copies, same & causal),
            "previous": (later, offsets(1)), "first": (later, first.expand(N, L, L)),
            "self": (later, offsets(0)),
            "local": ((q >= LOCAL_WINDOW).expand(N, L), offsets(*range(1, LOCAL_WINDOW + 1)))}


class Screen:
    """One checkpoint's model on the screen batch: attention, head outputs, ablated loss."""

    def __init__(self, module: Any, task: Any, tokens: torch.Tensor):
        self.module, self.task, self.tokens = module, task, tokens
        self._mean: list[torch.Tensor] | None = None
        self.layers = [m for m in module.model.modules() if isinstance(m, PatchesAttention)]
        self.chunks = torch.arange(len(tokens)).split(task.eval_rows)
        self.n_heads = [a.shape[1] for a in self.attention(self.chunks[0][:1])]  # per layer

    @torch.no_grad()
    def attention(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """Per layer, the (B, H, L, L) attention probabilities on the screen batch's `rows`."""
        for m in self.layers:
            m.record_attention = True
        try:
            self.module.model(self.tokens[rows, : self.task.seq_len])
            return [m.last_attention.float() for m in self.layers]
        finally:
            for m in self.layers:
                m.record_attention, m.last_attention = False, None

    @torch.no_grad()
    def ratios(self, keys: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """(layers, heads, classes) selectivity ratios."""
        sums: dict[str, torch.Tensor] = {}  # "class/layer" -> (2, H): sums on and off the keys
        L = self.task.seq_len
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        for rows in self.chunks:
            probs = self.attention(rows)  # per layer (B, H, L, L)
            for name, (queries, on) in keys.items():
                on, queries = on[rows], queries[rows]
                off = causal & ~on
                valid = (queries & on.any(-1) & off.any(-1)).float()[:, None]  # (B, 1, L)
                for i, a in enumerate(probs):
                    mean_on = (a * on[:, None]).sum(-1) / on.sum(-1).clamp_min(1)[:, None]
                    mean_off = (a * off[:, None]).sum(-1) / off.sum(-1).clamp_min(1)[:, None]
                    got = torch.stack([(mean_on * valid).sum((0, 2)),
                                       (mean_off * valid).sum((0, 2))])  # (2, H)
                    key = f"{name}/{i}"
                    sums[key] = got if key not in sums else sums[key] + got
        return torch.stack([torch.stack([sums[f"{name}/{i}"][0] / sums[f"{name}/{i}"][1]
                                         .clamp_min(1e-12) for name in CLASSES], dim=-1)
                            for i in range(len(self.layers))])

    @torch.no_grad()
    def participation(self) -> torch.Tensor:
        """(layers, heads) participation ratio of each head's output at the copies' queries, over
        the screen batch's first chunk (`eval_rows` sequences, all of a small batch)."""
        at = self.task.scored_positions()
        out = []
        for i, (layer, n_heads) in enumerate(zip(self.layers, self.n_heads)):
            row = []
            for h in range(n_heads):
                keep = torch.zeros(n_heads, dtype=torch.bool)
                keep[h] = True
                outputs = []
                handle = layer.register_forward_hook(
                    lambda _m, _i, y: outputs.append(y[:, at].reshape(-1, y.shape[-1])))
                try:
                    self._forward_masked({i: ~keep}, limit=1)
                finally:
                    handle.remove()
                row.append(_participation_ratio(torch.cat(outputs).float()))
            out.append(row)
        return torch.tensor(out)

    @torch.no_grad()
    def mean_attention(self) -> list[torch.Tensor]:
        """Per layer, the (H, L, L) attention pattern averaged over the whole screen batch (each
        row still sums to 1 and is causal); computed once."""
        if self._mean is None:
            sums = [a.sum(0) for a in self.attention(self.chunks[0])]
            for rows in self.chunks[1:]:
                sums = [s + a.sum(0) for s, a in zip(sums, self.attention(rows))]
            self._mean = [s / len(self.tokens) for s in sums]
        return self._mean

    @torch.no_grad()
    def loss(self, zeroed: dict[int, torch.Tensor] | None = None, mean: bool = False) -> float:
        """Mean loss on the scored targets with the attention of the `zeroed` heads (layer ->
        (H,) bool) set to 0, or with `mean`, replaced by their average pattern over the batch
        (`mean_attention`: a head keeps what it does at every position on average and loses
        only what depends on the content, so a positional head is left intact)."""
        total, count = 0.0, 0
        at = self.task.scored_positions()
        for logits, rows in self._forward_masked(zeroed or {}, mean=mean):
            tokens = self.tokens[rows]
            target, keep = self.task.split(tokens).targets[:, at], self.task.train_counted(tokens)
            keep = torch.ones_like(target, dtype=torch.bool) if keep is None else keep[:, at]
            total += float(F.cross_entropy(logits[:, at][keep].float(), target[keep],
                                           reduction="sum"))
            count += int(keep.sum())
        return total / count

    def _forward_masked(self, zeroed: dict[int, torch.Tensor], limit: int | None = None,
                        mean: bool = False):
        """Forward the screen batch (its first `limit` chunks) with zeroed heads (or, with
        `mean`, heads given their mean pattern); (logits, rows) per chunk."""
        results = []
        means = self.mean_attention() if mean else None
        for rows in self.chunks[:limit]:
            for i, mask in zeroed.items():
                fill = 0.0 if means is None else means[i][None]
                self.layers[i].attention_patch = (
                    lambda probs, m=mask, f=fill: torch.where(
                        m[None, :, None, None], torch.as_tensor(f, dtype=probs.dtype), probs))
            try:
                results.append((self.module.model(self.tokens[rows, : self.task.seq_len]), rows))
            finally:
                for m in self.layers:
                    m.attention_patch = None
        return results


def _participation_ratio(x: torch.Tensor) -> float:
    """(M, d) vectors -> (sum of covariance eigenvalues)^2 / sum of their squares: 1 .. d, and
    0 for an output that does not vary (it writes no direction)."""
    scale = float(x.double().square().mean())  # the output's size, before centring
    x = x.double() - x.double().mean(0)
    eig = torch.linalg.eigvalsh(x.T @ x / max(len(x) - 1, 1)).clamp_min(0)
    if eig.sum() <= 1e-10 * max(scale * x.shape[1], 1e-300):
        return 0.0
    return float(eig.sum() ** 2 / eig.square().sum())


def classify(ratios: torch.Tensor, thresholds: dict[str, float]) -> list[list[str]]:
    """(layers, heads, classes) ratios -> each head's class ('' when below every threshold)."""
    limits = torch.tensor([thresholds[c] for c in CLASSES])
    factor = ratios / limits
    best = factor.argmax(-1)
    return [[CLASSES[int(best[i, h])] if factor[i, h, best[i, h]] >= 1 else ""
             for h in range(ratios.shape[1])] for i in range(ratios.shape[0])]


def screen_run(run_dir: Path | str, thresholds: dict[str, float] | None = None,
               sequences: int = SCREEN_SEQUENCES) -> dict[str, Any]:
    """Screen every analysis checkpoint of RUN_DIR; write RUN_DIR/circuits/ and return the
    report (as in circuits.json)."""
    from datamodules.base import make_generator

    run_dir = Path(run_dir)
    thresholds = thresholds or dict(THRESHOLDS)
    result = finished_run(run_dir)
    cfg = load_run_config(result.config)
    if cfg.task.name != "induction":
        raise ConfigError(f"RUN_DIR: the head screen needs a run on the induction task, this one "
                          f"trained on {cfg.task.name}")
    kept = analysis_steps(run_dir)
    if not kept:
        raise ConfigError(f"RUN_DIR: {run_dir} has no analysis checkpoints; train it with "
                          "measure.keep_checkpoints=true")
    task = build_run_task(cfg)
    tokens = task.sample(sequences, make_generator(task.instance_seed, SCREEN_STREAM, 0,
                                                   torch.device("cpu")))
    keys = class_keys(task, tokens)
    steps = []
    for step in kept:
        screen = Screen(load_analysis_module(run_dir, step, cfg, task), task, tokens)
        if not screen.layers:
            raise ConfigError(f"arch.name: mixer '{cfg.arch.name}' exposes no attention to "
                              "screen (it must declare PatchesAttention)")
        ratios = screen.ratios(keys)
        steps.append({"step": step, "ratios": ratios.tolist(),
                      "classes": classify(ratios, thresholds),
                      "participation": screen.participation().tolist(),
                      "loss": screen.loss()})
    report = summarise(steps, thresholds, result)
    report["ablation"] = ablate(screen, steps[-1]["classes"])
    report.update(sequences=sequences, job_id=cfg.job_id(), task=result.config["task"])
    write_files(run_dir / "circuits", report)
    return report


def ablate(screen: Screen, classes: list[list[str]]) -> dict[str, Any]:
    """Loss change when the induction heads' attention is zeroed, and when as many other heads'
    is (chosen with a fixed seed); and the same with their attention replaced by its mean
    pattern over the batch (`_mean` keys), which leaves a head's positional role in place: zeroing
    a few heads can break a small model whichever heads they are."""
    heads = [(i, h) for i, row in enumerate(classes) for h in range(len(row))]
    induction = [(i, h) for i, h in heads if classes[i][h] == "induction"]
    others = [x for x in heads if x not in induction]
    gen = torch.Generator().manual_seed(ABLATION_SEED)
    control = [others[int(j)] for j in torch.randperm(len(others), generator=gen)]
    control = control[: len(induction)]
    base = screen.loss()

    def masked(chosen: list[tuple[int, int]]) -> dict[int, torch.Tensor]:
        out: dict[int, torch.Tensor] = {}
        for i, h in chosen:
            out.setdefault(i, torch.zeros(len(classes[i]), dtype=torch.bool))[h] = True
        return out

    def dloss(chosen: list[tuple[int, int]], mean: bool) -> float | None:
        return screen.loss(masked(chosen), mean=mean) - base if chosen else None

    return {"loss": base, "induction_heads": induction, "control_heads": control,
            "dloss_induction": dloss(induction, False), "dloss_control": dloss(control, False),
            "dloss_induction_mean": dloss(induction, True),
            "dloss_control_mean": dloss(control, True)}


def summarise(steps: list[dict[str, Any]], thresholds: dict[str, float],
              result: RunRecord) -> dict[str, Any]:
    """Fractions per layer and class, formation steps, early identification and the PR check."""
    at = [s["step"] for s in steps]
    fractions = [{c: [sum(h == c for h in layer) / len(layer) for layer in s["classes"]]
                  for c in CLASSES} for s in steps]
    overall = {c: [sum(h == c for layer in s["classes"] for h in layer)
                   / sum(len(layer) for layer in s["classes"]) for s in steps] for c in CLASSES}
    formation = {c: next((s for s, f in zip(at, overall[c]) if f > 0), None) for c in CLASSES}
    induction_step = formation["induction"]
    sink_half, shape = half_and_shape(at, overall["first"])
    final = {(i, h) for i, layer in enumerate(steps[-1]["classes"])
             for h, c in enumerate(layer) if c == "induction"}
    identified = [len(final & {(i, h) for i, layer in enumerate(s["classes"])
                               for h, c in enumerate(layer) if c == "induction"}) / len(final)
                  if final else None for s in steps]
    k = CLASSES.index("induction")
    heads = []
    for i, h in sorted(final):
        ratio = [s["ratios"][i][h][k] for s in steps]
        pr = [s["participation"][i][h] for s in steps]
        crossed = next(s for s, r in zip(at, ratio) if r >= thresholds["induction"])
        half = pr[0] + (max(pr) - pr[0]) / 2
        rises = next((s for s, v in zip(at, pr) if v >= half), None) if max(pr) > pr[0] else None
        heads.append({"layer": i, "head": h, "crossed": crossed, "pr_rises": rises,
                      "pr_first": pr[0], "pr_last": pr[-1],
                      "pr_at_or_before": rises is not None and rises <= crossed})
    sinks_in_early_layers = [s["step"] for s in steps
                             if any(c == "first" for layer in s["classes"][:2] for c in layer)]
    return {"steps": steps, "thresholds": thresholds, "fractions": fractions, "overall": overall,
            "formation": formation,
            "induction_formation_step": induction_step, "sink_half_step": sink_half,
            "sink_shape": shape, "early_identification": identified,
            "induction_heads": heads, "sinks_in_layers_0_1_at": sinks_in_early_layers,
            "max_steps": result.config["train"]["max_steps"],
            "steps_to_emergence": result.steps_to_emergence}


def fixed(x: float | None, digits: int = 2) -> str:
    """x with `digits` decimals, or '-' where it is missing."""
    return "-" if x is None else f"{x:.{digits}f}"


def to_markdown(r: dict[str, Any]) -> str:
    last = r["steps"][-1]
    rows = []
    for i, layer in enumerate(last["classes"]):
        for h, c in enumerate(layer):
            rows.append([i, h, c or "-", *(fixed(v, 1) for v in last["ratios"][i][h]),
                         fixed(last["participation"][i][h])])
    over = [[s["step"], *(fixed(r["overall"][c][j]) for c in CLASSES),
             fixed(r["early_identification"][j]), fixed(s["loss"], 3)]
            for j, s in enumerate(r["steps"])]
    ab = r["ablation"]
    thresholds = ", ".join(f"{c} {v:g}x" for c, v in r["thresholds"].items())
    lines = [f"# Head screen: {len(r['steps'])} checkpoints, {r['sequences']} induction sequences",
             "", f"Thresholds: {thresholds}. Induction forms at step "
             f"{r['induction_formation_step'] or '-'} (first checkpoint with an induction head); "
             f"the first-token (sink) fraction reaches half its final value at step "
             f"{r['sink_half_step'] or '-'} ({r['sink_shape']}). Sink heads in layers 0-1 at "
             f"steps: {r['sinks_in_layers_0_1_at'] or 'none'}. First checkpoint with a head of "
             "each class: " + ", ".join(f"{c} {'-' if s is None else s}"
                                        for c, s in r["formation"].items()) + ".", "",
             f"## Heads at step {last['step']} (selectivity ratios)", "",
             *markdown.table(["layer", "head", "class", *CLASSES, "PR"], rows),
             "", "## Over training (fraction of all heads per class)", "",
             *markdown.table(["step", *CLASSES, "final induction identified", "loss"], over),
             "", "## Induction heads: participation ratio against the threshold crossing", "",
             *markdown.table(["layer", "head", "ratio crosses", "PR rises", "PR first", "PR last",
                              "at or before"],
                             [[h["layer"], h["head"], h["crossed"], h["pr_rises"] or "-",
                               fixed(h["pr_first"]), fixed(h["pr_last"]),
                               "yes" if h["pr_at_or_before"] else "no"]
                              for h in r["induction_heads"]]),
             "", "## Group ablation at the last checkpoint", "",
             f"Loss {fixed(ab['loss'], 3)}; zeroing the {len(ab['induction_heads'])} induction "
             f"heads: {fixed(ab['dloss_induction'], 3)}; zeroing as many other heads "
             f"{ab['control_heads']}: {fixed(ab['dloss_control'], 3)}. With their attention "
             f"replaced by its mean pattern over the batch instead (a head keeps its positional "
             f"role): induction heads {fixed(ab.get('dloss_induction_mean'), 3)}, other heads "
             f"{fixed(ab.get('dloss_control_mean'), 3)}.", "",
             "![head classes over training](circuits.png)", ""]
    return "\n".join(lines)


def write_files(out: Path, report: dict[str, Any]) -> None:
    """circuits.json, circuits.md and circuits.png in `out`, each replaced atomically."""
    plt = pyplot()
    steps = [max(s["step"], 1) for s in report["steps"]]
    n_layers = len(report["steps"][0]["classes"])
    fig, axes = plt.subplots(1, n_layers, figsize=(3.2 * n_layers, 3), squeeze=False,
                             sharey=True)
    for i, ax in enumerate(axes[0]):
        for c in CLASSES:
            ax.plot(steps, [f[c][i] for f in report["fractions"]], marker=".", label=c)
        ax.set_xscale("log")
        ax.set_title(f"layer {i}")
        ax.set_xlabel("step")
    axes[0][0].set_ylabel("fraction of heads")
    axes[0][-1].legend(fontsize=7)
    write_report(out, "circuits", fig, report, to_markdown(report))
