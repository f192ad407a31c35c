"""Hostile input, drawn at random: every config field and spec key gets values of random types
(huge, negative, NaN, infinite, strings, paths, lists, None). Whatever comes in, validation ends
in a one-line ConfigError naming a field, or a config that fits in memory; never another
exception, and nothing is written (validation runs before any file or directory exists)."""

import dataclasses
import math
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from architectures import ARCHITECTURES
from bench.core.emergence import EmergenceCriterion
from bench.core.errors import ConfigError
from bench.sweeps.spec import expand, load_spec
from bench.training.config import TrainConfig, load_run_config
from bench.training.memory import check_memory
from datamodules import TASKS

HOSTILE = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, -1, 7, 2**31, 2**32, 2**63, 2**64, 10**9]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1e-300, 1e300]),
    st.booleans(),
    st.none(),
    st.sampled_from(["", "../../../x", "/dev/null", "auto", "true", "per_seed", "ddp", "nan",
                     "1e9", "transformer", "a" * 300]),
    st.lists(st.integers(-3, 3), max_size=3),
)
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def section_fields(schema: type) -> list[str]:
    return [f.name for f in dataclasses.fields(schema) if f.name != "name"]


@st.composite
def run_configs(draw):
    task_name = draw(st.sampled_from(sorted(TASKS)))
    arch_name = draw(st.sampled_from(sorted(ARCHITECTURES)))
    config = {"task": {"name": task_name}, "arch": {"name": arch_name, "d_model": 16},
              "train": {"max_steps": 20, "eval_every": 10}}
    sections = {"task": TASKS[task_name], "arch": ARCHITECTURES[arch_name],
                "train": TrainConfig, "emergence": EmergenceCriterion}
    for _ in range(draw(st.integers(1, 3))):
        section = draw(st.sampled_from(sorted(sections)))
        field = draw(st.sampled_from(section_fields(sections[section])))
        config.setdefault(section, {})[field] = draw(HOSTILE)
    if draw(st.booleans()):
        config["seed"] = draw(HOSTILE)
    if draw(st.booleans()):
        key = draw(st.sampled_from(["devices", "precision", "num_nodes", "fast_dev_run",
                                    "max_epochs", "deterministic", "bogus"]))
        config["trainer"] = {key: draw(HOSTILE)}
    return config


def one_line_naming_a_field(error: ConfigError) -> bool:
    text = str(error)
    return "\n" not in text and ":" in text and len(text) < 600


@SETTINGS
@given(run_configs())
def test_any_run_config_is_valid_and_fits_or_is_one_line(config):
    try:
        cfg = load_run_config(config)
        check_memory(cfg)
    except ConfigError as e:
        assert one_line_naming_a_field(e), str(e)
        return
    assert cfg.seed >= 0 and cfg.train.eval_every <= cfg.train.max_steps
    for section in (cfg.task, cfg.arch, cfg.train, cfg.emergence):
        for f in dataclasses.fields(section):
            value = getattr(section, f.name)
            assert not isinstance(value, float) or math.isfinite(value), (f.name, value)


SPEC = {"name": "tiny", "task": {"name": "linear_map", "state_size": 4},
        "archs": [{"name": "mlp_mixer", "d_model": 16, "n_layers": 1}], "seeds": 1,
        "train": {"max_steps": 20, "eval_every": 10}}


@SETTINGS
@given(key=st.sampled_from(["name", "seeds", "task", "archs", "train", "trainer", "tune",
                            "tests", "plots", "claim", "emergence", "bogus"]),
       value=HOSTILE)
def test_any_spec_key_is_valid_or_one_line_and_writes_nothing(tmp_path_factory, key, value):
    folder = tmp_path_factory.mktemp("spec")
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump({**SPEC, key: value}))
    try:
        expand(load_spec(path))
    except ConfigError as e:
        assert one_line_naming_a_field(e), str(e)
    assert sorted(p.name for p in Path(folder).iterdir()) == ["spec.yaml"]
