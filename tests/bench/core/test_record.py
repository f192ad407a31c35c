"""The run record: the one contract between training and every analysis reads every committed
database as it is, refuses what is not a run's record, and writes result.json's keys in order."""

import json
import sqlite3
from pathlib import Path

import pytest

from bench.core.errors import ConfigError
from bench.core.record import MixingMaps, RunRecord, upgrade_config
from bench.core.rows import job_id
from tests.records import NEUTRAL, record

ROOT = Path(__file__).resolve().parents[3]
OPTIONAL_NONE = ("influence", "intervention", "attention_target")


def committed_results():
    for db in sorted(ROOT.glob("leaderboards/**/results.sqlite")):
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            for (text,) in conn.execute("SELECT result FROM jobs WHERE result IS NOT NULL"):
                yield db, json.loads(text)


def test_every_committed_record_reads_and_writes_back_the_same_values():
    seen = 0
    for db, data in committed_results():
        out = RunRecord.from_json(data).to_json()
        kept = {k: v for k, v in data.items() if not (v is None and k in OPTIONAL_NONE)}
        # the one upgrade: a record from before arch.init ran PyTorch's defaults
        assert out["config"]["arch"]["init"] == data["config"]["arch"].get("init", "torch")
        kept["config"] = upgrade_config(kept["config"])
        assert json.dumps(out, sort_keys=True) == json.dumps(kept, sort_keys=True), db
        assert job_id(out["config"]) == job_id(data["config"]) == data["job_id"], db
        seen += 1
    assert seen > 800  # every committed board's runs


def test_what_is_not_a_run_record_is_refused_naming_the_fields():
    with pytest.raises(ConfigError, match=r"unknown fields \['bogus'\]"):
        RunRecord.from_json({**NEUTRAL, "bogus": 1})
    with pytest.raises(ConfigError, match=r"missing fields \['status'\]"):
        RunRecord.from_json({k: v for k, v in NEUTRAL.items() if k != "status"})
    with pytest.raises(ConfigError, match="must be a JSON object"):
        RunRecord.from_json([1, 2])


def test_post_hoc_fields_are_written_only_where_a_run_made_them():
    run = record(status="emerged", steps_to_emergence=100, budget_steps=400)
    assert "patch" not in run.to_json() and "refined_step" not in run.to_json()
    run.refined_step = 73
    assert run.to_json()["refined_step"] == 73 and run.emergence_step == 73
    assert list(run.to_json())[:3] == ["job_id", "status", "steps_to_emergence"]


def test_the_record_answers_for_itself():
    run = record(status="censored", budget_steps=400, accuracy={"heldout_token_acc": 0.6},
                 config={"seed": 3, "emergence": {"metric": "val/loss", "threshold": 0.1}},
                 intervention={"steps": [0, 50], "maps": [[[1.0]], [[0.5]]], "rows": [1]})
    assert (run.seed, run.emerged, run.survival_time) == (3, False, 400)
    assert run.criterion.metric == "val/loss" and run.criterion.consecutive == 2  # its default
    assert isinstance(run.intervention, MixingMaps) and run.intervention.rows == [1]
    scalars = run.scalars()
    assert scalars["heldout_token_acc"] == 0.6 and scalars["status"] == "censored"
    assert not {"config", "curves", "intervention", "accuracy", "patch"} & set(scalars)
