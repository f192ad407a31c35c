"""Tasks with a known ground-truth mixing pattern, as LightningDataModules.

`TASKS` is the one registry: task name -> (config class, DataModule class).
"""

from .base import Batch, StateSequenceTask, TaskConfig
from .cellular_automaton import CellularAutomaton, CellularAutomatonConfig
from .linear_map import LinearMap, LinearMapConfig

TASKS: dict[str, tuple[type[TaskConfig], type[StateSequenceTask]]] = {
    "linear_map": (LinearMapConfig, LinearMap),
    "cellular_automaton": (CellularAutomatonConfig, CellularAutomaton),
}


def build_task(config: TaskConfig, **kwargs) -> StateSequenceTask:
    return TASKS[config.name][1](config, **kwargs)


__all__ = ["TASKS", "Batch", "StateSequenceTask", "TaskConfig", "build_task"]
