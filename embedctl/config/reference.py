"""A reference of every key, generated from the dataclass docstrings (used by `config keys` and docs/)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass

from embedctl.config.fields import choices_of, constraint_of, field_docs
from embedctl.config.schema import RootConfig
from embedctl.config.validate import _describe, _is_dataclass_type


@dataclass
class Row:
    key: str
    type: str
    default: str
    doc: str
    section: bool = False


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
    else:
        return ""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)


def reference_rows(cls: type = RootConfig, prefix: str = "") -> list[Row]:
    rows: list[Row] = []
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        dotted = f"{prefix}{f.name}"
        if _is_dataclass_type(tp):
            rows.append(Row(dotted, "section", "", docs.get(f.name, (tp.__doc__ or "").strip()), section=True))
            rows += reference_rows(tp, dotted + ".")
            continue
        choices, constraint = choices_of(f), constraint_of(f)
        type_text = "one of " + ", ".join(choices) if choices else _describe(tp)
        if constraint is not None:
            type_text += f", {constraint.describe()}"
        rows.append(Row(dotted, type_text, _default(f), docs.get(f.name, "")))
    return rows


def reference_markdown() -> str:
    lines = [
        "# Config reference",
        "",
        "Generated from the dataclass docstrings by `embedctl config keys --markdown`; do not edit by hand.",
        "",
    ]
    for row in reference_rows():
        if row.section and "." not in row.key:
            lines += ["", f"## `{row.key}`", "", row.doc, "", "| key | type | default | meaning |", "|---|---|---|---|"]
        elif row.section:
            lines.append(f"| `{row.key}` | section | | {row.doc} |")
        else:
            lines.append(f"| `{row.key}` | {row.type} | `{row.default}` | {row.doc} |")
    return "\n".join(lines) + "\n"
