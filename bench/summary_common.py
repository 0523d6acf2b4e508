"""Helpers every bench/summary_*.py module and summarize.py share: a row's type and number formatting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Row = tuple[str, Callable[[dict, Any], Any]]  # (label, figure of (result, that kind's other results))


def dig(obj, *keys):
    """obj[k1][k2]...; None where any step is missing."""
    for key in keys:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def num(x, digits: int = 2, unit: str = "") -> str | None:
    if x is None:
        return None
    if isinstance(x, float) and abs(x) >= 1000:
        return f"{x:,.0f}{unit}"
    return f"{x:,.{digits}f}{unit}" if isinstance(x, float) else f"{x:,}{unit}"


def pair(a, b, digits: int = 2, unit: str = "") -> str | None:
    if a is None and b is None:
        return None
    return f"{num(a, digits) or '-'} / {num(b, digits) or '-'}{unit}"


def pct(x) -> str | None:
    return None if x is None else f"{100 * x:.1f}%"
