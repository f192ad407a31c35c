"""What a config dataclass offers a user: each field's type, default and the one-line doc written
under it (the house style), read from the class and its bases without building anything."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
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


def to_text(name: str, schema: type) -> str:
    """`name` and one line per field: `  field: type = default   doc`."""
    rows = [(f"{f.name}: {f.type} = {f.default!r}", f.doc) for f in describe(schema)]
    width = max((len(left) for left, _ in rows), default=0)
    return "\n".join([name, *(f"  {left:<{width}}  {doc}".rstrip() for left, doc in rows)])
