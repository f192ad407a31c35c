"""One config object per run: task, architecture, training, emergence criterion, trainer, seed.

Configs are typed dataclasses merged by OmegaConf from dotlists (`task.sparsity=3`) or dicts, so a
typo or a wrong type fails loudly. `task.name` and `arch.name` pick the schema of their section.
Every problem surfaces as a `ConfigError` whose message is one line naming the field.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from datamodules import TaskConfig, build_task
from datamodules.config import SCREEN_MIN_ROWS

from ..core.emergence import EmergenceCriterion, check_threshold
from ..core.errors import ConfigError
from ..core.record import MOVED, move_sections
from ..core.rows import job_id
from ..core.seeds import SEED_LIMIT
from .sections import _one_line, build_section, parse_overrides, task_schema, yaml_problem
from .trainer import check_trainer

if TYPE_CHECKING:  # Lightning, imported by the task's module, only where a task is built
    from datamodules.base import SequenceTask


@dataclass
class TrainConfig:
    """What is trained: every field is part of the job id."""

    max_steps: int = 3000
    """training budget in optimizer steps; a run that has not emerged by then is censored"""
    batch_size: int = 64
    """sequences per optimizer step (global, whatever the device count)"""
    lr: float = 1e-3
    """peak AdamW learning rate"""
    weight_decay: float = 0.01
    """AdamW weight decay"""
    warmup_steps: int = 100
    """linear warm-up from 0 to lr, then constant"""
    grad_clip: float = 1.0
    """gradient-norm clip (0 = off)"""
    eval_every: int = 50
    """evaluate on the held-out set every this many steps"""
    eval_size: int = 512
    """held-out sequences evaluated when the held-out part has more than 2,048 states (a smaller
    part is evaluated whole, each state once)"""
    probe_size: int = 256
    """training sequences evaluated beside them: accuracy on the training distribution, so
    memorisation shows as a gap"""

    def __post_init__(self) -> None:
        for name, high in (("max_steps", 10**8), ("batch_size", 2**20), ("eval_size", 2**20),
                           ("probe_size", 2**20), ("warmup_steps", 10**8)):
            low = 0 if name == "warmup_steps" else 1
            if not low <= getattr(self, name) <= high:
                raise ValueError(f"{name}: must be in {low}..{high}, got {getattr(self, name)}")
        if not 1 <= self.eval_every <= self.max_steps:
            raise ValueError(f"eval_every: must be in 1..max_steps ({self.max_steps}): no "
                             "evaluation within the budget measures nothing, got "
                             f"{self.eval_every}")
        for name, low, high in (("lr", 0, 1e6), ("weight_decay", 0, 10), ("grad_clip", 0, 1e6)):
            value = getattr(self, name)
            if not low <= value <= high or (name == "lr" and value == 0):  # NaN fails too
                bounds = f"({low:g}, {high:g}]" if name == "lr" else f"[{low:g}, {high:g}]"
                raise ValueError(f"{name}: must be in {bounds}, got {value}")


def _counts(section: Any, highs: dict[str, int]) -> None:
    """Each of `highs`' fields of `section` is a count in 0..its high."""
    for name, high in highs.items():
        if not 0 <= getattr(section, name) <= high:
            raise ValueError(f"{name}: must be in 0..{high}, got {getattr(section, name)}")


