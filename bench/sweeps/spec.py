"""Sweep specs: a YAML spec expanded into jobs and validated before anything trains or is
written; torch-free past the training configs.

Grids: any field of a task or an architecture entry may be a list (the cartesian product is
taken), `seeds` is a count or a list, and `train.lr` may be a list (the leaderboard then reports
each architecture at its best learning rate, chosen on the same seeds). Fairer: `tune` chooses
each row's rate on tuning seeds disjoint from the reported ones, then trains the reported seeds
at that rate only. Every job (its task instance and emergence threshold included) is validated
before anything is written, and its id is a hash of its resolved config.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..core.errors import ConfigError
from ..core.record import RunRecord
from ..core.rows import by_row, group_key, lr_preference, survival_sample
from ..core.seeds import TUNE_SEED_START, seed_list
from ..core.stats import kaplan_meier
from ..training.config import RunConfig, load_run_config, read_yaml_mapping, upgrade_sections
from ..training.sections import build_section
from .axes import DERIVED_AXES, AxisError, axis_value, derived_axis


class DuplicateRows(ConfigError):
    """Two entries of a spec resolve to the same job config (a compare's new row among them
    when it is already on the board)."""


@dataclass
class SweepSpec:
    name: str = "sweep"
    """title of the leaderboard"""
    task: Any = None
    """a task section (task.name and its fields; a list value is a grid), or a list of them"""
    archs: list[Any] = field(default_factory=list)
    """architecture sections (a list value is a grid); each resolved config is a leaderboard row"""
    seeds: Any = 4
    """a count (seeds 0 .. n-1) or a list of seeds, for every configuration"""
    train: dict[str, Any] = field(default_factory=dict)
    """training fields; `lr` may be a list (a grid: the best per architecture is reported)"""
    emergence: dict[str, Any] = field(default_factory=dict)
    measure: dict[str, Any] = field(default_factory=dict)
    """what every job measures beside training (bench.training.config.MeasureConfig)"""
    runtime: dict[str, Any] = field(default_factory=dict)
    """how and where every job runs (bench.training.config.RuntimeConfig: hardware included)"""
    trainer: dict[str, Any] = field(default_factory=dict)
    claim: str = ""
    """the claim the leaderboard tests, printed above its table"""
    plots: list[list[str]] = field(default_factory=list)
    """factor plots: each one or two axes (task.FIELD, arch.FIELD, train.FIELD, or an axis the
    task derives: a linear map's supports =
    C(S, s)) against which solve rate and median steps are drawn (a line, or heatmaps)"""
    tests: list[Any] = field(default_factory=list)
    """the claim's tests: {compare: FIELD} (optionally against: VALUE) or {trend: FIELD}; each
    entry is one family of comparisons, Holm-adjusted (bench.analysis.claims runs them)"""
    plugins: list[str] = field(default_factory=list)
    """modules every worker imports before building its job (each may call
    architectures.register), so registered plug-in names work under every executor"""
    pretrain: list[Any] = field(default_factory=list)
    """warm-ups to compare, an axis of the grid: each `none` (from scratch) or a pretrain
    section (task, steps, lr, transfer); empty trains every job from scratch"""
    tune: dict[str, Any] = field(default_factory=dict)
    """{lr: [rates], seeds: count or list}: choose each row's learning rate on these seeds
    (a count n means seeds 1000 .. 1000+n-1), disjoint from `seeds`; the table reports only
    `seeds`, each row at its chosen rate"""
    exclude: list[Any] = field(default_factory=list)
    """cells of the grid not to run: each a mapping of task.FIELD or arch.FIELD to a value or a
    list of values (e.g. {arch.name: transformer, task.sparsity: [3, 4]}); a row is left out
    where every key matches its resolved config. An entry that leaves out nothing is refused"""
    added: list[Any] = field(default_factory=list)
    """architecture sections `bench compare` added to a committed board: rows like `archs`,
    tested and drawn beside them, left out of a test or plot whose field they lack (noted)"""

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", str(self.name)):
            raise ValueError(f"name: must be 1-100 letters, digits, '.', '_' or '-' (not "
                             f"starting with '.' or '-': it names a directory), got {self.name!r}")
        if not self.archs:
            raise ValueError("archs: must list at least one architecture")
        if not all(isinstance(a, dict) for a in [*self.archs, *self.added]):
            raise ValueError("archs: every entry must be a mapping with a name")
        if not self.tasks or not all(isinstance(t, dict) for t in self.tasks):  # None too
            raise ValueError("task: must be a mapping or a non-empty list of mappings")
        self.seed_list()  # validates
        for key, value in self.train.items():
            if isinstance(value, list) and key != "lr":
                raise ValueError(f"train.{key}: only train.lr may be a list (a grid)")
        if self.train.get("lr") == []:
            raise ValueError("train.lr: an empty grid; give a number or a non-empty list")
        check_tests(self.tests)
        check_exclude(self.exclude)
        self._check_tune()
        for axes in self.plots:
            if not 1 <= len(axes) <= 2:
                raise ValueError(f"plots: each plot has one or two axes, got {list(axes)}")
            for axis in axes:
                if (derived_axis(axis) is None
                        and axis.split(".")[0] not in ("task", "arch", "train")):
                    raise ValueError(f"plots: unknown axis '{axis}'; allowed: task.FIELD, "
                                     "arch.FIELD, train.FIELD, " + ", ".join(DERIVED_AXES))

    @property
    def tasks(self) -> list[dict[str, Any]]:
        return self.task if isinstance(self.task, list) else [self.task]

    def seed_list(self) -> list[int]:
        return seed_list(self.seeds, "seeds")

    def tune_seeds(self) -> list[int]:
        return seed_list(self.tune["seeds"], "tune.seeds", TUNE_SEED_START) if self.tune else []

    def _check_tune(self) -> None:
        if not self.tune:
            return
        unknown = set(self.tune) - {"lr", "seeds"}
        if unknown or set(self.tune) != {"lr", "seeds"}:
            raise ValueError(f"tune: needs exactly lr (a list of rates) and seeds (a count or "
                             f"a list), got {sorted(self.tune)}")
        rates = self.tune["lr"]
        if (not isinstance(rates, list) or len(rates) < 2
                or not all(isinstance(r, int | float) and not isinstance(r, bool)
                           and math.isfinite(r) and r > 0 for r in rates)):
            raise ValueError(f"tune.lr: a list of at least two positive rates, got {rates!r}")
        if "lr" in self.train:
            raise ValueError("train.lr: set by tune (each row's rate is chosen from tune.lr); "
                             "remove it")
        overlap = set(self.tune_seeds()) & set(self.seed_list())
        if overlap:
            raise ValueError(f"tune.seeds: must be disjoint from seeds; both list "
                             f"{sorted(overlap)[:5]}")


def grid(section: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The cartesian product of a section whose values may be lists."""
    axes = []
    for key, value in section.items():
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ConfigError(f"{where}.{key}: an empty grid; give a value or a non-empty list")
        axes.append([(key, v) for v in values])
    return [dict(combo) for combo in itertools.product(*axes)]


