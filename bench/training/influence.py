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
"""

from __future__ import annotations

import torch
from torch import nn
from torchmetrics.functional.classification import binary_auroc

TOKEN_BUDGET = 1 << 16  # input tokens per forward-backward pass
SHARE = 0.05  # the automatic cadence keeps the map's gradient passes within this share of the
# training sequences between two maps


def row_sample(n_scored: int, rows: int) -> torch.Tensor:
    """Indices into the scored positions of the `rows` rows an influence map measures, evenly
    spaced from the first to the last (all of them for rows = 0 or rows >= n_scored)."""
    if not rows or rows >= n_scored:
        return torch.arange(n_scored)
    return torch.linspace(0, n_scored - 1, rows).round().long().unique()


def cadence(size: int, rows: int, eval_every: int, batch_size: int, every: int = 0) -> int:
    """Every how many evaluations the map is computed: `every`, or with 0 the smallest k whose
    size x rows gradient passes stay within SHARE of the k x eval_every x batch_size training
    sequences between two maps."""
    if every:
        return every
    return max(1, -(-size * rows // max(1, int(SHARE * eval_every * batch_size))))


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
