"""`--help` shows every default, bracketed ones included (no markup eats them)."""


def test_help_keeps_bracketed_defaults(cli):
    code, captured = cli("sweep", "--help")
    assert code == 0 and "[next to SPEC, no .yaml]" in captured.out
    assert "[processes: #GPUs, else #cores;" in captured.out
    code, captured = cli("run", "--help")
    assert "[runs/<job id>]" in captured.out and "--print-config" in captured.out
