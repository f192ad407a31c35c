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
SCREEN_MIN_ROWS = 16  # the fewest held-out sequences a screen holds (base.py, the trainer)
SEED_LIMIT = 2**32  # seeds are 0 .. 2^32 - 1 (numpy's range)
MAX_TOKENS_PER_STATE = 1024
MAX_STATES = 1024
MAX_VOCAB = 2**20
MAX_LENGTH = 1 << 16  # tokens in a sequence
MAX_BINDINGS = 1 << 24  # key-value pairs an instance splits
MAX_RULE_WEIGHTS = 1 << 20  # weights of one sequence's NCA rule network (4 MiB)
ENUMERABLE = 1 << 18  # state spaces up to this size are enumerated to find the held-out part


def check_range(config: Any, name: str, low: int, high: int, why: str = "") -> None:
    """One-line ValueError unless low <= config.name <= high."""
    value = getattr(config, name)
    if not low <= value <= high:
        raise ValueError(f"{name}: must be in {low}..{high}{why}, got {value}")


@dataclass
class TaskConfig:
    """Fields every task has; each task's config subclasses this (a task of states subclasses
    `StateTaskConfig`)."""

    name: str = ""
    task_seed: Any = PER_SEED
    """seed that draws the task instance (its hidden rule and its held-out part): an integer
    >= 0 fixes one instance; per_seed (the default) gives every run seed its own instance"""
    held_out: float = 0.2
    """fraction held out by a fixed hash, in (0, 1): never in a training sequence; the
    evaluation scores only what is held out"""
    random_targets: bool = False
    """leak control: replace every scored token by a uniform random one (nothing to learn)"""

    DATAMODULE: ClassVar[str] = ""
    """`module:Class` of the task's LightningDataModule, imported only when a run builds it"""

    # what tables and figures ask the task (class-level, so a recorded config dict suffices)
    SHOWN: ClassVar[tuple[str, ...]] = ()
    """fields every leaderboard label shows, default or not, in this order"""
    DERIVED: ClassVar[dict[str, tuple[str, str]]] = {}
    """axes computed from the fields: name -> (the field it stands in for in a series label,
    the axis title of a figure)"""

    @classmethod
    def derived(cls, axis: str, task: dict[str, Any]) -> float:
        """The value of a derived axis for a task config given as a dict."""
        raise KeyError(axis)

    @property
    def vocab(self) -> int:
        """V: the token alphabet size."""
        raise NotImplementedError

    @property
    def seq_len(self) -> int:
        """L: the model's input length (tokens in a sequence minus one)."""
        raise NotImplementedError

    def table_bytes(self) -> int:
        """Bytes the task instance keeps in memory (hidden rule, enumerated split), for the
        memory estimate."""
        return 0

    def build(self, **kwargs: Any) -> Any:
        """The task's LightningDataModule (a `base.SequenceTask`) for this config; imports
        torch and Lightning, so this module does not import `base`."""
        module, _, cls = self.DATAMODULE.partition(":")
        return getattr(importlib.import_module(module), cls)(self, **kwargs)

    def __post_init__(self) -> None:
        seed = self.task_seed
        if seed != PER_SEED and (isinstance(seed, bool) or not isinstance(seed, int)
                                 or not 0 <= seed < SEED_LIMIT):
            raise ValueError(f"task_seed: must be an integer in 0..{SEED_LIMIT - 1} or "
                             f"{PER_SEED}, got {seed!r}")
        if not 0 < self.held_out < 1:  # NaN fails too
            raise ValueError(f"held_out: must be in (0, 1), got {self.held_out}")


@dataclass
class StateTaskConfig(TaskConfig):
    """A task whose sequences are T states of S tokens, scored from the second state on; the
    held-out part is a set of states, never the source of a training transition."""

    n_states: int = 4
    """number of states T in a sequence (>= 2; the first is random and never scored)"""

    SHOWN: ClassVar[tuple[str, ...]] = ("n_states",)

    @property
    def tokens_per_state(self) -> int:
        """S: tokens in one state."""
        raise NotImplementedError

    @property
    def seq_len(self) -> int:
        """L = S*T - 1: the model's input length."""
        return self.tokens_per_state * self.n_states - 1

    def rule_bytes(self) -> int:
        """Bytes of the hidden rule (a matrix, rule tables)."""
        return 8 * self.tokens_per_state ** 2

    def table_bytes(self) -> int:
        states = self.vocab ** self.tokens_per_state  # a small state space is enumerated
        return self.rule_bytes() + (states * self.tokens_per_state * 8
                                    if states <= ENUMERABLE else 0)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self, "n_states", 2, MAX_STATES)
        accept = (1 - self.held_out) ** (self.n_states - 1)
        if accept < 0.01:
            raise ValueError(
                f"held_out: a training sequence of n_states={self.n_states} avoids held-out "
                f"sources with probability (1 - {self.held_out})^{self.n_states - 1} = "
                f"{accept:.2g}; must be >= 0.01 (lower held_out or n_states)")