@dataclass
class MeasureConfig:
    """What is measured beside training (maps, patching, head screens, checkpoints kept for
    them, the replayed emergence step): never part of the job id, so a measurement added to a
    finished board keys the same runs."""

    influence_size: int = 16
    """held-out sequences whose influence map (every mixer's mixing pattern, measured by
    gradients) is computed, with its alignment with the ground truth (val/influence_mass,
    val/influence_auroc); 0 = off"""
    influence_rows: int = 8
    """scored positions whose rows the influence map measures (one gradient pass per sequence
    and row), evenly spaced over the scored positions and always the same ones; 0 = every
    scored position"""
    influence_every: int = 0
    """compute the influence map at every this-many-th evaluation (and at step 0); 0 = the
    smallest k that keeps its gradient passes (influence_size x rows) within 5% of the
    training sequences between two maps (k x eval_every x batch_size)"""
    patch: bool = False
    """after a run that emerged, patch its attention between the plateau and emergence
    checkpoints (`bench patch`, into patch/) and keep the summary in result.json; needs
    keep_checkpoints; a mixer without patchable attention is noted, not an error"""
    circuits: bool = False
    """after the run, screen its attention heads over the analysis checkpoints (`bench
    circuits`, into circuits/) and keep the summary in result.json; needs keep_checkpoints and
    the induction task; a mixer without patchable attention is noted, not an error"""
    keep_checkpoints: bool = False
    """keep full checkpoints for analysis in checkpoints/ (initialisation, evaluations 1, 2, 4,
    8, ... in, the two evaluations bracketing emergence, the end): `bench patch`, influence maps
    over training, measure.refine"""
    refine: bool = False
    """after a run emerges, replay training from the last checkpoint before the crossing and
    evaluate after every step: the exact first step the metric passes (`refined_step`), not a
    multiple of eval_every; tables then use it. Keeps analysis checkpoints"""

    def __post_init__(self) -> None:
        _counts(self, {"influence_size": 2**16, "influence_rows": 2**20,
                       "influence_every": 10**8})
        if self.patch and not self.keep_checkpoints:
            raise ValueError("patch: needs keep_checkpoints=true (it patches between them)")
        if self.circuits and not self.keep_checkpoints:
            raise ValueError("circuits: needs keep_checkpoints=true (it screens them)")


TRAINER_ARGUMENT = {"trainer": True}
"""a runtime field the runner hands to lightning.Trainer (the logger built from it first)"""


@dataclass
class RuntimeConfig:
    """How and where a run executes (speed, resumption, the evaluation screen, hardware,
    loggers): never part of the job id, so a GPU rerun of a CPU board lands in its rows. The
    hardware fields are lightning.Trainer's arguments of the same names."""

    screen_size: int = 128
    """held-out sequences (with half as many training-probe ones) evaluated at every
    evaluation, fewer where they would hold more than 8,192 tokens or be more than an eighth of
    the sequences trained on between two evaluations (never fewer than 16: at long lengths a
    sequence holds many scored positions); the rest of the set is evaluated
    only where the outcome could turn on it: at step 0, at the last evaluation, and while the
    run is open with the screen within reach of the threshold or a passing streak under way
    (bench.core.emergence.SCREEN_MARGIN); 0 evaluates the whole set every time"""
    compile: bool = False
    """torch.compile the model (speed only)"""
    checkpoint_every: int = 500
    """save a resume checkpoint at the first evaluation this many steps after the last one, so a
    killed or retried run continues from it; removed when the run finishes (0 = never; not part
    of the job id)"""
    influence_size: int = 16
    """held-out sequences whose influence map (every mixer's mixing pattern, measured by
    gradients) is computed, with its alignment with the ground truth (val/influence_mass,
    val/influence_auroc); 0 = off"""
    influence_rows: int = 8
    """scored positions whose rows the influence map measures (one gradient pass per sequence
    and row), evenly spaced over the scored positions and always the same ones; 0 = every
    scored position"""
    influence_every: int = 0
    """compute the influence map at every this-many-th evaluation (and at step 0); 0 = the
    smallest k that keeps its gradient passes (influence_size x rows) within 5% of the
    training sequences between two maps (k x eval_every x batch_size); not part of the job
    id"""
    patch: bool = False
    """after a run that emerged, patch its attention between the plateau and emergence
    checkpoints (`bench patch`, into patch/) and keep the summary in result.json; needs
    keep_checkpoints; a mixer without patchable attention is noted, not an error; not in the
    job id"""
    circuits: bool = False
    """after the run, screen its attention heads over the analysis checkpoints (`bench
    circuits`, into circuits/) and keep the summary in result.json; needs keep_checkpoints and
    the induction task; a mixer without patchable attention is noted, not an error; not in the
    job id"""
    keep_checkpoints: bool = False
    """keep full checkpoints for analysis in checkpoints/ (initialisation, evaluations 1, 2, 4,
    8, ... in, the two evaluations bracketing emergence, the end): `bench patch`, influence maps
    over training, measure.refine"""

    accelerator: Any = field(default="auto", metadata=TRAINER_ARGUMENT)
    """cpu, gpu, cuda, mps, ... or auto (the GPU where one is visible: the processes executor
    shows each worker its own, else the CPU)"""
    devices: Any = field(default=1, metadata=TRAINER_ARGUMENT)
    """devices per run: a count, -1 or auto (every visible one), or a list of indices; several
    need a strategy that starts its ranks itself in a sweep (ddp_spawn)"""
    strategy: Any = field(default="auto", metadata=TRAINER_ARGUMENT)
    """Lightning's strategy (auto, ddp, ddp_spawn, fsdp, ...)"""
    num_nodes: int = field(default=1, metadata=TRAINER_ARGUMENT)
    """machines per run"""
    logger: Any = field(default=None, metadata=TRAINER_ARGUMENT)
    """where metrics are also sent: tensorboard, wandb, mlflow, a list of them, or a mapping of
    each to its options (metrics.csv is always written)"""

    def __post_init__(self) -> None:
        _counts(self, {"checkpoint_every": 10**8, "screen_size": 2**20})


