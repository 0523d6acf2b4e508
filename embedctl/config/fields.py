"""Small helpers for declaring config fields.

Field documentation lives in attribute docstrings (a string literal right after the field), the
convention levanter and litgpt use; :func:`field_docs` reads them back with ``ast`` so that
``embedctl config keys`` and the generated reference in docs/ use the same text as the code.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from functools import cache
from typing import Any


def choice(default: str, *choices: str) -> Any:
    """A string field restricted to ``choices`` (OmegaConf has no Literal type, so we validate)."""
    assert default in choices, (default, choices)
    return dataclasses.field(default=default, metadata={"choices": tuple(choices)})


def default_list(*items: Any) -> Any:
    return dataclasses.field(default_factory=lambda: list(items))


def default_dict() -> Any:
    return dataclasses.field(default_factory=dict)


def choices_of(f: dataclasses.Field) -> tuple[str, ...] | None:
    return f.metadata.get("choices") if f.metadata else None


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Map field name -> docstring written right below it in the class body."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    tree = ast.parse(source)
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for prev, node in zip(body, body[1:], strict=False):
        if (
            isinstance(prev, ast.AnnAssign)
            and isinstance(prev.target, ast.Name)
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docs[prev.target.id] = " ".join(node.value.value.split())
    return docs
