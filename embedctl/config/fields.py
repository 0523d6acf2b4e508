"""Small helpers for declaring config fields.

Field documentation lives in attribute docstrings (a string literal right after the field), the
convention levanter and litgpt use; :func:`field_docs` reads them back with ``ast`` so that
``embedctl config keys`` and the generated reference in docs/ use the same text as the code.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import textwrap
from functools import cache
from typing import Any


def choice(default: str, *choices: str) -> Any:
    """A string field restricted to ``choices`` (OmegaConf has no Literal type, so we validate)."""
    assert default in choices, (default, choices)
    return dataclasses.field(default=default, metadata={"choices": tuple(choices)})


@dataclasses.dataclass(frozen=True)
class Constraint:
    """A range a numeric field must lie in, checked by the loader for every section (exit 2 naming the key).

    ``low``/``high`` bound the value (``low_open``: strictly above ``low``); ``values`` lists the only
    allowed values. A list field's constraint applies to each item; null always passes (Optional fields);
    NaN and infinity never do (YAML's `.nan` / `.inf` would pass every comparison)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    values: tuple[Any, ...] | None = None

    def allows(self, value: Any) -> bool:
        if value is None:
            return True
        if isinstance(value, list):
            return all(self.allows(v) for v in value)
        if isinstance(value, float) and not math.isfinite(value):  # `.nan` / `.inf` pass every comparison test
            return False
        if self.values is not None:
            return value in self.values
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or value <= self.high

    def describe(self) -> str:
        """E.g. ``>= 1``, ``> 0``, ``in [0, 1]``, ``one of 1, 2, 4``."""
        if self.values is not None:
            return "one of " + ", ".join(str(v) for v in self.values)
        if self.low is not None and self.high is not None:
            return f"in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}]"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {_num(self.low)}"
        return f"<= {_num(self.high)}"

    def example(self) -> Any:
        """A value that passes (for the "how to fix" line)."""
        if self.values is not None:
            return self.values[0]
        if self.low is None:
            return self.high
        return self.low if not self.low_open else (self.low + 1 if self.high is None else (self.low + self.high) / 2)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def constrained(default: Any, constraint: Constraint) -> Any:
    """A field with ``default`` and ``constraint`` (see :class:`Constraint`); a list default is copied."""
    assert constraint.allows(default), (default, constraint)
    if isinstance(default, list):
        items = list(default)
        return dataclasses.field(default_factory=lambda: list(items), metadata={"constraint": constraint})
    return dataclasses.field(default=default, metadata={"constraint": constraint})


def positive(default: Any) -> Any:
    """A number > 0 (null allowed when the field is Optional), e.g. ``batch_size: int = positive(32)``."""
    return constrained(default, Constraint(low=0, low_open=True))


def at_least(n: float, default: Any) -> Any:
    """A number >= ``n``, e.g. ``save_every: int = at_least(0, 500)``."""
    return constrained(default, Constraint(low=n))


def between(low: float, high: float, default: Any, *, low_open: bool = False) -> Any:
    """A number in [low, high] ((low, high] with ``low_open``), e.g. ``mine_margin: float = between(0, 1, 0.95)``."""
    return constrained(default, Constraint(low=low, high=high, low_open=low_open))


def one_of(default: Any, *values: Any) -> Any:
    """A number restricted to ``values``, e.g. ``nbits: int = one_of(2, 1, 2, 4)`` (strings: :func:`choice`)."""
    return constrained(default, Constraint(values=tuple(values)))


def constraint_of(f: dataclasses.Field) -> Constraint | None:
    return f.metadata.get("constraint") if f.metadata else None


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
