"""`bench ls` reads every field's type, default and doc from the config classes themselves."""

import dataclasses
import json
import subprocess
import sys

import pytest

from architectures import ARCHITECTURES
from bench.core.schema import describe, describe_registry, field_docs
from datamodules import TASKS


def test_every_registered_field_is_documented_where_it_is_defined():
    for name, schema in {**TASKS, **ARCHITECTURES}.items():
        undocumented = [f.name for f in describe(schema) if not f.doc]
        assert not undocumented, f"{name}: {undocumented}"


def test_docs_come_from_the_line_under_the_field_and_subclasses_win():
    @dataclasses.dataclass
    class Base:
        width: int = 4
        """the base's doc"""
        depth: int = 2

    @dataclasses.dataclass
    class Child(Base):
        width: int = 8
        """the child's doc"""

    assert field_docs(Child) == {"width": "the child's doc"}
    [width, depth] = describe(Child)
    assert (width.default, width.doc, depth.doc) == (8, "the child's doc", "")


def test_ls_lists_fields_and_defaults_and_refuses_unknown_names(cli):
    code, captured = cli("ls", "archs", "transformer")
    assert code == 0 and "n_heads: int = 4" in captured.out and "attention heads H" in captured.out
    code, captured = cli("ls", "tasks", "--json")
    fields = {f["name"]: f for f in json.loads(captured.out)["linear_map"]}
    assert fields["sparsity"]["default"] == 1 and "ones per row" in fields["sparsity"]["doc"]
    assert cli("ls", "models")[0] == 2
    code, captured = cli("ls", "tasks", "parity")
    assert code == 2 and ("allowed: linear_map, cellular_automaton, induction, mqar, dyck, nca"
                          in captured.err)


def test_the_architectures_read_from_source_match_the_classes():
    """`bench ls archs` reads the registry and each config (with its bases) from source; it must
    say exactly what the imported classes say: names, order, types, defaults, docs."""
    from_source = describe_registry("architectures", "ARCHITECTURES")
    assert list(from_source) == list(ARCHITECTURES)
    for name, schema in ARCHITECTURES.items():
        assert from_source[name] == describe(schema), name


@pytest.mark.parametrize("what", ["tasks", "archs"])
def test_ls_loads_no_torch(what):
    audit = ("import sys; from bench.cli import main; sys.argv = ['bench', 'ls', '" + what + "']\n"
             "try: main()\nexcept SystemExit: pass\n"
             "print(sorted(m for m in ('torch', 'lightning', 'fla') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", audit], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"