@dataclass
class LinearMapConfig(StateTaskConfig):
    SHOWN: ClassVar[tuple[str, ...]] = ("state_size", "sparsity", "n_states")
    DERIVED: ClassVar[dict[str, tuple[str, str]]] = {
        "supports": ("state_size", "C(S, s): candidate supports")}  # a series per s
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
class CellularAutomatonConfig(StateTaskConfig):
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

    def rule_bytes(self) -> int:
        return 8 * self.n_rules * self.n_colors ** (2 * self.radius + 1)


@dataclass
class InductionConfig(TaskConfig):
    """Induction (A B ... A -> B): a first token that is always the same, random tokens, then
    `n_repeats` segments each copied from a random place in the random tokens; scored inside
    the copies, where the token after the earlier occurrence is the answer. The held-out part is
    a set of places a copy may come from: no training copy comes from one, every evaluation
    copy does."""

    SHOWN: ClassVar[tuple[str, ...]] = ("vocab_size", "length", "segment", "n_repeats")
    DATAMODULE: ClassVar[str] = "datamodules.induction:Induction"

    name: str = "induction"
    vocab_size: int = 16
    """tokens V (>= 4): token 0 is the first token of every sequence, 1 .. V-1 are random"""
    length: int = 48
    """tokens in a sequence, the first token included"""
    segment: int = 8
    """tokens in a repeated segment (>= 2); the copy's first token is not predictable"""
    n_repeats: int = 2
    """copied segments at the end of the sequence (>= 1)"""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self, "vocab_size", 4, MAX_VOCAB)
        check_range(self, "segment", 2, MAX_LENGTH)
        check_range(self, "n_repeats", 1, MAX_LENGTH)
        need = 1 + (self.n_repeats + 1) * self.segment
        if not need <= self.length <= MAX_LENGTH:
            raise ValueError(
                f"length: must be in {need}..{MAX_LENGTH} (the first token, random tokens that "
                f"hold a whole segment, then {self.n_repeats} copies of {self.segment}), got "
                f"{self.length}")

    @property
    def vocab(self) -> int:
        return self.vocab_size

    @property
    def seq_len(self) -> int:
        return self.length - 1

    @property
    def prefix(self) -> int:
        """Random tokens between the first token and the copies."""
        return self.length - 1 - self.n_repeats * self.segment

    def table_bytes(self) -> int:
        return self.length  # the held-out copy sources