TRANSFER_SETS = ("all", "body")


@dataclass
class PretrainConfig:
    """A warm-up (pre-pretraining) phase: the same backbone trains `steps` steps on another task
    first, then the target run starts from the weights `transfer` names, with a fresh
    optimizer. Steps-to-emergence counts target steps only; the warm-up's cost is recorded
    beside it."""

    task: Any = None
    """the warm-up task's config (section chosen by pretrain.task.name: dyck, nca or any task)"""
    steps: int = 1000
    """warm-up optimizer steps (batch size, weight decay, clip and LR warm-up as in train)"""
    lr: float = 1e-3
    """the warm-up's peak AdamW learning rate"""
    transfer: str = "body"
    """what the target run starts from: body (every weight but the token and position
    embeddings and the LM head, which depend on the vocabulary and length), all (every weight:
    the two tasks' vocabularies and lengths must match), or a regular expression that the
    transferred parameters' names match from their start (e.g. blocks\\.0\\.)"""

    def __post_init__(self) -> None:
        if not 1 <= self.steps <= 10**8:
            raise ValueError(f"steps: must be in 1..{10**8} (omit pretrain for no warm-up), "
                             f"got {self.steps}")
        if not 0 < self.lr <= 1e6:  # NaN fails too
            raise ValueError(f"lr: must be in (0, 1e+06], got {self.lr}")
        if self.transfer not in TRANSFER_SETS:
            try:
                re.compile(self.transfer)
            except re.error as e:
                raise ValueError(f"transfer: must be {', '.join(TRANSFER_SETS)} or a regular "
                                 f"expression over parameter names ({e})") from None


