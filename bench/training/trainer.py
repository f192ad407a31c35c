"""The checks of the `trainer.*` options a run passes to its Lightning Trainer: each is a
Trainer argument the runner leaves to the user, with a value Lightning accepts (checked by
building a Trainer on the CPU when the config loads), and the Trainer Lightning builds trains
in the precision the config names (checked where the run builds it, `bench.training.run`)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
import typing
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, Union

from ..core.errors import ConfigError

if TYPE_CHECKING:  # imported where a trainer is built or a trainer key is checked
    import lightning as L

# Trainer arguments the runner sets itself; everything else in `trainer.*` passes through.
RESERVED_TRAINER_KEYS = {
    "max_steps": "train.max_steps",
    "max_epochs": "train.max_steps",
    "val_check_interval": "train.eval_every",
    "check_val_every_n_epoch": "train.eval_every",
    "gradient_clip_val": "train.grad_clip",
    "callbacks": "emergence.*",
    "default_root_dir": "--out",
    "num_sanity_val_steps": "the step-0 evaluation (always the whole set)",
    # options that would override the budget or what an evaluation sees
    "fast_dev_run": "train.max_steps",
    "max_time": "train.max_steps",
    "min_steps": "train.max_steps (emergence stops a run early)",
    "min_epochs": "train.max_steps (emergence stops a run early)",
    "limit_train_batches": "train.max_steps",
    "limit_val_batches": "train.eval_size (the evaluation is always the whole set)",
    "overfit_batches": "nothing: a run trains on its task's stream",
    "accumulate_grad_batches": "train.batch_size",
    "barebones": "nothing: a run needs its logged metrics",
}
@functools.cache
def trainer_keys() -> set[str]:
    """lightning.Trainer's arguments (Lightning is imported only where a trainer key is set)."""
    import lightning as L

    return set(inspect.signature(L.Trainer.__init__).parameters) - {"self"}



def check_trainer(options: dict[str, Any], hardware: dict[str, Any] | None = None) -> None:
    """Every option is a Trainer argument the runner leaves to the user, with a value Lightning
    accepts: checked by building a Trainer on the CPU. `hardware`, the runtime section's Trainer
    fields that are set (accelerator, devices, ...: bench.training.config.hardware), is checked
    for its form only, since a sweep may be checked on a machine other than the one that runs
    it; an error names the section a field is in."""
    hardware = {k: v for k, v in (hardware or {}).items() if v is not None}
    where = {**{k: "trainer" for k in options}, **{k: "runtime" for k in hardware}}
    for key in options:
        if key in RESERVED_TRAINER_KEYS:
            raise ConfigError(f"trainer.{key}: set by the runner; use {RESERVED_TRAINER_KEYS[key]}")
        if key not in trainer_keys():
            raise ConfigError(f"trainer.{key}: not an argument of lightning.Trainer")
    if "logger" in hardware:
        from .loggers import logger_names  # Lightning's loggers: imported where one is named

        logger_names(hardware["logger"])
    hints = _trainer_hints()
    for key, value in {**options, **hardware}.items():
        if key == "logger":
            continue
        if key in hints and not _fits(value, hints[key]):
            raise ConfigError(f"{where[key]}.{key}: must be {_spell(hints[key])}, got {value!r}")
    every = options.get("log_every_n_steps", 1)
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ConfigError(f"trainer.log_every_n_steps: must be a count of steps >= 1, "
                          f"got {every!r}")
    for key in ("devices", "num_nodes"):
        value = hardware.get(key, 1)
        if isinstance(value, bool) or (isinstance(value, int) and value < (
                -1 if key == "devices" else 1)) or value == 0:
            also = ", -1, auto or a list of device indices" if key == "devices" else ""
            raise ConfigError(f"runtime.{key}: must be a count >= 1{also}, got {value!r}")
    for key, names in (("strategy", _strategies), ("accelerator", _accelerators)):
        value = hardware.get(key, "auto")
        if isinstance(value, str) and value not in names():
            raise ConfigError(f"runtime.{key}: unknown '{value}'; allowed: {', '.join(names())}")
    try:
        _build_cpu_trainer(repr(sorted(options.items())))
    except ConfigError:  # name the option at fault: the first that fails on its own
        for key, value in options.items():
            try:
                _build_cpu_trainer(repr([(key, value)]))
            except ConfigError as e:
                raise ConfigError(f"trainer.{key}: {str(e).removeprefix('trainer: ')}") from None
        raise


