"""Every command in the README and in examples/README.md is exercised, so the front door cannot
drift from the code: cheap commands run; those that train are checked without training (the
resolved config, the spec's jobs, `bench compare`'s preparation); a documented error prints the
documented line; the Python API block runs with the training calls validated, and its printed
numbers are the committed board's. A command this file does not know how to check fails."""

import re
import shlex
from pathlib import Path

import pytest

import bench.api
from bench.analysis.compare import prepare
from bench.analysis.reproduce import committed_dir, select_spec
from bench.sweeps.spec import expand, load_spec, tuning_jobs
from bench.training.config import load_run_config

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "examples" / "README.md"]


def blocks(path: Path) -> list[tuple[str, str]]:
    """(language, body) of each fenced code block."""
    return re.findall(r"```(\w*)\n(.*?)```", path.read_text(), re.S)


def shell_lines(body: str) -> list[str]:
    """Commands of a shell block, continuation lines joined, output lines kept as they are."""
    return [line.strip() for line in body.replace("\\\n", " ").splitlines() if line.strip()]


def shell_commands() -> list[tuple[str, str, str | None]]:
    """(doc, command, the documented output line that follows it, for `$ ` commands)."""
    out = []
    for doc in DOCS:
        for lang, body in blocks(doc):
            if lang == "python":
                continue
            lines = shell_lines(body)
            for i, line in enumerate(lines):
                if line.startswith("$ "):
                    out.append((doc.name, line[2:], lines[i + 1] if i + 1 < len(lines) else None))
                elif line.startswith(("bench ", "make ")):
                    out.append((doc.name, line, None))
    return out


COMMANDS = shell_commands()


def split(command: str) -> tuple[list[str], dict[str, str]]:
    """(positional arguments, --options) of a command line, comments dropped."""
    words = shlex.split(command, comments=True)
    args, options, i = [], {}, 0
    while i < len(words):
        if words[i].startswith("--"):
            options[words[i]] = words[i + 1]
            i += 2
        else:
            args.append(words[i])
            i += 1
    return args, options


def test_the_docs_hold_commands():
    assert len(COMMANDS) >= 10
    assert {c.split()[1] for _, c, _ in COMMANDS} >= {"run", "describe", "compare", "reproduce"}


@pytest.mark.parametrize(("doc", "command", "output"), COMMANDS,
                         ids=[f"{d}:{c[:60]}" for d, c, _ in COMMANDS])
def test_every_documented_command_works(doc, command, output, cli, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT))  # examples.custom_mixer, as from the checkout
    monkeypatch.chdir(ROOT)
    args, options = split(command)
    if args[0] == "make":
        makefile = (ROOT / "Makefile").read_text()
        assert re.search(rf"^{args[1]}:", makefile, re.M), f"make {args[1]}: no such target"
        if args[1] == "quickstart":  # what it trains: the quickstart spec, every job valid
            assert expand(load_spec(ROOT / "leaderboards" / "quickstart.yaml"))
        return
    sub, rest = args[1], args[2:]
    if output is not None:  # a documented error: one line, exit 2, as printed
        code, captured = cli(*args[1:])
        assert code == 2 and captured.err.strip() == output, captured.err
    elif sub in ("describe", "task", "ls"):
        code, captured = cli(*args[1:])
        assert code == 0, captured.err
    elif sub == "run":  # trains: the resolved config is checked instead
        code, captured = cli("run", *rest, "--print-config")
        assert code == 0, captured.err
    elif sub == "compare":  # trains the new row: its preparation is checked instead
        plan = prepare(Path(options["--against"]), rest, tmp_path / "cmp")
        assert plan.new_jobs
    elif sub == "reproduce":  # trains every row: the spec, seeds and committed results instead
        spec_path = Path(rest[0])
        spec = select_spec(load_spec(spec_path), int(options["--seeds"]) if "--seeds" in options
                           else None, int(options.get("--seed-start", 0)))
        assert expand(spec) and (committed_dir(spec_path) / "results.sqlite").is_file()
    elif sub == "sweep":
        assert expand(load_spec(Path(rest[0])))
    else:
        pytest.fail(f"{doc}: no check for `bench {sub}`; add one here")


def python_blocks() -> list[tuple[str, str]]:
    return [(doc.name, body) for doc in DOCS for lang, body in blocks(doc) if lang == "python"]


@pytest.mark.parametrize(("doc", "code"), python_blocks(), ids=lambda x: str(x)[:30])
def test_the_python_blocks_run(doc, code, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(ROOT))
    monkeypatch.chdir(ROOT)
    outs = {options["--out"] for _, c, _ in COMMANDS for options in [split(c)[1]]
            if "--out" in options}
    # what trains is validated, not run: a config resolves, a spec expands, a compare prepares
    monkeypatch.setattr(bench.api, "train", lambda overrides, out=None, **kw: (
        load_run_config(overrides), None)[1])
    monkeypatch.setattr(bench.api, "sweep", lambda spec, **kw: (
        expand(load_spec(Path(spec))), tuning_jobs(load_spec(Path(spec))), None)[-1])
    monkeypatch.setattr(bench.api, "compare", lambda spec, overrides, **kw: prepare(
        Path(spec), overrides, tmp_path / "cmp") and None)
    real_load = bench.api.load_results

    def load_results(path):  # a directory the docs' own commands write, or a committed board
        if str(path) in outs:
            return None
        return real_load(path)

    monkeypatch.setattr(bench.api, "load_results", load_results)
    scope: dict = {}
    # a script's `if __name__ == "__main__":` block runs as the main module's would
    lines = [line[4:] if line.startswith("    ") else line for line in code.strip().splitlines()
             if not line.startswith("if __name__ == ")]
    for line in lines:
        expression = line.split("#")[0].strip()
        if not expression:
            continue
        if "runs" in scope and scope["runs"] is None and "runs[" in line:
            continue  # reads a directory a documented command writes: checked above
        claimed = line.split("#", 1)[1].strip() if "#" in line else ""
        try:
            value = eval(expression, scope)
        except SyntaxError:
            exec(expression, scope)
            continue
        numbers = dict(re.findall(r"([a-z_]+) ([0-9.]+)", claimed))
        if numbers and hasattr(value, "items"):  # a printed result the comment quotes
            shown = {str(k): float(v) for k, v in value.items()}
            assert {k: float(v) for k, v in numbers.items()} == \
                {k: shown[k] for k in numbers}, f"{doc}: {line}"