@dataclass
class RunConfig:
    task: Any = None
    """the task's config (section chosen by task.name)"""
    arch: Any = None
    """the architecture's config (section chosen by arch.name)"""
    train: TrainConfig = field(default_factory=TrainConfig)
    emergence: EmergenceCriterion = field(default_factory=EmergenceCriterion)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    trainer: dict[str, Any] = field(default_factory=dict)
    """further lightning.Trainer arguments (precision, deterministic, ...): they may change the
    numbers, so they are part of the job id; the hardware ones are runtime's fields"""
    seed: int = 0
    """seed for initialisation and the training data stream (0 .. 2^32 - 1)"""
    plugins: list[str] = field(default_factory=list)
    """modules imported before arch.name is resolved, in every process that runs the job (each
    may call architectures.register); where code lives, not the experiment: not in job ids"""
    pretrain: Any = None
    """a warm-up phase before the target task (PretrainConfig: task, steps, lr, transfer);
    None trains from scratch (and leaves job ids as they were)"""

    def __post_init__(self) -> None:
        if not 0 <= self.seed < SEED_LIMIT:
            raise ValueError(f"seed: must be in 0..{SEED_LIMIT - 1}, got {self.seed}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def job_id(self) -> str:
        """Stable content hash of the resolved config: the same job has the same id anywhere.
        The experiment's sections only: `measure`, `runtime` and `plugins` are left out."""
        return job_id(self.to_dict())




def _named_schema(raw: DictConfig, section: str, default: str, where: str = "") -> type:
    """The dataclass that `<section>.name` selects: a task, or an architecture or plug-in."""
    name = OmegaConf.select(raw, f"{section}.name", default=default)
    if section == "arch":  # torch, with the mixers' modules: imported where an arch is read
        from architectures import ContractError, resolve

        try:
            return resolve(str(name))
        except ContractError as e:
            raise ConfigError(f"arch.name: {e}") from None
    return task_schema(name, where)


def _registered(raw: DictConfig, section: str, default: str, where: str = "") -> Any:
    """Build `raw[section]` with the schema its `name` selects (`where` prefixes the field
    names in errors: `pretrain.`)."""
    return build_section(_named_schema(raw, section, default, where), raw.get(section),
                         f"{where}{section}")


def _pretrain(raw: Any) -> PretrainConfig | None:
    """The pretrain section: None (or absent) for no warm-up, else its task and fields."""
    if raw is None or (isinstance(raw, str) and raw == "none"):
        return None
    if not OmegaConf.is_dict(raw):
        raise ConfigError(f"pretrain: a mapping (task, steps, lr, transfer) or none, got {raw!r}")
    if "task" not in raw:
        raise ConfigError("pretrain.task: missing; name the warm-up task (pretrain.task.name)")
    task = _registered(raw, "task", "dyck", "pretrain.")
    rest = {k: v for k, v in raw.items() if k != "task"}
    return dataclasses.replace(build_section(PretrainConfig, rest, "pretrain"), task=task)


def read_yaml_mapping(path: Path | str, where: str, missing: str, shape: str) -> DictConfig:
    """The YAML mapping at `path` (a sweep spec, a run config file); a missing file, bad YAML or
    another shape is one ConfigError starting `where`."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{where}: a directory, not a YAML file")
    if not path.is_file():
        raise ConfigError(f"{where}: {missing}")
    try:
        raw = OmegaConf.load(path)
    except (OmegaConfBaseException, ValueError, yaml.YAMLError) as e:  # syntax, encoding
        raise ConfigError(f"{where}: not a valid YAML mapping ({yaml_problem(e)})") from None
    except OSError:  # OmegaConf refuses a file that holds a bare scalar (`42`)
        raise ConfigError(f"{where}: {shape}") from None
    if not OmegaConf.is_dict(raw):
        raise ConfigError(f"{where}: {shape}")
    return raw


def read_config_file(path: Path | str) -> DictConfig:
    """A YAML file of run config sections (what `--print-config` prints), as a mapping."""
    return read_yaml_mapping(path, f"--config: {path}", "no such file",
                             "must be a mapping of sections (task, arch, ...)")


def load_run_config(overrides: list[str] | dict[str, Any] | DictConfig = (),
                    config_file: Path | str | None = None) -> RunConfig:
    """Resolve overrides (a dotlist or a nested dict), over a config file if one is given, into
    a validated RunConfig."""
    raw = parse_overrides(overrides)
    if config_file is not None:
        try:
            raw = OmegaConf.merge(read_config_file(config_file), raw)
        except OmegaConfBaseException as e:
            raise ConfigError(_one_line(e)) from None
    raw = upgrade_sections(raw)
    unknown = set(raw) - {f.name for f in dataclasses.fields(RunConfig)}
    if unknown:
        allowed = ", ".join(f.name for f in dataclasses.fields(RunConfig))
        raise ConfigError(f"{sorted(unknown)[0]}: unknown key; allowed: {allowed}")
    plugins = raw.get("plugins", [])
    if not (OmegaConf.is_list(plugins) or isinstance(plugins, list)) or not all(
            isinstance(m, str) and m for m in plugins):
        raise ConfigError(f"plugins: must be a list of module names, got {plugins!r}")
    if plugins:
        from architectures import ContractError, import_plugins

        try:
            import_plugins(list(plugins))
        except ContractError as e:
            raise ConfigError(f"plugins: {e}") from None
    for section in ("task", "arch", "train", "emergence", "measure", "runtime", "trainer"):
        value = raw.get(section)
        if value is not None and not OmegaConf.is_dict(value):
            kind = "a list" if OmegaConf.is_list(value) else repr(value)
            raise ConfigError(f"{section}: must be a mapping of fields ({section}.FIELD=VALUE), "
                              f"got {kind}")
    # the torch-free sections first: an error in them answers without importing torch
    task = _registered(raw, "task", "linear_map")
    train = build_section(TrainConfig, raw.get("train"), "train")
    emergence = build_section(EmergenceCriterion, raw.get("emergence"), "emergence")
    measure = build_section(MeasureConfig, raw.get("measure"), "measure")
    runtime = build_section(RuntimeConfig, raw.get("runtime"), "runtime")
    pretrain = _pretrain(raw.get("pretrain"))
    arch = _registered(raw, "arch", "transformer")
    rest = {k: v for k, v in raw.items() if k in ("trainer", "seed", "plugins")}
    base = build_section(RunConfig, rest, "")
    check_trainer(base.trainer, hardware(runtime, only_set=True))
    return dataclasses.replace(base, task=task, arch=arch, train=train, emergence=emergence,
                               measure=measure, runtime=runtime, pretrain=pretrain)


def upgrade_sections(raw: DictConfig) -> DictConfig:
    """`raw` with the fields that moved to `measure` and `runtime` (bench.core.record.MOVED)
    moved there, so old specs, records and command lines read as today's; one given in both
    places is a ConfigError."""
    if not any(OmegaConf.is_dict(raw.get(old)) and set(raw[old]) & set(fields)
               for old, fields in MOVED.items()):
        return raw
    try:
        return OmegaConf.create(move_sections(OmegaConf.to_container(raw)))
    except ValueError as e:
        raise ConfigError(str(e)) from None


def hardware(runtime: RuntimeConfig, only_set: bool = False) -> dict[str, Any]:
    """The runtime fields the Trainer takes (TRAINER_ARGUMENT), by name; with `only_set`, those
    away from their defaults."""
    return {f.name: getattr(runtime, f.name) for f in dataclasses.fields(runtime) if
            f.metadata.get("trainer") and not (only_set and getattr(runtime, f.name) == f.default)}


def check_contract(cfg: RunConfig, lengths: list[int] | tuple[int, ...]) -> None:
    """The mixer contract (architectures.plugins.check_mixer) of `cfg.arch` at each of
    `lengths` and the run's batch size; a mixer that breaks it is one ConfigError line."""
    from architectures import ContractError, check_mixer

    try:
        for length in lengths:
            check_mixer(cfg.arch, length, (cfg.train.batch_size,))
    except ContractError as e:
        raise ConfigError(f"arch.name: {e}") from None


def screen_size(cfg: RunConfig) -> int:
    """The screen's held-out sequences: `runtime.screen_size`, but at most an eighth of the
    sequences trained on between two evaluations (16 at least), so that the screen stays a small
    share of a small-batch run (perf's L = 64 at batch 8: 50, not 128; no committed spec
    changes). The task also caps it at 8,192 tokens."""
    bound = max(SCREEN_MIN_ROWS, cfg.train.eval_every * cfg.train.batch_size // 8)
    return min(cfg.runtime.screen_size, bound)


def task_instance(config: TaskConfig, cfg: RunConfig, where: str = "task.") -> SequenceTask:
    """The instance of `config` (the run's task or its warm-up's) that the run `cfg` trains on,
    its evaluation set drawn; an instance the task refuses is a one-line ConfigError prefixed
    by `where`."""
    train = cfg.train
    try:
        task = build_task(config, batch_size=train.batch_size, eval_size=train.eval_size,
                          probe_size=train.probe_size, seed=cfg.seed,
                          screen_size=screen_size(cfg))
        task.references()  # draws the evaluation set (a held-out part may be empty)
    except ValueError as e:
        raise ConfigError(f"{where}{e}") from None
    return task


def build_run_task(cfg: RunConfig) -> SequenceTask:
    """The job's task instance, checked: an instance the task refuses, or an emergence threshold
    outside (no-context baseline, Bayes ceiling], is a ConfigError before anything is written."""
    task = task_instance(cfg.task, cfg)
    if task.PER_SEQUENCE_PATTERN and getattr(cfg.arch, "attention_bias", 0):
        raise ConfigError(f"arch.attention_bias: must be 0 on {cfg.task.name}, whose "
                          "ground-truth pattern changes with every sequence")
    if not cfg.task.random_targets:  # leak control: nothing to learn, by design
        try:
            check_threshold(cfg.emergence, task.references())
        except ValueError as e:
            raise ConfigError(f"emergence.{e}") from None
    return task


__all__ = [
    "ConfigError", "EmergenceCriterion", "MeasureConfig", "PretrainConfig",
    "RunConfig", "RuntimeConfig", "TaskConfig", "TrainConfig",
    "load_run_config", "parse_overrides",
]
