"""The run record: what one finished run wrote (`result.json`, the `result` column of
results.sqlite), as a type. It is the one contract between training, which writes it, and every
analysis, which reads it with attribute access; defaults are asked of the object that owns them
(the run's emergence criterion knows its metric and threshold).

`RunRecord.from_json` reads every committed database as it is: fields added after a board ran
(the intervention map, the post-hoc analyses) default to None. `to_json` writes the keys in
the order result.json has always had, the post-hoc ones only where a run made them. Torch-free.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any

from .emergence import EmergenceCriterion
from .errors import ConfigError

_SCALAR = (int, float, str, bool, type(None))  # the declared types a table of runs holds


def _scalar(hint: Any) -> bool:
    """A declared type that is one number or string, or an optional one (`int | None`)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return all(_scalar(arg) for arg in typing.get_args(hint))
    return hint in _SCALAR


@dataclass
class Accuracy:
    """Accuracy over all of a run's evaluations (`bench.training.run.accuracy_summary`)."""

    heldout_token_acc: float = math.nan
    """the best token accuracy on the held-out transitions"""
    train_token_acc: float = math.nan
    """the best token accuracy on the fixed probe of training sequences"""
    gap: float = math.nan
    """the largest excess of the training probe over the held-out set at one evaluation"""


@dataclass
class MixingMaps:
    """Mixing-pattern maps kept from a run (`bench.measures.maps.kept`): the first,
    the two bracketing emergence, and the last."""

    steps: list[int]
    """the evaluation steps of the maps kept"""
    maps: list[list[list[float]]]
    """one (rows, L) map per step: row i is how much scored position `rows[i]` reads each input"""
    rows: list[int] | None = None
    """the input positions the maps' rows score (None in records from before the rows were
    sampled: every scored position)"""


