"""`bench task` prints what the task itself says about its instance: no branching on its name."""


def test_bench_task_prints_each_tasks_own_picture_of_its_rule(cli):
    code, captured = cli("task", "linear_map", "state_size=4", "sparsity=1", "--samples", "2")
    assert code == 0, captured.err
    out = captured.out
    assert "A (row i lists which tokens of x_t give x_{t+1}[i]):" in out
    matrix = out.split("give x_{t+1}[i]):\n")[1].splitlines()[:4]
    assert all(sorted(line.split()) == ["0", "0", "0", "1"] for line in matrix)  # s = 1

    code, captured = cli("task", "cellular_automaton", "n_cells=5", "n_colors=2", "n_rules=2",
                         "n_states=3", "--samples", "2")
    assert code == 0, captured.err
    out = captured.out
    assert "sample 0 (rule " in out and "sample 1 (rule " in out
    rules = [line for line in out.splitlines() if line.startswith("rule ")]
    assert len(rules) == 2 and all(len(r.split()) == 2 + 8 for r in rules)  # 2^3 neighbourhoods
    assert rules[0].split()[2].startswith("000->")


def test_bench_task_takes_the_task_prefix_a_bench_run_line_uses(cli):
    """`task.sparsity=1` (copied from `bench run`) means `sparsity=1`, not an unknown key."""
    plain = cli("task", "linear_map", "state_size=4", "sparsity=1", "--json")
    prefixed = cli("task", "linear_map", "task.state_size=4", "task.sparsity=1", "--json")
    assert plain[0] == prefixed[0] == 0, prefixed[1].err
    assert plain[1].out == prefixed[1].out