def load_spec(path: Path | str, overrides: list[str] | tuple[str, ...] = ()) -> SweepSpec:
    """The spec at `path`, with `overrides` (key=value, e.g. runtime.accelerator=gpu) merged in;
    fields that moved to `measure` and `runtime` read from their old sections too."""
    raw = read_yaml_mapping(path, str(path), "no such sweep spec",
                            "a sweep spec is a mapping (name, task, archs, seeds, ...)")
    for item in overrides:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise ConfigError(f"--set {item}: expected key=value, e.g. runtime.accelerator=gpu")
        try:
            raw = OmegaConf.merge(raw, OmegaConf.from_dotlist([item]))
        except (OmegaConfBaseException, ValueError) as e:
            raise ConfigError(f"--set {item}: {str(e).splitlines()[0]}") from None
    return build_section(SweepSpec, upgrade_sections(raw), "")


def expand(spec: SweepSpec, rates: dict[str, float] | None = None) -> list[RunConfig]:
    """The reported jobs of the spec, validated, in (task, architecture, lr, seed) order. With
    `tune`, each row trains at its rate in `rates` (keyed by the row's config less seed and lr);
    without `rates` the rows are validated at the first tuning rate."""
    if spec.tune:
        jobs = _expand(spec, [spec.tune["lr"][0]], spec.seed_list())
        return jobs if rates is None else at_rates(jobs, rates)
    lrs = spec.train.get("lr")
    return _expand(spec, lrs if isinstance(lrs, list) else [lrs], spec.seed_list())


