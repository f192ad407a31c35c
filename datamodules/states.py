"""Tasks of states: a sequence of T states of S tokens, scored from the second state on.

**The held-out part is a set of states.** Small tasks have few states (a linear map on 6 bits has
64), so a separate random stream would draw every evaluation sequence within a few steps. Instead
the states are split by a fixed hash (salted by the task instance): a held-out state is never the
source x_t (t < T-1) of a training transition, enforced by vectorised rejection of whole
sequences. Evaluation sequences start from held-out states and score only the transitions whose
source is held out; a held-out part of at most `SMALL_HELD_OUT` states is evaluated whole, each
state once.
"""

from __future__ import annotations

import math

import torch

from .base import (
    EVAL_STREAM,
    MAX_ROUNDS,
    EvalSet,
    SequenceTask,
    derive_seed,
    join_tokens,
    make_generator,
)
from .config import ENUMERABLE, StateTaskConfig
from .split import all_states, state_hash

SMALL_HELD_OUT = 2048  # a held-out part this small is the evaluation set, each state once


class StateSequenceTask(SequenceTask):
    """Base DataModule for tasks whose sequences are T states of `state_size` tokens."""

    config: StateTaskConfig

    # --- what a concrete task defines -------------------------------------------------------
    state_size: int

    def rollout(self, x0: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Sequences (B, S*T) starting from the states x0 (B, S), on x0's device (a task that
        draws something per sequence, such as a rule, draws it from `generator`)."""
        raise NotImplementedError

    def parents(self) -> torch.Tensor:
        """(S, S) 0/1: [i, j] = 1 when token i of a state reads token j of the state before."""
        raise NotImplementedError

    def next_token_posterior(self, tokens: torch.Tensor) -> torch.Tensor:
        """Here every scored token is a function of the state before it (a one-hot); tasks whose
        sequences hide something (a rule drawn per sequence) override it."""
        scored = tokens[:, self.state_size :]
        if self.config.random_targets:
            return torch.full((*scored.shape, self.vocab_size), 1 / self.vocab_size)
        return torch.nn.functional.one_hot(scored, self.vocab_size).float()

    # --- shape ------------------------------------------------------------------------------
    @property
    def n_tokens(self) -> int:
        return self.state_size * self.config.n_states

    @property
    def group_size(self) -> int:
        return self.state_size  # exact accuracy: every token of a state right

    def summary(self) -> str:
        return (f"{self.config.n_states} states of {self.state_size} tokens, "
                f"vocab {self.vocab_size}")

    def sample_rows(self, tokens: torch.Tensor) -> list[str]:
        return [f"  x{t:<3} " + " ".join(map(str, state))
                for t, state in enumerate(tokens.view(-1, self.state_size).tolist())]

    def split_text(self, split: dict[str, int]) -> str:
        return (f"{split['held_out_states']:,} of {split['states']:,} states held out (never a "
                f"training source); {split['evaluated_transitions']:,} held-out transitions "
                f"evaluated")

    def loss_mask(self) -> torch.Tensor:
        """(L,) bool: the outputs that are scored (those predicting a token of x_1 .. x_{T-1})."""
        return torch.arange(self.seq_len) >= self.state_size - 1

    def attention_target(self) -> torch.Tensor:
        """Token p + 1 = x_{t+1}[i] reads x_t[j] at position t*S + j for every parent j of i."""
        S, T = self.state_size, self.config.n_states
        par = self.parents()
        target = torch.zeros(self.n_tokens, self.n_tokens, dtype=torch.long)  # (token, token)
        for t in range(T - 1):
            target[(t + 1) * S : (t + 2) * S, t * S : (t + 1) * S] = par
        return target[1:, :-1].contiguous()  # row p = token p + 1, column q = input position q

    def candidates(self, pattern: torch.Tensor) -> torch.Tensor:
        """The earlier tokens of the states that hold a position's parents (the choice the task
        poses: which tokens of the previous state to read)."""
        return state_candidates(pattern, self.scored_positions().to(pattern.device),
                                self.state_size)

    def replacement_values(self) -> torch.Tensor:
        """Every token of every state takes any of the task's values: the intervention map
        replaces a token with each other value (a flip on binary states)."""
        return torch.ones(self.seq_len, self.vocab_size, dtype=torch.bool)

    # --- the split ---------------------------------------------------------------------------
    @property
    def n_state_values(self) -> int:
        """Size of the state space V^S (an exact Python integer)."""
        return self.vocab_size ** self.state_size

    def is_held_out(self, states: torch.Tensor) -> torch.Tensor:
        """(..., S) states -> (...) bool: in the held-out part (a fixed hash of the instance)."""
        salt = derive_seed(self.instance_seed, EVAL_STREAM)
        return state_hash(states, salt) < self.config.held_out

    def sources(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, S*T) -> (B, T-1, S): the source state x_t of each transition."""
        return tokens.view(len(tokens), self.config.n_states, self.state_size)[:, :-1]

    def held_out_transitions(self, es: EvalSet) -> torch.Tensor:
        """(N, T-1) bool: transition t of each evaluation row counts (read off the first token
        of x_{t+1}, whose flag is its state's)."""
        return es.counted[:, self.state_size - 1 :: self.state_size]

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """`n` sequences (n, S*T) from uniform x_0, with no split applied (the pure generator)."""
        x0 = torch.randint(self.vocab_size, (n, self.state_size), generator=generator,
                           device=generator.device)
        return self.rollout(x0, generator)

    def training_sequences(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """No source x_0 .. x_{T-2} is held out. Whole batches are drawn and rejected at once
        (no loop per sequence)."""
        accept = (1 - self.config.held_out) ** (self.config.n_states - 1)
        kept, have = [], 0
        for _ in range(MAX_ROUNDS):
            tokens = self.sample(math.ceil((n - have) / accept * 1.25) + 8, generator)
            ok = ~self.is_held_out(self.sources(tokens)).any(1)
            kept.append(tokens[ok][: n - have])
            have += len(kept[-1])
            if have == n:
                return torch.cat(kept)
        raise RuntimeError(f"task: {MAX_ROUNDS} rounds drew {have} of {n} training sequences; "
                           "this instance's dynamics keep entering the held-out part")

    def held_out_states(self) -> torch.Tensor:
        """(N, S) the held-out start states of the evaluation set, on the CPU: every held-out
        state when there are at most SMALL_HELD_OUT, else `eval_size` distinct ones at random."""
        V, S, n = self.vocab_size, self.state_size, self.n_state_values
        gen = make_generator(self.instance_seed, EVAL_STREAM, 0, torch.device("cpu"))
        if n <= ENUMERABLE:
            states = all_states(V, S)
            held = states[self.is_held_out(states)]
            if len(held) == 0:
                raise ValueError(f"held_out: none of the {n} states is held out at "
                                 f"{self.config.held_out}; raise it")
            if len(held) <= SMALL_HELD_OUT:
                return held
            return held[torch.randperm(len(held), generator=gen)[: self.eval_size]]
        found = torch.empty(0, S, dtype=torch.long)
        for _ in range(MAX_ROUNDS):
            draw = torch.randint(V, (4 * self.eval_size, S), generator=gen)
            found = torch.unique(torch.cat([found, draw[self.is_held_out(draw)]]), dim=0)
            if len(found) >= self.eval_size:
                return found[torch.randperm(len(found), generator=gen)[: self.eval_size]]
        raise ValueError(f"held_out: found {len(found)} of {self.eval_size} held-out states "
                         f"at {self.config.held_out}; raise it")

    def held_out_sequences(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Rollouts of the held-out start states; a transition counts when its source is held
        out (a later state may leave the held-out part)."""
        cpu = torch.device("cpu")
        tokens = self.rollout(self.held_out_states(),
                              make_generator(self.instance_seed, EVAL_STREAM, 1, cpu))
        per_state = self.is_held_out(self.sources(tokens))  # (N, T-1)
        counted = per_state.repeat_interleave(self.state_size, dim=1)  # (N, S*(T-1))
        return tokens, torch.cat([counted.new_zeros(len(tokens), self.state_size - 1), counted],
                                 dim=1)

    def split_sizes(self) -> dict[str, int]:
        """Sizes of the state space, its held-out part (exact when enumerable, else expected),
        and of the evaluation set and probe."""
        n = self.n_state_values
        es = self.eval_set(torch.device("cpu"))
        if n <= ENUMERABLE:
            held = int(self.is_held_out(all_states(self.vocab_size, self.state_size)).sum())
        else:
            held = round(n * self.config.held_out)
        return {"states": n, "held_out_states": held, "training_states": n - held,
                "evaluated_sequences": int((~es.probe).sum()),
                "evaluated_transitions": int(self.held_out_transitions(es)[~es.probe].sum()),
                "probe_sequences": int(es.probe.sum())}

    def leaks(self, steps: range, device: torch.device = torch.device("cpu")) -> int:
        """Training transitions of `steps` whose source is a state the evaluation scores."""
        es = self.eval_set(device)
        held = self.held_out_transitions(es)[~es.probe]
        scored = self.sources(es.tokens[~es.probe])[held]  # (M, S)
        digits = self.vocab_size ** torch.arange(self.state_size, device=device)
        if self.n_state_values >= 2**62:
            raise ValueError("leaks: the state space is too large to encode states exactly")
        scored = (scored * digits).sum(-1)
        found = 0
        for step in steps:
            tokens = join_tokens(self.train_batch(step, device))
            found += int(torch.isin((self.sources(tokens) * digits).sum(-1), scored).sum())
        return found



def state_candidates(pattern: torch.Tensor, scored: torch.Tensor, state_size: int) -> torch.Tensor:
    """(..., P, L) bool: for the rows `scored` (P,) of a ground truth (..., P, L), the positions
    before the row's own that lie in a state (of `state_size` tokens) holding one of its
    parents."""
    q = torch.arange(pattern.shape[-1], device=pattern.device)
    before = q[None, :] < scored[:, None]  # (P, L)
    state = q // state_size
    parent_states = ((pattern > 0) & before).float() @ torch.nn.functional.one_hot(
        state, int(state.max()) + 1).float()  # (..., P, states): parents in each state
    return before & (parent_states > 0).gather(-1, state.expand(pattern.shape))
