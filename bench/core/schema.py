"""What a config dataclass offers a user: each field's type, default and the one-line doc written
under it (the house style), read from the class and its bases without building anything."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import textwrap
from pathlib import Path
from typing import Any, NamedTuple


class Field(NamedTuple):
    name: str
    type: str
    default: Any
    doc: str


def field_docs(schema: type) -> dict[str, str]:
    """{field: the string literal right under its annotation}, bases first, subclasses winning."""
    docs: dict[str, str] = {}
    for cls in reversed(schema.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError, SyntaxError):  # a builtin, or source not on disk
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def field_defaults(schema: type) -> dict[str, Any]:
    """A config dataclass's field defaults (those with a plain default)."""
    return {f.name: f.default for f in dataclasses.fields(schema)
            if f.default is not dataclasses.MISSING}


def describe(schema: type) -> list[Field]:
    """Every field of a config dataclass except `name`, in declaration order."""
    docs = field_docs(schema)
    out = []
    for f in dataclasses.fields(schema):
        if f.name == "name":
            continue
        default = (f.default if f.default is not dataclasses.MISSING else
                   f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        out.append(Field(f.name, kind, default, docs.get(f.name, "")))
    return out


def to_text(name: str, fields: list[Field]) -> str:
    """`name` and one line per field: `  field: type = default   doc`."""
    rows = [(f"{f.name}: {f.type} = {f.default!r}", f.doc) for f in fields]
    width = max((len(left) for left, _ in rows), default=0)
    return "\n".join([name, *(f"  {left:<{width}}  {doc}".rstrip() for left, doc in rows)])


def _class_nodes(module: Path) -> tuple[dict[str, ast.ClassDef], dict[str, Path]]:
    """A module's top-level classes, and where each of its relative `from .x import Name`s lives."""
    tree = ast.parse(module.read_text())
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    imported = {alias.asname or alias.name: module.parent / f"{node.module}.py"
                for node in tree.body if isinstance(node, ast.ImportFrom) and node.level == 1
                and node.module for alias in node.names}
    return classes, imported


def _read_class(module: Path, name: str) -> dict[str, Field]:
    """{field: Field} of a dataclass read from source, bases first (same package only)."""
    classes, imported = _class_nodes(module)
    if name not in classes:
        if name in imported:
            return _read_class(imported[name], name)
        raise LookupError(f"{module}: no class {name}")
    node, out = classes[name], {}
    for base in node.bases:
        if isinstance(base, ast.Name):
            out.update(_read_class(imported.get(base.id, module), base.id))
    for stmt, after in zip(node.body, [*node.body[1:], None]):
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        doc = (" ".join(after.value.value.split()) if isinstance(after, ast.Expr)
               and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)
               else "")
        default = ast.literal_eval(stmt.value) if stmt.value is not None else None
        old = out.get(stmt.target.id)
        out[stmt.target.id] = Field(stmt.target.id, ast.unparse(stmt.annotation), default,
                                    doc or (old.doc if old else ""))
    return out


def describe_registry(package: str, registry: str) -> dict[str, list[Field]]:
    """Every entry of a package's `registry = {"name": ConfigClass, ...}` dict in its __init__.py,
    described from source without importing the package (so `bench ls archs` loads no torch).
    Agrees with `describe(cls)` on every entry (tested)."""
    spec = importlib.util.find_spec(package)  # finds the package without running it
    if spec is None or spec.origin is None:
        raise LookupError(f"{package}: not importable")
    init = Path(spec.origin)
    tree = ast.parse(init.read_text())
    table = next(n.value for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                 and registry in [t.id for t in (n.targets if isinstance(n, ast.Assign)
                                                 else [n.target]) if isinstance(t, ast.Name)])
    out = {}
    for key, value in zip(table.keys, table.values):
        fields = _read_class(init, value.id)
        out[key.value] = [f for f in fields.values() if f.name != "name"]
    return out
