"""Bad user input, as one exception type. No heavy imports: every command can raise and catch it."""


from pathlib import Path


def install_hint(extra: str) -> str:
    """The command that installs an optional extra: from the clone this package runs from (an
    editable install), or from the package index."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").exists() and (root / "bench").is_dir():
        return f"pip install -e '{root}[{extra}]'"
    return f"pip install 'emergence-bench[{extra}]'"


class ConfigError(ValueError):
    """Bad user input; the message is one line that names the field."""


class Interrupted(Exception):
    """A sweep stopped by Ctrl-C (SIGINT): its running jobs are back to pending; the message is
    the one line the command prints before it exits 130."""
