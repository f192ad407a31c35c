"""The config's sections own their place in the job id: `train`, `emergence`, `trainer`, the task
and the architecture are the experiment; `measure` (what is measured beside training) and
`runtime` (how and where it runs) are not, whole, with no list of names to keep. Fields that
moved there read from their old places (command lines, specs, records) through one upgrade."""

import dataclasses

import pytest

from bench.core.errors import ConfigError
from bench.core.record import MOVED
from bench.core.rows import group_key, job_id
from bench.sweeps.spec import expand, load_spec
from bench.training.config import MeasureConfig, RuntimeConfig, load_run_config

# a value away from each moved field's default
CHANGED = {"compile": True, "checkpoint_every": 7, "screen_size": 3, "influence_size": 2,
           "influence_rows": 1, "influence_every": 5, "patch": True, "circuits": True,
           "keep_checkpoints": True, "refine": True, "accelerator": "cpu", "devices": 1,
           "strategy": "ddp_spawn", "num_nodes": 1, "logger": "tensorboard"}


def test_no_field_of_measure_or_runtime_moves_the_job_id():
    plain = load_run_config([])
    for section, schema in (("measure", MeasureConfig), ("runtime", RuntimeConfig)):
        for f in dataclasses.fields(schema):
            value = CHANGED[f.name]
            cfg = load_run_config([f"{section}.{f.name}={value}",
                                   *(["measure.keep_checkpoints=true"]
                                     if f.name in ("patch", "circuits") else [])])
            assert getattr(getattr(cfg, section), f.name) == value
            assert cfg.job_id() == plain.job_id(), f"{section}.{f.name}"


def test_every_field_of_the_experiment_sections_moves_it():
    plain = load_run_config([]).job_id()
    for change in ("train.max_steps=3001", "train.probe_size=255", "emergence.consecutive=3",
                   "emergence.stop_early=false", "trainer.deterministic=true",
                   "arch.d_model=32", "task.sparsity=3", "seed=1"):
        assert load_run_config([change]).job_id() != plain, change


def test_the_moved_fields_read_from_their_old_places():
    for old, fields in MOVED.items():
        for name, new in fields.items():
            extra = ["measure.keep_checkpoints=true"] if name in ("patch", "circuits") else []
            before = load_run_config([f"{old}.{name}={CHANGED[name]}", *extra])
            after = load_run_config([f"{new}.{name}={CHANGED[name]}", *extra])
            assert before == after, f"{old}.{name}"
    with pytest.raises(ConfigError, match=r"^train\.patch: now measure\.patch, and both are "
                                          r"given; give measure\.patch only$"):
        load_run_config(["train.patch=true", "measure.patch=true"])


def test_an_old_spec_and_an_old_record_key_the_same_jobs(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("name: s\ntask: {name: linear_map, state_size: 8, sparsity: 1}\n"
                   "archs: [{name: transformer, d_model: 16, n_layers: 1}]\nseeds: 1\n"
                   "train: {max_steps: 100, keep_checkpoints: true, compile: false}\n"
                   "emergence: {refine: true}\ntrainer: {accelerator: cpu}\n")
    new = tmp_path / "new.yaml"
    new.write_text("name: s\ntask: {name: linear_map, state_size: 8, sparsity: 1}\n"
                   "archs: [{name: transformer, d_model: 16, n_layers: 1}]\nseeds: 1\n"
                   "train: {max_steps: 100}\nmeasure: {keep_checkpoints: true, refine: true}\n"
                   "runtime: {accelerator: cpu, compile: false}\n")
    (a,), (b,) = expand(load_spec(old)), expand(load_spec(new))
    assert a == b and a.measure.refine and a.runtime.accelerator == "cpu"
    # a record written before the sections: every moved field in its old place
    record = b.to_dict()
    for section in ("measure", "runtime"):
        record.pop(section)
    record["train"] |= {"keep_checkpoints": True, "checkpoint_every": 500}
    record["emergence"] |= {"refine": True}
    record["trainer"] = {"accelerator": "cpu", "devices": 1}
    assert job_id(record) == b.job_id() and group_key(record) == group_key(b.to_dict())
