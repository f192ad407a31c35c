"""A tiny sweep end to end: results, leaderboard files, resume, re-render."""

import csv

from bench.sweep import expand, load_spec

SPEC = """
name: tiny
task: {name: linear_map, state_size: 4, sparsity: 1, n_states: 3}
archs:
  - {name: transformer, d_model: 32, n_layers: 1}
  - {name: mlp_mixer, d_model: 32, n_layers: 1}
seeds: 2
train: {max_steps: 60, eval_every: 20, eval_size: 128, batch_size: 32, lr: 0.003}
"""


def test_a_list_of_tasks_expands_task_by_task(tmp_path):
    spec_path = tmp_path / "s.yaml"
    spec_path.write_text(SPEC.replace(
        "task: {name: linear_map, state_size: 4, sparsity: 1, n_states: 3}",
        "task: [{name: linear_map}, {name: cellular_automaton, n_colors: 2}]"))
    jobs = expand(load_spec(spec_path))
    assert [(j.task.name, j.arch.name, j.seed) for j in jobs][:5] == [
        ("linear_map", "transformer", 0), ("linear_map", "transformer", 1),
        ("linear_map", "mlp_mixer", 0), ("linear_map", "mlp_mixer", 1),
        ("cellular_automaton", "transformer", 0)]
    assert len(jobs) == 8


def test_job_ids_are_stable_and_distinct(tmp_path):
    spec_path = tmp_path / "s.yaml"
    spec_path.write_text(SPEC)
    jobs = expand(load_spec(spec_path))
    ids = [j.job_id() for j in jobs]
    assert len(ids) == 4 == len(set(ids))
    assert ids == [j.job_id() for j in expand(load_spec(spec_path))]


def test_sweep_writes_leaderboard_and_resumes(tmp_path, cli):
    spec_path = tmp_path / "tiny.yaml"
    spec_path.write_text(SPEC)
    assert cli("sweep", str(spec_path))[0] == 0
    out = tmp_path / "tiny"
    results = sorted((out / "runs").glob("*/result.json"))
    assert len(results) == 4
    for name in ("leaderboard.md", "leaderboard.csv", "emergence.png"):
        assert (out / name).stat().st_size > 0
    rows = list(csv.DictReader((out / "leaderboard.csv").open()))
    assert {r["architecture"] for r in rows} == {"transformer(d_model=32, n_layers=1)",
                                                 "mlp_mixer(d_model=32, n_layers=1)"}
    assert all(r["seeds"] == "2" for r in rows)
    assert "median steps [95% CI]" in (out / "leaderboard.md").read_text()

    # a rerun trains nothing: every finished job is skipped
    stamps = {p: p.stat().st_mtime_ns for p in results}
    unfinished = results[0].parent
    (unfinished / "result.json").unlink()  # as if killed mid-run
    assert cli("sweep", str(spec_path))[0] == 0
    for p, stamp in stamps.items():
        assert p.exists()
        if p.parent != unfinished:
            assert p.stat().st_mtime_ns == stamp

    (out / "leaderboard.md").unlink()
    assert cli("leaderboard", str(out))[0] == 0
    assert (out / "leaderboard.md").read_text().startswith("# tiny")


def test_leaderboard_of_an_empty_directory_is_a_clear_error(tmp_path, cli):
    code, captured = cli("leaderboard", str(tmp_path))
    assert code == 2 and "no finished runs" in captured.err