def check_test_fields(tests: list[dict[str, Any]], configs: list[dict[str, Any]],
                      tuned: bool, counted: bool = True) -> None:
    """Every test's field is read from every job's config and (with `counted`) takes two values
    or more, and its `against` is one of them: checked before anything trains, not when the
    table is written (a test with nothing to compare would drop out of the table in silence).
    In a `tuned` spec train.lr is not checked: each row trains at its tuned rate."""
    for entry in tests:
        kind = "compare" if "compare" in entry else "trend"
        field = entry[kind]
        if tuned and field == "train.lr":
            continue
        try:
            values = {axis_value(c, field) for c in configs}
        except AxisError as e:
            raise ConfigError(f"tests: {kind} {e}") from None
        if not counted:
            continue
        shown = ", ".join(sorted(map(str, values)))
        if len(values) < 2:
            raise ConfigError(f"tests: {kind} {field} takes one value in this spec ({shown}); "
                              "nothing to compare")
        if "against" in entry and entry["against"] not in values:
            raise ConfigError(f"tests: against {entry['against']!r} is not a value of {field} "
                              f"in this spec ({shown})")


def at_rates(jobs: list[RunConfig], rates: dict[str, float]) -> list[RunConfig]:
    """`jobs` each at its row's rate in `rates` (keyed by the row's config less seed and lr)."""
    return [dataclasses.replace(j, train=dataclasses.replace(
        j.train, lr=rates[group_key(j.to_dict(), ("seed", "lr"))])) for j in jobs]


def tuning_jobs(spec: SweepSpec) -> list[RunConfig]:
    """Every row at every tuning rate on the tuning seeds (none without `tune`)."""
    return _expand(spec, spec.tune["lr"], spec.tune_seeds()) if spec.tune else []


def choose_rates(results: list[RunRecord]) -> dict[str, float]:
    """Each row's learning rate from its tuning runs (the leaderboard's order of preference)."""
    families: dict[str, list[tuple]] = {}
    for runs in by_row(results).values():
        km = kaplan_meier(*survival_sample(runs))
        lr = runs[0].config["train"]["lr"]
        family = group_key(runs[0].config, ("seed", "lr"))
        families.setdefault(family, []).append(lr_preference(km.median, km.events / len(runs),
                                                             lr))
    return {family: min(prefs)[2] for family, prefs in families.items()}


MAX_JOBS = 20_000  # jobs one spec may list (its reported and tuning runs each)


def grid_size(section: dict[str, Any]) -> int:
    """How many configs a section's grid holds, without building them."""
    return math.prod(len(v) if isinstance(v, list) else 1 for v in section.values())


def _expand(spec: SweepSpec, lrs: list[Any], seeds: list[int]) -> list[RunConfig]:
    warmups = spec.pretrain or ["none"]
    sections = [(f"archs[{i}]", a) for i, a in enumerate(spec.archs)]
    sections += [(f"added[{i}]", a) for i, a in enumerate(spec.added)]
    count = (sum(grid_size(t) for t in spec.tasks) * sum(grid_size(a) for _, a in sections)
             * len(lrs) * len(seeds) * len(warmups))
    if count > MAX_JOBS:
        raise ConfigError(f"task, archs, lr, seeds: the grid lists {count:,} jobs; must be at "
                          f"most {MAX_JOBS:,} (split the sweep)")
    rows, configs = [], []  # each row's job at the first seed; the board rows' configs
    excluded = [0] * len(spec.exclude)  # rows each exclude entry left out
    for t, task_section in enumerate(spec.tasks):
        for task in grid(task_section, f"task[{t}]" if isinstance(spec.task, list) else "task"):
            for where, arch_section in sections:
                for arch in grid(arch_section, where):
                    for j, pre in enumerate(warmups):
                        for lr in lrs:
                            train = {**spec.train, **({"lr": lr} if lr is not None else {})}
                            # built once per row (resolving a config is ~0.06 s of OmegaConf)
                            first = _job(task, arch, train, spec, seeds[0], where, pre, j)
                            config = first.to_dict()
                            hits = [i for i, entry in enumerate(spec.exclude)
                                    if _matches(entry, config)]
                            for i in hits:
                                excluded[i] += 1
                            if hits:
                                continue
                            rows.append(first)
                            if where.startswith("archs"):  # a field no row has: at once
                                check_plot_axes(spec.plots, [config])
                                check_test_fields(spec.tests, [config], bool(spec.tune),
                                                  counted=False)
                                configs.append(config)
    for i, n in enumerate(excluded):
        if not n:
            raise ConfigError(f"exclude[{i}]: {spec.exclude[i]} matches no cell of the grid; "
                              "each key is task.FIELD or arch.FIELD with a value the grid takes")
    if not rows:
        raise ConfigError("exclude: leaves out every cell of the grid; nothing would run")
    check_sweep_devices(spec.runtime)
    # the spec-level checks read one job per row (the seeds differ in nothing they read), before
    # the seeds are expanded; a plot axis or test field missing from a row was refused as that
    # row was built, so a 10,000-job spec with a bad test answers in a moment. The board is
    # `archs`' rows: an added row may lack a field (a compare's new mixer), left out
    check_test_fields(spec.tests, configs, tuned=bool(spec.tune))  # two values or more
    # the other seeds by replacement, which validates the seed again
    jobs = [first if seed == seeds[0] else dataclasses.replace(first, seed=seed)
            for first in rows for seed in seeds]
    ids = [job.job_id() for job in jobs]
    if len(set(ids)) != len(ids):
        raise DuplicateRows("archs, pretrain: two entries resolve to the same config"
                            if spec.pretrain else
                            "archs: two entries resolve to the same architecture config")
    check_tasks(jobs)
    return jobs