@dataclass
class MQARConfig(TaskConfig):
    """Multi-query associative recall, by default as zoology defines it (`multiquery_ar`,
    HazyResearch/zoology): `n_pairs` key-value pairs (distinct keys, distinct values), then a
    query region where each key appears once at a slot drawn by a power law (`power_a`), among
    blank or noise tokens; scored at the query keys only (each predicts its value). `layout:
    block` is the earlier variant the committed recall board ran (values i.i.d., the queries in
    one block after `gap` fillers, each followed by its answer). The held-out part is a set of
    bindings (key, value): no training sequence binds one, and the evaluation counts only the
    queries of held-out bindings. Fields of the other layout stay unset (None)."""

    SHOWN: ClassVar[tuple[str, ...]] = ("layout", "n_pairs", "vocab_size", "length", "n_keys",
                                        "n_values", "gap")
    DATAMODULE: ClassVar[str] = "datamodules.mqar:MQAR"
    LAYOUTS: ClassVar[tuple[str, ...]] = ("zoology", "block")

    name: str = "mqar"
    layout: str = "zoology"
    """zoology (its multiquery_ar) or block (the earlier variant; the committed recall board)"""
    n_pairs: int = 8
    """key-value pairs per sequence (zoology's num_kv_pairs): distinct keys"""
    vocab_size: int | None = None
    """zoology: tokens V (keys 1 .. V/2 - 1, values V/2 .. V - 1, 0 the blank); default 8,192"""
    length: int | None = None
    """zoology: input tokens (its input_seq_len, even; the pairs then (length - 2*n_pairs)/2
    query slots); default 64"""
    power_a: float | None = None
    """zoology: query slot i (0-based) drawn with weight (i + 1)^(power_a - 1), without
    replacement; 1 is uniform; default 0.01 (most queries close to the context)"""
    random_non_queries: bool | None = None
    """zoology: every blank of the query region replaced by a random token; default True"""
    n_queries: int | None = None
    """block: queries per sequence (distinct keys of the pairs); 0 asks every key once"""
    n_keys: int | None = None
    """block: key tokens (>= n_pairs); default 32"""
    n_values: int | None = None
    """block: value tokens (>= 2); default 32"""
    gap: int | None = None
    """block: filler tokens between the pairs and the queries; default 0"""

    ZOOLOGY: ClassVar[dict[str, Any]] = {"vocab_size": 8192, "length": 64, "power_a": 0.01,
                                         "random_non_queries": True}
    BLOCK: ClassVar[dict[str, Any]] = {"n_queries": 0, "n_keys": 32, "n_values": 32, "gap": 0}

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.layout not in self.LAYOUTS:
            raise ValueError(f"layout: must be one of {', '.join(self.LAYOUTS)}, got "
                             f"{self.layout!r}")
        own, other = ((self.ZOOLOGY, self.BLOCK) if self.layout == "zoology"
                      else (self.BLOCK, self.ZOOLOGY))
        for name in other:
            if getattr(self, name) is not None:
                raise ValueError(f"{name}: a field of layout {self._other()}, not of layout "
                                 f"{self.layout}")
        for name, default in own.items():
            if getattr(self, name) is None:
                setattr(self, name, default)
        check_range(self, "n_pairs", 1, MAX_LENGTH)
        if self.layout == "zoology":
            self._check_zoology()
        else:
            self._check_block()
        if self.key_count * self.value_count > MAX_BINDINGS:
            raise ValueError(f"{'vocab_size' if self.layout == 'zoology' else 'n_values'}: the "
                             f"binding table (keys x values = {self.key_count} x "
                             f"{self.value_count}) must have at most {MAX_BINDINGS:,} entries")
        if self.n_tokens > MAX_LENGTH:
            raise ValueError(f"{'length' if self.layout == 'zoology' else 'gap'}: a sequence of "
                             f"{self.n_tokens} tokens; must be at most {MAX_LENGTH}")

    def _other(self) -> str:
        return "block" if self.layout == "zoology" else "zoology"

    def _check_zoology(self) -> None:
        check_range(self, "vocab_size", 2 * self.n_pairs + 2, MAX_VOCAB,
                    " (keys 1 .. V/2 - 1 and values V/2 .. V - 1, each distinct in a sequence)")
        check_range(self, "length", 4 * self.n_pairs, MAX_LENGTH,
                    f" (2*n_pairs context tokens and a slot of two for each of the {self.n_pairs}"
                    " queries)")
        if self.length % 2:
            raise ValueError(f"length: must be even (query slots are two tokens), got "
                             f"{self.length}")
        a = self.power_a
        if isinstance(a, bool) or not isinstance(a, int | float) or not 0 < a <= 1:
            raise ValueError(f"power_a: must be in (0, 1] (1: uniform slots), got {a!r}")
        if not isinstance(self.random_non_queries, bool):
            raise ValueError(f"random_non_queries: must be true or false, got "
                             f"{self.random_non_queries!r}")
        if self.random_targets:
            raise ValueError("random_targets: not available with layout zoology (its answers "
                             "are read off the context, not stored); use layout block")

    def _check_block(self) -> None:
        check_range(self, "n_queries", 0, self.n_pairs, " (queries ask distinct keys of the "
                    "pairs; 0 asks every key)")
        check_range(self, "n_keys", self.n_pairs, MAX_VOCAB, " (keys are distinct within a "
                    "sequence)")
        check_range(self, "n_values", 2, MAX_VOCAB)
        check_range(self, "gap", 0, MAX_LENGTH)

    # --- the token alphabet, shared by both layouts: 0 the blank, then keys, then values -----
    @property
    def key_count(self) -> int:
        """Key tokens: 1 .. key_count."""
        return self.vocab_size // 2 - 1 if self.layout == "zoology" else self.n_keys

    @property
    def value_base(self) -> int:
        """The first value token."""
        return self.vocab_size // 2 if self.layout == "zoology" else 1 + self.n_keys

    @property
    def value_count(self) -> int:
        return (self.vocab_size - self.vocab_size // 2 if self.layout == "zoology"
                else self.n_values)

    @property
    def queries(self) -> int:
        """Queries per sequence."""
        return self.n_pairs if self.layout == "zoology" else self.n_queries or self.n_pairs

    @property
    def slots(self) -> int:
        """zoology: the query region's slots (two tokens each), where the queries are placed."""
        return (self.length - 2 * self.n_pairs) // 2

    @property
    def n_tokens(self) -> int:
        """Tokens in a stored sequence (the model's inputs and one more)."""
        if self.layout == "zoology":
            return self.length + 1
        return 2 * self.n_pairs + self.gap + 2 * self.queries

    @property
    def vocab(self) -> int:
        return self.vocab_size if self.layout == "zoology" else 1 + self.n_keys + self.n_values

    @property
    def seq_len(self) -> int:
        return self.n_tokens - 1

    def table_bytes(self) -> int:
        return self.key_count * self.value_count  # the held-out bindings


