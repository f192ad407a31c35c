"""Tasks with a known ground-truth mixing pattern, as LightningDataModules.

`TASKS` is the one registry: task name -> config class (torch-free, see config.py); a config's
`build()` makes its DataModule.
"""

from .config import (
    PER_SEED,
    CellularAutomatonConfig,
    DyckConfig,
    InductionConfig,
    LinearMapConfig,
    MQARConfig,
    NCAConfig,
    TaskConfig,
)

TASKS: dict[str, type[TaskConfig]] = {
    "linear_map": LinearMapConfig,
    "cellular_automaton": CellularAutomatonConfig,
    "induction": InductionConfig,
    "mqar": MQARConfig,
    "dyck": DyckConfig,
    "nca": NCAConfig,
}


def build_task(config: TaskConfig, **kwargs):
    """The LightningDataModule of `config` (a `datamodules.base.SequenceTask`)."""
    return config.build(**kwargs)


__all__ = ["PER_SEED", "TASKS", "TaskConfig", "build_task"]