def check_tests(tests: list[Any]) -> None:
    """Each entry names one kind of test and a field; checked when the spec is loaded."""
    for entry in tests:
        if not isinstance(entry, dict) or len(set(entry) & {"compare", "trend"}) != 1:
            raise ValueError(f"tests: each entry is {{compare: FIELD}} (optionally with "
                             f"against: VALUE) or {{trend: FIELD}}, got {entry!r}")
        extra = set(entry) - {"compare", "trend", "against"}
        if extra or ("against" in entry and "trend" in entry):
            raise ValueError(f"tests: unknown keys {sorted(extra) or ['against']} in {entry!r}; "
                             "allowed: compare, against, trend")
        field = entry.get("compare") or entry.get("trend")
        if not isinstance(field, str) or field.split(".")[0] not in ("task", "arch", "train",
                                                                     "pretrain"):
            raise ValueError(f"tests: '{field}' is not task.FIELD, arch.FIELD, train.FIELD or "
                             "pretrain.FIELD")


_CHECKED: set[tuple] = set()
"""the task checks that passed in this process (each a pure function of its key): a board that is
expanded again (`bench compare` expands the committed board, then the merged one) builds each of
its task instances once"""


def check_tasks(jobs: list[RunConfig]) -> None:
    """Estimate each job's memory (one per task, architecture and training config: on the
    machine that sweeps, where the device is unknown here nothing is compared), build each job's
    task instance (one per task config and seed) and check its emergence threshold against it,
    before anything is written."""
    from ..training.config import build_run_task
    from ..training.memory import check_memory
    from ..training.pretrain import check_pretrain, pretrain_task

    sized = set()
    for job in jobs:
        key = (repr(job.task), repr(job.arch), repr(job.train), repr(job.trainer))
        if key not in sized:
            sized.add(key)
            check_memory(job)
    for job in jobs:
        key = (repr(job.task), job.seed if job.task.task_seed == "per_seed" else None,
               repr(job.emergence), job.train.eval_size)
        if key not in _CHECKED:
            build_run_task(job)
            _CHECKED.add(key)
        if job.pretrain is not None:  # its instance (per seed), then its transfer set
            instance = ("pretrain", repr(job.pretrain.task), job.seed, repr(job.train))
            transfer = ("transfer", repr(job.pretrain), repr(job.arch), repr(job.task))
            if instance not in _CHECKED:
                pretrain_task(job)
                _CHECKED.add(instance)
            if transfer not in _CHECKED:
                check_pretrain(job, instance=False)
                _CHECKED.add(transfer)


def check_contracts(jobs: list[RunConfig]) -> None:
    """Every distinct architecture of `jobs` against the mixer contract (architectures.plugins
    .check_mixer) at the length and batch size of its first job, before anything is created: a
    mixer that breaks it stops the sweep, compare or reproduce in one line, exit 2, with nothing
    written (each run checks its own lengths again before it trains)."""
    from ..training.config import build_run_task, check_contract

    seen = set()
    for job in jobs:
        key = (type(job.arch), repr(job.arch))
        if key not in seen:
            seen.add(key)
            check_contract(job, [build_run_task(job).seq_len])


