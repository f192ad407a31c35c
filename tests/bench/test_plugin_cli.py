"""A plug-in seen from the command line: its fields listed, and an import that fails says where
it looked."""


def test_ls_archs_lists_a_plug_ins_fields(cli, monkeypatch):
    code, captured = cli("ls", "archs", "examples.custom_mixer:CausalConvMixer")
    assert code == 0, captured.err
    assert "kernel_size" in captured.out and "init" in captured.out


def test_a_plug_in_that_does_not_import_says_where_it_looked(cli, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", "/nowhere")
    code, captured = cli("ls", "archs", "mymixers:Mine")
    assert code == 2
    line = captured.err.strip()
    assert line.count("\n") == 0 and "No module named 'mymixers'" in line
    assert str(tmp_path) in line and "/nowhere" in line and "PYTHONPATH" in line


def test_describe_against_a_board_gives_the_baselines_sizes_and_a_matching_width(cli):
    code, captured = cli("describe", "arch.name=examples.custom_mixer:CausalConvMixer",
                         "--against", "leaderboards/quickstart.yaml")
    assert code == 0, captured.err
    lines = captured.out.strip().splitlines()
    assert lines[-2].startswith("against leaderboards/quickstart.yaml (its first task): "
                                "baselines transformer 101,314, mlp_mixer 76,498")
    assert lines[-1].startswith("closest to the median: arch.d_model=")
    assert lines[-1].endswith("within 20%)") and "not within" not in lines[-1]
