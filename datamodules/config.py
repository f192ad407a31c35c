"""Every task's config: typed dataclasses validated in `__post_init__`, and what tables and
figures ask a task without building it (the fields a label shows, derived axes).

They live apart from the generators so that cheap commands (`bench status`, `bench leaderboard`,
`bench ls`) read them without importing torch or Lightning; `config.build()` imports the task's
LightningDataModule (named by `DATAMODULE`) when a run needs it. A new task adds its config here,
its generator and DataModule in its own file, and one line to `TASKS` in `__init__.py`.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any, ClassVar

PER_SEED = "per_seed"
SEED_LIMIT = 2**32  # seeds are 0 .. 2^32 - 1 (numpy's range)
MAX_TOKENS_PER_STATE = 1024
MAX_STATES = 1024
MAX_VOCAB = 2**20


def check_range(config: Any, name: str, low: int, high: int, why: str = "") -> None:
    """One-line ValueError unless low <= config.name <= high."""
    value = getattr(config, name)
    if not low <= value <= high:
        raise ValueError(f"{name}: must be in {low}..{high}{why}, got {value}")


@dataclass
class TaskConfig:
    """Fields every task has; each task's config subclasses this."""

    name: str = ""
    n_states: int = 4
    """number of states T in a sequence (>= 2; the first is random and never scored)"""
    task_seed: Any = PER_SEED
    """seed that draws the hidden rule (matrix or rule pool): an integer >= 0 fixes one task
    instance; per_seed (the default) gives every run seed its own instance"""
    held_out: float = 0.2
    """fraction of the states held out by a fixed hash, in (0, 1): never the source of a
    training transition; the evaluation scores only transitions from them"""
    random_targets: bool = False
    """leak control: replace every scored token by a uniform random one (nothing to learn)"""

    DATAMODULE: ClassVar[str] = ""
    """`module:Class` of the task's LightningDataModule, imported only when a run builds it"""

    # what tables and figures ask the task (class-level, so a recorded config dict suffices)
    SHOWN: ClassVar[tuple[str, ...]] = ("n_states",)
    """fields every leaderboard label shows, default or not, in this order"""
    DERIVED: ClassVar[dict[str, tuple[str, str]]] = {}
    """axes computed from the fields: name -> (the field it stands in for in a series label,
    the axis title of a figure)"""

    @classmethod
    def derived(cls, axis: str, task: dict[str, Any]) -> float:
        """The value of a derived axis for a task config given as a dict."""
        raise KeyError(axis)

    @property
    def tokens_per_state(self) -> int:
        """S: tokens in one state."""
        raise NotImplementedError

    @property
    def vocab(self) -> int:
        """V: the token alphabet size."""
        raise NotImplementedError

    @property
    def seq_len(self) -> int:
        """L = S*T - 1: the model's input length."""
        return self.tokens_per_state * self.n_states - 1

    def table_bytes(self) -> int:
        """Bytes the task's hidden rule takes (a matrix, rule tables), for the memory estimate."""
        return 8 * self.tokens_per_state ** 2

    def build(self, **kwargs: Any) -> Any:
        """The task's LightningDataModule (a `base.StateSequenceTask`) for this config; imports
        torch and Lightning, so this module does not import `base`."""
        module, _, cls = self.DATAMODULE.partition(":")
        return getattr(importlib.import_module(module), cls)(self, **kwargs)

    def __post_init__(self) -> None:
        check_range(self, "n_states", 2, MAX_STATES)
        seed = self.task_seed
        if seed != PER_SEED and (isinstance(seed, bool) or not isinstance(seed, int)
                                 or not 0 <= seed < SEED_LIMIT):
            raise ValueError(f"task_seed: must be an integer in 0..{SEED_LIMIT - 1} or "
                             f"{PER_SEED}, got {seed!r}")
        if not 0 < self.held_out < 1:  # NaN fails too
            raise ValueError(f"held_out: must be in (0, 1), got {self.held_out}")
        accept = (1 - self.held_out) ** (self.n_states - 1)
        if accept < 0.01:
            raise ValueError(
                f"held_out: a training sequence of n_states={self.n_states} avoids held-out "
                f"sources with probability (1 - {self.held_out})^{self.n_states - 1} = "
                f"{accept:.2g}; must be >= 0.01 (lower held_out or n_states)")


