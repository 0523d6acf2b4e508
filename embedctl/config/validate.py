"""Check a raw mapping against the dataclass schema, collecting every problem before failing."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any, Union

from embedctl.config.fields import choices_of, constraint_of

_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def all_keys(cls: type, prefix: str = "") -> list[str]:
    """Every dotted key the schema knows, sections included."""
    keys: list[str] = []
    for name, tp in _hints(cls).items():
        dotted = f"{prefix}{name}"
        keys.append(dotted)
        if _is_dataclass_type(tp):
            keys += all_keys(tp, dotted + ".")
    return keys


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _describe(tp: Any) -> str:
    tp, optional = _unwrap_optional(tp)
    origin = typing.get_origin(tp)
    if origin is list:
        (inner,) = typing.get_args(tp) or (Any,)
        text = f"a list of {_describe(inner).removeprefix('a ').removeprefix('an ')}s" if inner is not Any else "a list"
    elif origin is dict:
        text = "a mapping"
    else:
        text = _TYPE_WORDS.get(tp, getattr(tp, "__name__", str(tp)))
    return text + (" or null" if optional else "")


def _show(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})" if value is not None else "null"


def _check_value(value: Any, tp: Any) -> tuple[bool, Any]:
    """Return (ok, value converted to the field type)."""
    tp, optional = _unwrap_optional(tp)
    if value is None:
        return optional, None
    origin = typing.get_origin(tp)
    if tp is Any:
        return True, value
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value == value, float(value)  # NaN (YAML `.nan`) is no setting of any key
        return False, value
    if tp is str:
        # YAML turns `name: 123` into an int; a string field takes scalars as text.
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return True, str(value)
        return False, value
    if origin is list:
        if not isinstance(value, list):
            return False, value
        (inner,) = typing.get_args(tp) or (Any,)
        converted = []
        for item in value:
            ok, item = _check_value(item, inner)
            if not ok:
                return False, value
            converted.append(item)
        return True, converted
    if origin is dict:
        return isinstance(value, dict), value
    return True, value


def _suggest(name: str, candidates: list[str]) -> str | None:
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return close[0] if close else None


def _where(dotted: str, sources: dict[str, str]) -> str:
    src = sources.get(dotted)
    if src is None:
        # A section-level problem: report the first source that set anything under it.
        src = next((s for k, s in sources.items() if k.startswith(dotted + ".")), None)
    if not src:
        return ""
    return f" (set {src})" if src.startswith("on ") else f" (set in {src})"


def validate(raw: dict[str, Any], cls: type, sources: dict[str, str], prefix: str = "") -> tuple[dict[str, Any], list[str]]:
    """Return (clean mapping, problems). Unknown keys get the closest valid key as a suggestion."""
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    clean: dict[str, Any] = {}
    problems: list[str] = []
    every_key = all_keys(cls) if not prefix else None
    for name, value in raw.items():
        dotted = f"{prefix}{name}"
        if name not in fields:
            guess = _suggest(name, list(fields))
            if guess is None and every_key is not None:
                # `lr=1e-4` at the top level: look for a leaf of that name anywhere.
                leaves = [k for k in every_key if k.rsplit(".", 1)[-1] == name]
                guess = leaves[0] if leaves else _suggest(name, every_key)
            elif guess is not None:
                guess = f"{prefix}{guess}"
            hint = f"; did you mean `{guess}`?" if guess else f"; valid keys here: {', '.join(fields)}"
            problems.append(f"unknown key `{dotted}`{_where(dotted, sources)}{hint}")
            continue
        tp = hints[name]
        if _is_dataclass_type(tp):
            if not isinstance(value, dict):
                problems.append(f"`{dotted}`{_where(dotted, sources)}: expected a section (mapping), got {_show(value)}")
                continue
            clean[name], sub = validate(value, tp, sources, dotted + ".")
            problems += sub
            continue
        ok, converted = _check_value(value, tp)
        if isinstance(value, float) and value != value:  # YAML `.nan`: passes no check, means no setting
            problems.append(f"`{dotted}`{_where(dotted, sources)}: got nan; expected a finite number "
                            f"({_describe(tp)}); fix: set {dotted} to a number, or drop it for the default")
            continue
        if not ok:
            problems.append(f"`{dotted}`{_where(dotted, sources)}: expected {_describe(tp)}, got {_show(value)}")
            continue
        choices = choices_of(fields[name])
        if choices and converted not in choices:
            guess = _suggest(str(converted), list(choices))
            hint = f"; did you mean `{guess}`?" if guess else ""
            problems.append(
                f"`{dotted}`{_where(dotted, sources)}: expected one of {', '.join(choices)}; got {_show(converted)}{hint}"
            )
            continue
        constraint = constraint_of(fields[name])
        if constraint is not None and not constraint.allows(converted):
            what = "every item " if isinstance(converted, list) else ""
            f = fields[name]
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            is_default = default not in (None, [], dataclasses.MISSING)
            example = default if is_default else [constraint.example()] if what else constraint.example()
            problems.append(f"`{dotted}`{_where(dotted, sources)}: expected {what}{constraint.describe()}, got "
                            f"{_show(converted)}; fix: set {'every item of ' if what else ''}{dotted} to a value {constraint.describe()}, e.g. "
                            f"{dotted}={example}{' (the default)' if is_default else ''}")
            continue
        clean[name] = converted
    return clean, problems

