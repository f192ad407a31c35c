"""The cost plan: printed before a sweep trains, alone with --estimate (nothing written, exit 0),
and a cap that refuses a plan above it; best and worst cases follow from the calibrated rate."""

import pytest

from bench.sweeps import plan as plan_module
from bench.sweeps.plan import make_plan
from bench.sweeps.spec import expand, load_spec

SPEC = """name: tiny
task: {name: linear_map, state_size: 8, sparsity: 1, n_states: 2}
archs:
  - {name: transformer, d_model: 16, n_layers: 1}
  - {name: mlp_mixer, d_model: 16, n_layers: 1}
seeds: 2
train: {max_steps: 400, eval_every: 50, eval_size: 64, batch_size: 16}
emergence: {consecutive: 3}
"""


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(SPEC)
    return path


def test_best_and_worst_cases_follow_from_the_rate(spec, monkeypatch):
    monkeypatch.setattr(plan_module, "calibrate", lambda job, threads: 10.0)  # steps/s
    jobs = expand(load_spec(spec))
    plan = make_plan(jobs, workers=2)
    assert plan.jobs == 4 and len(plan.rows) == 2
    share = 1 + plan_module.EVAL_SHARE
    assert plan.worst_h == pytest.approx(4 * 400 / 10 * share / 3600 / 2)
    assert plan.best_h == pytest.approx(4 * 100 / 10 * share / 3600 / 2)  # 2 evals after 0
    finished = {jobs[0].job_id()}
    assert make_plan(jobs, workers=2, finished=finished).jobs == 3


def test_estimate_prints_the_plan_and_writes_nothing(spec, cli, tmp_path):
    code, captured = cli("sweep", str(spec), "--out", str(tmp_path / "out"), "--estimate")
    assert code == 0, captured.err
    assert captured.err.startswith("plan: 4 job(s) to train with 1 worker(s)")
    assert "steps/s (calibrated here)" in captured.err
    assert not (tmp_path / "out").exists()


def test_a_plan_above_the_cap_is_refused_in_one_line(spec, cli, tmp_path):
    code, captured = cli("sweep", str(spec), "--out", str(tmp_path / "out"),
                         "--max-hours", "0.0000001")
    assert code == 2
    assert captured.err.strip().splitlines()[-1].startswith("error: --max-hours: the worst case")
    assert not (tmp_path / "out").exists()
    code, captured = cli("sweep", str(spec), "--max-hours", "nan")
    assert code == 2 and "--max-hours: must be a positive number" in captured.err


def test_the_plan_names_each_row_by_the_hash_row_accepts(spec, monkeypatch):
    """The plan's advice is 'run fewer rows (--row)': each row it lists is named by the config
    hash that `bench status`, the table and --row use."""
    from bench.core.rows import group_key
    from bench.sweeps.spec import row_filter

    monkeypatch.setattr(plan_module, "calibrate", lambda job, threads: 10.0)
    loaded = load_spec(spec)
    jobs = expand(loaded)
    shown = [row for row, *_ in make_plan(jobs, workers=2).rows]
    assert sorted(shown) == sorted({group_key(j.to_dict()) for j in jobs})
    keep = row_filter(loaded, [shown[0][:6]])
    assert {group_key(j.to_dict()) for j in jobs if keep(j)} == {shown[0]}