@dataclass
class DyckConfig(TaskConfig):
    """Dyck-k: balanced brackets of `n_types` types, nested at most `max_depth` deep, exactly
    `length` tokens (balanced at the end). Trained on every next token; scored where the next
    token is determined (a close the depth forces: at `max_depth`, or when the tokens left only
    suffice to close). The held-out part is a set of stacks (the open brackets' types, outer to
    inner, at depth >= 2): no training sequence ever holds one."""

    SHOWN: ClassVar[tuple[str, ...]] = ("n_types", "max_depth", "length")
    DATAMODULE: ClassVar[str] = "datamodules.dyck:Dyck"

    name: str = "dyck"
    n_types: int = 2
    """bracket types k (>= 1): tokens 0..k-1 open, k..2k-1 close"""
    max_depth: int = 4
    """deepest nesting D (>= 2: a held-out stack has depth >= 2)"""
    length: int = 32
    """tokens in a sequence (even: it ends balanced)"""
    p_open: float = 0.5
    """probability of opening where both opening and closing are allowed, in (0, 1)"""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self, "n_types", 1, ENUMERABLE)
        check_range(self, "max_depth", 2, 64)
        if (self.n_types + 1) ** self.max_depth > ENUMERABLE:
            raise ValueError(f"max_depth: (n_types+1)^max_depth = {self.n_types + 1}^"
                             f"{self.max_depth} must be at most {ENUMERABLE:,} (every stack is "
                             "enumerated to split them)")
        check_range(self, "length", 4, MAX_LENGTH)
        if self.length % 2:
            raise ValueError(f"length: must be even (a sequence ends balanced), got "
                             f"{self.length}")
        if not 0 < self.p_open < 1:  # NaN fails too
            raise ValueError(f"p_open: must be in (0, 1), got {self.p_open}")

    @property
    def vocab(self) -> int:
        return 2 * self.n_types

    @property
    def seq_len(self) -> int:
        return self.length - 1

    def table_bytes(self) -> int:
        return (self.n_types + 1) ** self.max_depth  # the held-out stacks, one byte each


@dataclass
class NCAConfig(StateTaskConfig):
    """Neural cellular automata: T states of a `height` x `width` torus of `n_colors` colours,
    each the previous one under a rule that is a small random network (a new one per sequence)
    reading a cell's 3x3 neighbourhood; its output logits are quantised to a colour by argmax.
    The model must infer each sequence's rule in context."""

    SHOWN: ClassVar[tuple[str, ...]] = ("height", "width", "n_colors", "n_states")
    DATAMODULE: ClassVar[str] = "datamodules.nca:NCA"

    name: str = "nca"
    height: int = 4
    """rows of the grid (>= 3: the 3x3 window may not wrap onto itself)"""
    width: int = 4
    """columns of the grid (>= 3)"""
    n_colors: int = 2
    """colours K (>= 2): the tokens"""
    hidden: int = 16
    """hidden units of each sequence's rule network (one-hot 3x3 window -> hidden -> K)"""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range(self, "height", 3, MAX_TOKENS_PER_STATE)
        check_range(self, "width", 3, MAX_TOKENS_PER_STATE)
        check_range(self, "n_colors", 2, 1024)
        check_range(self, "hidden", 1, 4096)
        if self.height * self.width > MAX_TOKENS_PER_STATE:
            raise ValueError(f"width: a state of height*width = {self.height * self.width} "
                             f"cells; must be at most {MAX_TOKENS_PER_STATE}")
        weights = 10 * self.n_colors * self.hidden  # w1 (9K, h) and w2 (h, K)
        if weights > MAX_RULE_WEIGHTS:  # every sequence draws its own network
            raise ValueError(f"hidden: each sequence's rule network has 10 x n_colors x hidden "
                             f"= {weights:,} weights; must be at most {MAX_RULE_WEIGHTS:,} (a "
                             f"batch draws one per sequence): lower hidden or n_colors")

    @property
    def tokens_per_state(self) -> int:
        return self.height * self.width

    @property
    def vocab(self) -> int:
        return self.n_colors

    def rule_bytes(self) -> int:
        return 0  # a rule is drawn per sequence
