"""`bench run --config FILE --print-config`: a file of sections, overrides winning, and the
printed config read back as the same job."""

import yaml


def test_config_file_overrides_win_and_the_printed_config_round_trips(cli, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("task: {name: linear_map, state_size: 8}\narch: {name: mlp_mixer}\n"
                    "train: {lr: 0.01}\n")
    code, captured = cli("run", "--config", str(path), "train.lr=0.003", "--print-config")
    assert code == 0
    printed = yaml.safe_load(captured.out)
    assert printed["task"]["state_size"] == 8 and printed["train"]["lr"] == 0.003
    assert printed["arch"]["name"] == "mlp_mixer" and "n_heads" in printed["arch"]  # every field
    job = captured.out.splitlines()[0]
    (tmp_path / "full.yaml").write_text(captured.out)
    code, again = cli("run", "--config", str(tmp_path / "full.yaml"), "--print-config")
    assert code == 0 and again.out.splitlines()[0] == job  # same config, same job id
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full.yaml", "run.yaml"]  # no run


def test_a_bad_config_file_is_one_line(cli, tmp_path):
    (tmp_path / "list.yaml").write_text("- task\n")
    (tmp_path / "bad.yaml").write_text("train: {lr: -1}\n")
    (tmp_path / "scalar.yaml").write_text("42\n")
    (tmp_path / "section.yaml").write_text("task: [1, 2]\n")
    for name, message in (("missing.yaml", "no such file"), ("list.yaml", "must be a mapping"),
                          ("bad.yaml", "train.lr: must be in (0, 1e+06], got -1"),
                          ("scalar.yaml", "must be a mapping of sections"),
                          ("section.yaml", "task: must be a mapping of fields "
                                           "(task.FIELD=VALUE), got a list")):
        code, captured = cli("run", "--config", str(tmp_path / name))
        assert code == 2 and message in captured.err and len(captured.err.splitlines()) == 1