@dataclass
class RunRecord:
    """One finished run. Fields in result.json's order; the last six are added after training
    by the analyses the run's config asks for."""

    job_id: str
    """the job's content-hash id (bench.core.rows.job_id)"""
    status: str
    """emerged, censored (never crossed within the budget), diverged (non-finite loss) or leaked
    (a decisive evaluation changed when the future was scrambled)"""
    steps_to_emergence: int | None
    """the evaluation step of the first confirmed crossing; None unless emerged"""
    tokens_to_emergence: int | None
    """tokens trained on by then (steps x batch x sequence tokens)"""
    wall_time_to_emergence_s: float | None
    """seconds trained by then"""
    transition_width: int | None
    """steps from the plateau's end to the rise (bench.core.emergence); None where no plateau"""
    plateau_end: int | None
    """the last evaluation step on the plateau"""
    rise_step: int | None
    """the first step of the final run of evaluations at 90% of the way up or more"""
    width_note: str
    """why there is no width, where there is none"""
    accuracy: Accuracy
    """the best held-out and training-probe accuracy and the memorisation gap"""
    steps: int
    """optimizer steps trained"""
    budget_steps: int
    """the run's budget (train.max_steps): where a censored run is censored"""
    final_metrics: dict[str, float]
    """every metric logged at the last evaluation"""
    curve: list[list[float]]
    """(step, value) of the criterion's metric at every evaluation"""
    curves: dict[str, list[float]]
    """every logged metric at every evaluation, aligned with curves['step'] (NaN where absent)"""
    learned_patterns: list[Any]
    """attention mixers: the learned pattern (per layer and head) at the last evaluation"""
    influence: MixingMaps | None
    """gradient-norm maps"""
    intervention: MixingMaps | None
    """intervention maps (what the verdicts read; None in records from before they existed)"""
    attention_target: list[list[float]] | None
    """the task's ground-truth pattern (L, L), where a map or pattern was recorded"""
    wall_time_s: float
    """seconds trained"""
    steps_per_s: float | None
    tokens_per_s: float | None
    n_params: int
    """parameters of the model"""
    kernel_path: str
    """the path the mixers ran: fused, reference or torch"""
    mixer_params_per_layer: list[int]
    state_per_layer: int | None
    """numbers one layer keeps per sequence to produce the next token at the full length"""
    instance_seed: int | None
    """the seed of the run's task instance (its matrix, rule pool, held-out split)"""
    task_flags: list[str]
    """why the instance is degenerate, where it is"""
    split: dict[str, int]
    """sizes of the training and held-out parts"""
    references: dict[str, dict[str, float]]
    """the task's chance, no-context and Bayes-ceiling values of each metric"""
    config: dict[str, Any]
    """the resolved RunConfig, as a dict"""
    versions: dict[str, str]
    """what produced the run: packages, CPU, instruction set, threads"""
    pretrain: dict[str, Any] | None = None
    """the warm-up's record, for a warmed run"""
    checkpoints: dict[str, int] | None = None
    """kept analysis checkpoints: step -> bytes"""
    refined_step: int | None = None
    """the exact first step past the threshold, by replay (emergence.refine)"""
    refine: dict[str, Any] | str | None = None
    """the replay's report, or why it was skipped"""
    patch: dict[str, Any] | str | None = None
    """attention patching's summary, or why it could not run"""
    circuits: dict[str, Any] | str | None = None
    """the circuit screen's summary, or why it could not run"""

    POST_HOC = ("pretrain", "checkpoints", "refined_step", "refine", "patch", "circuits")

    # --- read and written ----------------------------------------------------------------
    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        """A record from result.json's dict (any committed version of it)."""
        if not isinstance(data, dict):
            raise ConfigError(f"a run record must be a JSON object, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(f"run record: unknown fields {unknown}; allowed: {sorted(names)}")
        values = {k: data.get(k) for k in names if k in data or k in OPTIONAL}
        missing = sorted(names - set(values) - set(cls.POST_HOC))
        if missing:
            raise ConfigError(f"run record: missing fields {missing}")
        values["config"] = upgrade_config(values["config"])
        values["accuracy"] = Accuracy(**(values["accuracy"] or {}))
        for key in ("influence", "intervention"):
            if values.get(key) is not None:
                values[key] = MixingMaps(**values[key])
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """result.json's dict: every field in order; a post-hoc or optional one only where it
        was made."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and (f.name in self.POST_HOC or f.name in OPTIONAL):
                continue
            if dataclasses.is_dataclass(value):
                value = {k: v for k, v in dataclasses.asdict(value).items() if v is not None}
            out[f.name] = value
        return out

    def scalars(self) -> dict[str, Any]:
        """Every field that is one number or string, in order, the accuracy summary's flattened
        into it (what a table of runs holds: `bench.api.load_results`)."""
        out: dict[str, Any] = {}
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Accuracy):
                out.update(dataclasses.asdict(value))
            elif _scalar(hints[f.name]):
                out[f.name] = value  # a number or a string (or None) by its declared type
        return out

    # --- asked of the record ---------------------------------------------------------------
    @property
    def seed(self) -> int:
        return self.config["seed"]

    @property
    def emerged(self) -> bool:
        return self.status == "emerged"

    @property
    def emergence_step(self) -> int | None:
        """steps-to-emergence: the exact step where it was refined by replay, else the
        evaluation step."""
        return self.refined_step or self.steps_to_emergence

    @property
    def survival_time(self) -> int:
        """steps-to-emergence, or the budget for a run that never emerged (censored there)."""
        return self.emergence_step if self.emerged else self.budget_steps

    @property
    def criterion(self) -> EmergenceCriterion:
        """The run's emergence criterion, its unset fields at the criterion's defaults."""
        return EmergenceCriterion(**self.config.get("emergence", {}))


OPTIONAL = ("influence", "intervention", "attention_target")
"""fields records from before they existed lack (read as None)"""

TORCH_INIT = "torch"
"""`arch.init` of a run recorded before the field existed: PyTorch's module defaults"""

MOVED = {
    "train": {"compile": "runtime", "checkpoint_every": "runtime", "screen_size": "runtime",
              "influence_size": "measure", "influence_rows": "measure",
              "influence_every": "measure", "patch": "measure", "circuits": "measure",
              "keep_checkpoints": "measure"},
    "emergence": {"refine": "measure"},
    "trainer": {"accelerator": "runtime", "devices": "runtime", "strategy": "runtime",
                "num_nodes": "runtime", "logger": "runtime"},
}
"""History, never extended: the fields that left `train`, `emergence` and `trainer` on
2026-12-07 for the `measure` and `runtime` sections (none of them was ever part of a job id)"""


def upgrade_config(config: Any) -> Any:
    """A stored run config as today's fields read it: its sections as `move_sections` leaves
    them, and one without `arch.init` ran PyTorch's defaults (`torch`, which job ids leave out,
    so its id is unchanged)."""
    out = move_sections(config)
    if isinstance(out, dict) and isinstance(out.get("arch"), dict) and "init" not in out["arch"]:
        out["arch"] = {**out["arch"], "init": TORCH_INIT}
    return out


def move_sections(config: Any) -> Any:
    """A config or a spec (whose sections have the same names) with each field of MOVED in its
    old section moved to its new one; one given in both places is a ValueError naming it."""
    if not isinstance(config, dict):
        return config
    out = dict(config)
    for old, fields in MOVED.items():
        section = out.get(old)
        if not isinstance(section, dict) or not set(section) & set(fields):
            continue
        out[old] = {k: v for k, v in section.items() if k not in fields}
        for name, new in fields.items():
            if name not in section:
                continue
            target = dict(out.get(new) or {})
            if name in target:
                raise ValueError(f"{old}.{name}: now {new}.{name}, and both are given; give "
                                 f"{new}.{name} only")
            out[new] = {**target, name: section[name]}
    return out


def as_records(results: list[RunRecord | dict[str, Any]]) -> list[RunRecord]:
    """Records from records or result.json dicts (the API accepts either)."""
    return [r if isinstance(r, RunRecord) else RunRecord.from_json(r) for r in results]


__all__ = ["Accuracy", "MixingMaps", "RunRecord", "as_records"]
