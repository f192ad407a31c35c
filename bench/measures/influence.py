"""A mixing pattern for every mixer: the influence map.

For a scored position p and an input position q, I[p, q] is the norm of the gradient of the
logit of the correct next token at p with respect to the input embedding at q (token plus
position), averaged over held-out sequences, and each row normalised to sum to 1. It needs
nothing from the mixer but its forward pass, so attention, the MLP-Mixer, the recurrent mixers
and any plug-in get the same measurement; for a causal mixer I[p, q] = 0 for q > p.

Alignment with the ground truth reads the positions a mixer can read other than p itself (every
backbone's residual path makes p read itself): the **mass on the parents**, the share of a row's
influence on q < p that falls on p's parents, and the **AUROC** of the parents against the other
candidates the task poses (`SequenceTask.candidates`: for a task of states, the other tokens of
the states that hold the parents, i.e. which tokens of the previous state to read; for an
in-context task, every earlier position), ranked by influence within a row: 0.5 no preference,
1 every parent above every other candidate. Both are means over the scored rows that have
parents and other candidates. A fixed pattern is compared with the mean map; a per-sequence one
(a copied segment's source, a key's value) with each sequence's own map.

**The intervention map** measures the same thing without gradients: I[p, q] is the mean total
variation distance between the model's predicted distributions at scored position p before and
after the token at input position q is replaced, over held-out sequences and replacements, each
row normalised to sum to 1. A replacement at q is another value the task's own sequences take
there (`SequenceTask.replacement_values`): every other value where there are at most
`values` of them (a flip on binary states), else `values` of them drawn without repetition,
fixed for the run (so maps at different steps differ only by the model). Forward passes only,
copies of the evaluation sequences batched together. Where the gradient map is local and
first-order (a target that is an XOR of two parents, or a saturated output, can have zero
gradient at its parents), the intervention map sees any dependence that changes the
prediction; the mechanism verdicts read it (docs/guide.md). Total variation rather than the
change in the answer's log-probability: it sees a change of the prediction that leaves the
answer's probability alone, and it is bounded (a confident model's log-probability moves by
tens where nothing of the prediction changed).
"""

from __future__ import annotations

from fractions import Fraction

import torch
from torch import nn
from torchmetrics.functional.classification import binary_auroc

TOKEN_BUDGET = 1 << 16  # input tokens per forward-backward pass
REPLACEMENTS = 4  # replacement values per position where a position takes more
FORWARD_SHARE = 3  # a forward pass costs about a third of a forward-backward one
# the automatic cadence keeps the maps' passes within this share of the training sequences
# between two maps (why 3%: docs/performance.md)
SHARE = Fraction(3, 100)


def row_sample(n_scored: int, rows: int) -> torch.Tensor:
    """Indices into the scored positions of the `rows` rows an influence map measures, evenly
    spaced from the first to the last (all of them for rows = 0 or rows >= n_scored)."""
    if not rows or rows >= n_scored:
        return torch.arange(n_scored)
    return torch.linspace(0, n_scored - 1, rows).round().long().unique()


