"""Error messages name the install command that works where the suite runs."""

from pathlib import Path

from bench.core.errors import install_hint

ROOT = Path(__file__).resolve().parents[3]


def test_install_hint_names_the_clone_it_runs_from():
    assert install_hint("slurm") == f"pip install -e '{ROOT}[slurm]'"
