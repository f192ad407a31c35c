"""bench/ is layered: a subpackage imports only itself and those below it, `core` imports no
torch or Lightning, and the cheap commands' entry point loads neither."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

LAYERS = ["core", "training", "measures", "sweeps", "analysis", "tools"]  # lowest first; cli on top
BENCH = Path(__file__).resolve().parents[2] / "bench"


def imported_layers(path: Path) -> set[str]:
    """The bench subpackages a module imports (relative or absolute)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 2 or (node.level == 0 and (node.module or "").startswith("bench.")):
                name = (node.module or "").removeprefix("bench.")
                out.add(name.split(".")[0] if name else "")
            elif node.level == 1:
                out.add(path.parent.name)
    return out


def test_no_subpackage_imports_a_higher_one():
    for layer in LAYERS:
        for module in (BENCH / layer).glob("*.py"):
            above = {m for m in imported_layers(module) if m in LAYERS
                     and LAYERS.index(m) > LAYERS.index(layer)}
            assert not above, f"{module.relative_to(BENCH)} imports {above}"


def test_core_needs_no_torch_or_lightning():
    for module in (BENCH / "core").glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            heavy = [n for n in names if n.split(".")[0] in
                     ("torch", "lightning", "architectures", "datamodules", "fla")]
            assert not heavy, f"core/{module.name} imports {heavy}"


def test_the_cli_entry_point_and_help_load_no_torch():
    code = ("import sys; import bench.cli, bench.core.stats, bench.core.rows; "
            "print(sorted(m for m in ('torch', 'lightning', 'fla') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_bad_task_field_is_reported_before_torch_loads():
    """`bench task` validates the task config (torch-free) first: a typo answers at once."""
    code = ("import sys\nfrom bench.cli import main\nsys.argv = ['bench', 'task', 'mqar', "
            "'n_pairs=-1']\ntry: main()\nexcept SystemExit as e: print('exit', e.code)\n"
            "print(sorted(m for m in ('torch', 'lightning', 'fla') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-2:] == ["exit 2", "[]"]
    assert out.stderr.strip() == "error: task.n_pairs: must be in 1..65536, got -1"


@pytest.mark.parametrize("field", ["task.sparsity=0", "train.lr=-1", "measure.influence_size=-1",
                                   "runtime.screen_size=-1", "emergence.consecutive=0"])
def test_a_bad_run_field_outside_arch_is_reported_before_torch_loads(field):
    """`bench run`: every section but arch (whose configs live beside the mixers' torch code)
    is checked torch-free, so such a typo answers in a fraction of a second."""
    code = ("import sys\nfrom bench.cli import main\nsys.argv = ['bench', 'run', " + repr(field)
            + "]\ntry: main()\nexcept SystemExit as e: print('exit', e.code)\n"
            "print(sorted(m for m in ('torch', 'lightning', 'fla') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-2:] == ["exit 2", "[]"], out.stderr
    assert out.stderr.startswith(f"error: {field.split('=')[0]}: ")
