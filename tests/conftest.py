import sys

import pytest

from bench.cli import main


@pytest.fixture
def cli(monkeypatch, capsys):
    """Run `bench ARGV...` in process; return (exit code, captured stdout/stderr)."""

    def run(*argv: str):
        monkeypatch.setattr(sys, "argv", ["bench", *argv])
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code or 0
        return code, capsys.readouterr()

    return run