def cadence(size: int, rows: int, eval_every: int, batch_size: int, every: int = 0,
            replaced: int = 0) -> int:
    """Every how many evaluations the maps are computed: `every`, or with 0 the smallest k whose
    size x rows gradient passes and size x `replaced` forward passes (the intervention map's
    copies, a third of the cost each) stay within SHARE of the k x eval_every x batch_size
    training sequences between two maps."""
    if every:
        return every
    cost = size * rows + -(-size * replaced // FORWARD_SHARE)
    return max(1, -(-cost // (SHARE * eval_every * batch_size)))  # exact: no rounding


def influence_map(model: nn.Module, embed: nn.Module, tokens: torch.Tensor,
                  targets: torch.Tensor, scored: torch.Tensor,
                  per_sequence: bool = False) -> torch.Tensor:
    """(P, L) influence of each input position on the correct logit at each scored position,
    mean over the B sequences of `tokens` (B, L), rows normalised; with `per_sequence`, (B, P,
    L), each sequence's own map. `embed` is the module whose output is the input embedding (its
    gradient is taken there); `targets` (B, L) the next tokens. The model's parameters' .grad
    are not touched."""
    B, L = tokens.shape
    influence = torch.zeros(B, len(scored), L, device=tokens.device)
    for seqs in torch.arange(B, device=tokens.device).split(max(1, TOKEN_BUDGET // L)):
        b = len(seqs)
        per_pass = max(1, TOKEN_BUDGET // (b * L))  # positions whose copies share one pass
        for start in range(0, len(scored), per_pass):
            pos = scored[start:start + per_pass]
            norms = _grad_norms(model, embed, tokens[seqs], targets[seqs], pos)  # (n, b, L)
            influence[seqs, start:start + len(pos)] = norms.transpose(0, 1)
    if not per_sequence:
        influence = influence.mean(0)
    return influence / influence.sum(-1, keepdim=True).clamp_min(1e-30)


def _grad_norms(model: nn.Module, embed: nn.Module, tokens: torch.Tensor, targets: torch.Tensor,
                pos: torch.Tensor) -> torch.Tensor:
    """(n, b, L): for each position in `pos` and sequence, the gradient norm of the correct
    logit there with respect to every input embedding. One pass: copy j of the b sequences
    answers for position pos[j]."""
    n, (b, L) = len(pos), tokens.shape
    leaf: dict[str, torch.Tensor] = {}

    def capture(_module, _inputs, output):
        leaf["e"] = output.detach().requires_grad_(True)
        return leaf["e"]

    handle = embed.register_forward_hook(capture)
    try:
        logits = model(tokens.repeat(n, 1))  # (n*b, L, V)
    finally:
        handle.remove()
    at = pos.repeat_interleave(b)
    row = torch.arange(n * b, device=tokens.device)
    picked = logits[row, at, targets.repeat(n, 1)[row, at]].float().sum()
    (grad,) = torch.autograd.grad(picked, leaf["e"])  # (n*b, L, D)
    return grad.float().norm(dim=-1).view(n, b, L)


def replacement_plan(inputs: torch.Tensor, valid: torch.Tensor, upto: int,
                     values: int = REPLACEMENTS,
                     seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The intervention map's replacements for the sequences `inputs` (N, L): positions (M,)
    and the value each sequence takes there (M, N), R_q rows for each input position q <
    `upto` (every position a causal mixer lets the measured rows read). `valid` (L, V) bool:
    the values position q may take (`SequenceTask.replacement_values`). R_q = min(`values`,
    fewest alternatives to a sequence's own token at q), each sequence's R_q values distinct
    and other than its own token, drawn from a generator seeded by `seed`."""
    gen = torch.Generator().manual_seed(seed)
    inputs, valid = inputs.cpu(), valid.cpu()
    positions, replaced = [], []
    for q in range(min(upto, inputs.shape[1])):
        other = valid[q].expand(len(inputs), -1).clone()  # (N, V)
        other[torch.arange(len(inputs)), inputs[:, q]] = False
        r = min(values, int(other.sum(-1).min()))
        if r < 1:
            continue
        scores = torch.rand(other.shape, generator=gen).masked_fill(~other, -1.0)
        drawn = scores.topk(r, dim=-1).indices  # (N, r): distinct, each an alternative
        positions += [q] * r
        replaced.append(drawn.T)
    if not replaced:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, len(inputs), dtype=torch.long)
    return torch.tensor(positions), torch.cat(replaced)


@torch.no_grad()
def intervention_map(model: nn.Module, inputs: torch.Tensor, rows: torch.Tensor,
                     positions: torch.Tensor, values: torch.Tensor,
                     per_sequence: bool = False) -> torch.Tensor:
    """(P, L) intervention map of `model` (token ids (B, L) -> logits (B, L, V)) at the input
    positions `rows` (P,), mean over the N sequences `inputs` (N, L), rows normalised; with
    `per_sequence`, (N, P, L). `positions` (M,) and `values` (M, N) are the replacements
    (`replacement_plan`): copy m of the sequences holds values[m] at positions[m]. I[p, q] is
    the total variation distance between the predictions at p with and without the
    replacement, averaged over q's replacements (zero where q has none)."""
    N, L = inputs.shape
    positions, values = positions.to(inputs.device), values.to(inputs.device)
    base = model(inputs)[:, rows].float().softmax(-1)  # (N, P, V)
    change = torch.zeros(N, len(rows), L, device=inputs.device)
    for chunk in torch.arange(len(positions), device=inputs.device).split(
            max(1, TOKEN_BUDGET // (N * L))):
        c, pos = len(chunk), positions[chunk]
        copies = inputs.repeat(c, 1).view(c, N, L)
        copies[torch.arange(c, device=inputs.device), :, pos] = values[chunk]
        probs = model(copies.view(c * N, L))[:, rows].float().softmax(-1).view(c, N, -1,
                                                                              base.shape[-1])
        tv = 0.5 * (probs - base).abs().sum(-1)  # (c, N, P)
        change.index_add_(2, pos, tv.permute(1, 2, 0))
    count = torch.zeros(L, device=inputs.device).index_add_(
        0, positions, torch.ones(len(positions), device=inputs.device))
    change = change / count.clamp_min(1)
    if not per_sequence:
        change = change.mean(0)
    return change / change.sum(-1, keepdim=True).clamp_min(1e-30)


def alignment(influence: torch.Tensor, pattern: torch.Tensor, scored: torch.Tensor,
              candidates: torch.Tensor) -> tuple[float, float]:
    """(mass on the parents, AUROC of the parents against the other candidates) of influence
    maps (..., P, L) against the ground truth (..., P, L) at the scored positions `scored`
    (P,); `candidates` (..., P, L) bool: the earlier positions each row chooses its parents
    among (the parents are the candidates the pattern sets). The mass is the share of a row's
    influence on all earlier positions (and on p itself where p is a candidate) that falls on
    its parents: at most 1."""
    L = influence.shape[-1]
    before = torch.arange(L, device=influence.device) < scored[:, None]  # (P, L)
    influence, pattern, candidates = (x.expand(pattern.shape).reshape(-1, *pattern.shape[-2:])
                                      for x in (influence, pattern, candidates))
    parents = (pattern > 0) & candidates
    masses, aurocs = [], []
    for m in range(influence.shape[0]):
        for p in range(influence.shape[1]):
            own, choice = parents[m, p], candidates[m, p]
            if not own.any() or not (choice & ~own).any():
                continue
            row = influence[m, p]  # a task may pose p itself as a candidate (Dyck: the
            # innermost bracket can be the current token): then p counts in the denominator too
            masses.append(float(row[own].sum() / row[before[p] | choice].sum().clamp_min(1e-30)))
            aurocs.append(float(binary_auroc(row[choice], own[choice].long())))
    if not masses:
        return float("nan"), float("nan")
    return sum(masses) / len(masses), sum(aurocs) / len(aurocs)