def check_exclude(exclude: list[Any]) -> None:
    """Each entry a non-empty mapping of task.FIELD / arch.FIELD to a value or a list of them
    (that `exclude` is a list, build_section checked)."""
    for i, entry in enumerate(exclude):
        if not isinstance(entry, dict) or not entry:
            raise ValueError(f"exclude[{i}]: a non-empty mapping of task.FIELD or arch.FIELD to "
                             f"a value or a list of values, got {entry!r}")
        for key, value in entry.items():
            section, _, name = str(key).partition(".")
            if section not in ("task", "arch") or not name or "." in name:
                raise ValueError(f"exclude[{i}]: unknown key '{key}'; allowed: task.FIELD, "
                                 "arch.FIELD")
            if value == [] or isinstance(value, dict):
                raise ValueError(f"exclude[{i}].{key}: a value or a non-empty list of values, "
                                 f"got {value!r}")


def _matches(entry: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether every key of an exclude entry takes one of its values in a job's config."""
    for key, value in entry.items():
        section, _, name = key.partition(".")
        if name not in config[section]:
            return False
        values = value if isinstance(value, list) else [value]
        if not any(_same(config[section][name], v) for v in values):
            return False
    return True


def _same(a: Any, b: Any) -> bool:
    """Equal as a spec means it: 3 == 3.0, but True is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def check_plot_axes(plots: list[list[str]], configs: list[dict[str, Any]]) -> None:
    """Every plot axis reads a value from every job's config, checked before anything trains."""
    try:
        for axis in {a for axes in plots for a in axes}:
            for config in configs:
                axis_value(config, axis)
    except AxisError as e:
        raise ConfigError(f"plots: {e}") from None


def check_sweep_devices(runtime: dict[str, Any]) -> None:
    """A multi-device job in a sweep must start its ranks itself (a `*spawn` strategy): `ddp`
    would rerun the whole sweep command once per rank."""
    devices = runtime.get("devices", 1)
    many = (devices in (-1, "-1", "auto") or (isinstance(devices, int) and devices > 1)
            or (isinstance(devices, list | str) and len(str(devices).split(",")) > 1))
    strategy = str(runtime.get("strategy", "auto"))
    if many and "spawn" not in strategy:
        raise ConfigError(f"runtime.strategy: '{strategy}' with several devices relaunches the "
                          "command per rank, which a sweep cannot; use ddp_spawn in sweeps")


def _job(task, arch, train, spec, seed, where, pretrain="none", j=0) -> RunConfig:
    overrides = {"task": task, "arch": arch, "train": train, "emergence": spec.emergence,
                 "measure": spec.measure, "runtime": spec.runtime, "trainer": spec.trainer,
                 "seed": seed, "plugins": spec.plugins,
                 "pretrain": pretrain}
    try:
        return load_run_config(overrides)
    except ConfigError as e:
        at = (f"{where}: " if str(e).startswith("arch.") else
              f"pretrain[{j}]: " if str(e).startswith("pretrain") else "")
        raise ConfigError(f"{at}{e}") from None


def row_filter(spec: SweepSpec, rows: list[str] | None) -> Callable[[RunConfig], bool] | None:
    """A job filter keeping the rows whose config hash starts with one of `rows` (all if none).
    With `tune`, a row's hash at any tuning rate (the committed table shows the chosen one)
    selects the row's whole family: its tuning runs at every rate and its reported seeds."""
    if not rows:
        return None
    family_rows: dict[str, set[str]] = {}
    for job in [*tuning_jobs(spec), *expand(spec)]:
        config = job.to_dict()
        family_rows.setdefault(group_key(config, ("seed", "lr")), set()).add(group_key(config))
    keys = set().union(*family_rows.values())
    for prefix in rows:
        if not re.fullmatch(r"[0-9a-f]+", prefix):  # an empty prefix would match every row
            raise ConfigError(f"--row: '{prefix}' is not a config hash (hex digits, as `bench "
                              "status` and the table's config column show)")
        if not any(k.startswith(prefix) for k in keys):
            raise ConfigError(f"--row: '{prefix}' matches no row of {spec.name}; "
                              f"allowed: {', '.join(sorted(keys))}")
    chosen = {family for family, hashes in family_rows.items()
              if any(h.startswith(p) for h in hashes for p in rows)}
    return lambda job: group_key(job.to_dict(), ("seed", "lr")) in chosen