@functools.cache
def _strategies() -> list[str]:
    from lightning.pytorch.strategies import StrategyRegistry

    return ["auto", *StrategyRegistry.available_strategies()]


@functools.cache
def _accelerators() -> list[str]:
    from lightning.pytorch.accelerators import AcceleratorRegistry

    return ["auto", "gpu", *sorted(AcceleratorRegistry.available_accelerators())]


@functools.cache
def _trainer_hints() -> dict[str, Any]:
    import lightning as L

    return typing.get_type_hints(L.Trainer.__init__)


def _fits(value: Any, hint: Any) -> bool:
    """Whether a config value (YAML: None, bool, int, float, str, list, dict) has the type of a
    Trainer argument's annotation; True where the annotation is Any."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in args)
    if origin in (list, dict):
        return isinstance(value, origin) and all(
            _fits(v, args[-1]) and (origin is list or _fits(k, args[0]))
            for k, v in (value.items() if isinstance(value, dict) else enumerate(value)))
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(hint, type) and isinstance(value, hint)


def _spell(hint: Any) -> str:
    """An annotation as a reader would write it: "bool, 'warn' or None"."""
    parts = list(dict.fromkeys(_options(hint)))
    return ", ".join(parts[:-1]) + f" or {parts[-1]}" if len(parts) > 1 else parts[0]


def _options(hint: Any) -> list[str]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return [o for a in args for o in _options(a)]
    if origin is Literal:
        return [repr(a) for a in args]
    if hint is type(None):
        return ["None"]
    if origin is not None:
        return [f"{origin.__name__}[{', '.join(' | '.join(_options(a)) for a in args)}]"]
    return [getattr(hint, "__name__", str(hint))]


@functools.cache
def _build_cpu_trainer(options_repr: str) -> None:
    import ast
    import logging

    options = dict(ast.literal_eval(options_repr))
    quiet = [logging.getLogger(n) for n in ("lightning.pytorch", "lightning.fabric")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)
    import lightning as L

    try:
        with precision_swap_unsaid():
            L.Trainer(**{"accelerator": "cpu", "devices": 1, "logger": False,
                         "enable_checkpointing": False, "enable_progress_bar": False,
                         "enable_model_summary": False, **options})
    except Exception as e:
        raise ConfigError(f"trainer: {type(e).__name__}: {str(e).splitlines()[0]}") from None
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)


@contextlib.contextmanager
def precision_swap_unsaid() -> Iterator[None]:
    """Lightning's warning that it swaps a precision the accelerator lacks (16-mixed on a CPU)
    kept quiet: check_precision refuses that swap in one line of its own."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is not supported on CPU.*")
        yield


def check_precision(trainer: L.Trainer, asked: Any) -> None:
    """The precision the config names is the one `trainer` trains in: Lightning swaps 16-mixed
    for bf16-mixed on a CPU with a warning, and the config and job id would name a precision
    the run did not train in."""
    if asked is not None and _precision(asked) != trainer.precision:
        raise ConfigError(f"trainer.precision: {asked} is not available on this machine's "
                          f"{type(trainer.accelerator).__name__} (Lightning would train in "
                          f"{trainer.precision}); set trainer.precision={trainer.precision} "
                          "or run where it is supported")


def _precision(value: Any) -> str:
    """Lightning's unified name of a precision setting (16 -> 16-mixed, bf16 -> bf16-mixed)."""
    from lightning.fabric.connector import _convert_precision_to_unified_args

    return str(_convert_precision_to_unified_args(value))