@dataclass
class LinearMapConfig(TaskConfig):
    SHOWN: ClassVar[tuple[str, ...]] = ("state_size", "sparsity", "n_states")
    DERIVED: ClassVar[dict[str, tuple[str, str]]] = {
        "supports": ("sparsity", "C(S, s): candidate supports")}
    """supports = C(S, s), the number of candidate sets of parents of a token"""

    @classmethod
    def derived(cls, axis: str, task: dict[str, Any]) -> float:
        if axis != "supports":
            raise KeyError(axis)
        return math.comb(task["state_size"], task["sparsity"])

    DATAMODULE: ClassVar[str] = "datamodules.linear_map:LinearMap"

    name: str = "linear_map"
    n_states: int = 2
    """number of states T in a sequence (>= 2; the first is random and never scored)"""
    state_size: int = 12
    """tokens per state S (>= 2); 12 binary tokens are 4,096 states, too many to memorise"""
    sparsity: int = 1
    """ones per row of A, s (1 <= s < state_size: s = S is the parity shortcut)"""
    modulus: int = 2
    """token alphabet size C (>= 2); arithmetic is mod C"""
    distinct_rows: bool = True
    """draw A with distinct rows (a repeated row makes a token a copy of another of its state)"""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self, "state_size", 2, MAX_TOKENS_PER_STATE)
        if not 1 <= self.sparsity < self.state_size:
            raise ValueError(
                f"sparsity: must be in 1..state_size-1 ({self.state_size - 1}), got "
                f"{self.sparsity} (s = S makes every token the sum of the previous state)")
        check_range(self, "modulus", 2, MAX_VOCAB)

    @property
    def tokens_per_state(self) -> int:
        return self.state_size

    @property
    def vocab(self) -> int:
        return self.modulus


@dataclass
class CellularAutomatonConfig(TaskConfig):
    SHOWN: ClassVar[tuple[str, ...]] = ("n_cells", "n_colors", "n_rules", "n_states")

    DATAMODULE: ClassVar[str] = "datamodules.cellular_automaton:CellularAutomaton"

    name: str = "cellular_automaton"
    n_cells: int = 8
    """cells on the ring S (one token each)"""
    n_colors: int = 4
    """colours K (>= 2); chance loss is ln K"""
    radius: int = 1
    """neighbourhood radius r: a rule reads a window of 2r+1 cells"""
    rule_applications: int = 1
    """k: the rule is applied k times between consecutive states"""
    n_rules: int = 1
    """rules in the pool N; each sequence uses one drawn uniformly"""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self, "n_cells", 1, MAX_TOKENS_PER_STATE)
        check_range(self, "n_colors", 2, MAX_VOCAB)
        check_range(self, "radius", 0, MAX_TOKENS_PER_STATE)
        check_range(self, "rule_applications", 1, MAX_TOKENS_PER_STATE)
        check_range(self, "n_rules", 1, 4096)
        reach = 2 * self.radius * self.rule_applications + 1
        if reach > self.n_cells:
            raise ValueError(
                f"n_cells: must be >= 2*radius*rule_applications+1 = {reach} "
                f"(the window may not wrap the ring), got {self.n_cells}"
            )
        if self.n_colors ** (2 * self.radius + 1) > 2**22:
            raise ValueError(
                f"radius: the rule table n_colors^(2*radius+1) must have at most 2^22 entries, "
                f"got {self.n_colors}^{2 * self.radius + 1}"
            )

    @property
    def tokens_per_state(self) -> int:
        return self.n_cells

    @property
    def vocab(self) -> int:
        return self.n_colors

    def table_bytes(self) -> int:
        return 8 * self.n_rules * self.n_colors ** (2 * self.radius + 1)
