"""Evaluate a filter tree (embedctl.search.filters) over a generation's fields: one boolean per row.

Vectorised with pyarrow.compute over each segment's typed columns (embedctl.index.fields), then joined
in pid order; a null (a document without the field) never matches a comparison or ``in`` (``not`` of
one does), and ``exists`` tells them apart. Tombstoned rows are never allowed.

Types are checked first, against every segment's column types: a number against an ``int``/``float``
field, a string against a ``string`` field, a boolean against a ``bool`` field; ``<``/``>`` on a bool
is refused. A field stored with different types in different segments compares as each segment holds it
(numbers with numbers); a literal that fits none of them is refused.

Example::

    mask = FieldFilter(gen).mask(parse("year >= 2015"))     # bool [gen.rows]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embedctl.index.fields import segment_fields
from embedctl.index.generations import Generation
from embedctl.search.filters import And, Compare, Exists, FilterError, In, Node, Not, Or, fields_of
from embedctl.search.filters import Literal as Value

_ARROW_OP = {"=": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal", ">": "greater",
             ">=": "greater_equal"}


def literal_type(value: Value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "string"


def _fits(literal: str, field_type: str) -> bool:
    return literal == ("number" if field_type in ("int", "float") else field_type)


class FieldFilter:
    """The fields of one generation, ready to evaluate filters (columns read on first use)."""

    def __init__(self, gen: Generation):
        self.gen = gen
        self.stores = [segment_fields(gen, s) for s in gen.segments]
        self._types: dict[str, set[str]] | None = None
        self._live: np.ndarray | None = None
        self._offsets = np.cumsum([0] + [s.rows for s in gen.segments]).astype(np.int64)
        self._any_fields = any(store.path is not None for store in self.stores)

    def types(self) -> dict[str, set[str]]:
        """Field name -> the types its segments store it as."""
        if self._types is None:
            out: dict[str, set[str]] = {}
            for store in self.stores:
                for name, kind in store.types().items():
                    out.setdefault(name, set()).add(kind)
            self._types = out
        return self._types

    def rows_of(self, pids: np.ndarray) -> list[dict[str, Any]]:
        """The non-null fields of each pid (over the generation's segments), in the pids' order."""
        if not self._any_fields:  # documents indexed without fields: the common case, kept cheap
            return [{} for _ in range(len(pids))]
        pids = np.asarray(pids, dtype=np.int64)
        offsets = self._offsets
        seg = np.searchsorted(offsets, pids, side="right") - 1
        out: list[dict[str, Any]] = [{} for _ in pids]
        for s in sorted(set(seg.tolist())):
            where = np.flatnonzero(seg == s)
            for j, row in zip(where, self.stores[s].rows_of(pids[where] - offsets[s]), strict=True):
                out[int(j)] = row
        return out

    def live(self) -> np.ndarray:
        if self._live is None:
            self._live = (np.concatenate([self.gen.live_mask(s) for s in self.gen.segments])
                          if self.gen.segments else np.zeros(0, bool))
        return self._live

    def check(self, node: Node) -> None:
        """Refuse unknown fields (naming the known ones) and values of the wrong type, before any work."""
        types = self.types()
        unknown = sorted(fields_of(node) - set(types))
        if unknown:
            known = ", ".join(sorted(types)) if types else "none: its documents were indexed without fields"
            raise FilterError(f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
                              f"this index's fields are: {known}",
                              hint="filter on one of those (a nested JSON key is `parent.child`)")
        self._check_types(node, types)

    def _check_types(self, node: Node, types: dict[str, set[str]]) -> None:
        if isinstance(node, (And, Or)):
            for item in node.items:
                self._check_types(item, types)
        elif isinstance(node, Not):
            self._check_types(node.item, types)
        elif isinstance(node, (Compare, In)):
            values = [node.value] if isinstance(node, Compare) else list(node.values)
            stored = types[node.field]
            for value in values:
                kind = literal_type(value)
                if not any(_fits(kind, t) for t in stored):
                    raise FilterError(f"field {node.field!r} holds {' / '.join(sorted(stored))} values, "
                                      f"compared with the {kind} {value!r}",
                                      hint=_type_hint(stored))
            if isinstance(node, Compare) and node.op not in ("=", "!=") and stored == {"bool"}:
                raise FilterError(f"field {node.field!r} is a bool: compare it with = or !=, not {node.op}")

    def mask(self, node: Node) -> np.ndarray:
        """bool [gen.rows]: the live rows the filter allows, in pid order."""
        self.check(node)
        parts = [self._segment_mask(store, node) for store in self.stores]
        out = np.concatenate(parts) if parts else np.zeros(0, bool)
        return out & self.live()

    def _segment_mask(self, store: Any, node: Node) -> np.ndarray:
        import pyarrow.compute as pc

        result = _evaluate(store, node)
        if isinstance(result, bool):
            return np.full(store.rows, result)
        return np.asarray(pc.fill_null(result, False).to_numpy(zero_copy_only=False), dtype=bool)


def _type_hint(stored: set[str]) -> str:
    if stored <= {"int", "float"}:
        return "compare it with a number, e.g. year >= 2015 (no quotes)"
    if stored == {"bool"}:
        return "compare it with true or false"
    return "compare it with a quoted string, e.g. journal = \"Cell\""


def _evaluate(store: Any, node: Node) -> Any:
    """A pyarrow boolean array (nulls where a field is missing) or a constant bool (a field the segment lacks)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(node, And) or isinstance(node, Or):
        parts = [_evaluate(store, i) for i in node.items]
        return _combine(parts, "and" if isinstance(node, And) else "or", store.rows)
    if isinstance(node, Not):
        inner = _evaluate(store, node.item)
        return (not inner) if isinstance(inner, bool) else pc.invert(pc.fill_null(inner, False))
    table = store.table
    if node.field not in table.column_names:
        return False  # the segment has no such column: every row lacks it
    column = table.column(node.field)
    if isinstance(node, Exists):
        return pc.is_valid(column)
    kind = _column_kind(column.type)
    if isinstance(node, Compare):
        if not _fits(literal_type(node.value), kind):
            return False  # a segment storing the field as another type: no row of it matches
        return getattr(pc, _ARROW_OP[node.op])(column, pa.scalar(_as(node.value, kind)))
    values = [_as(v, kind) for v in node.values if _fits(literal_type(v), kind)]
    if kind == "int" and any(isinstance(v, float) for v in values):  # 2015.5 in an int column: compare as floats
        column, values = column.cast(pa.float64()), [float(v) for v in values]
    if not values:
        hit: Any = pc.and_(pc.is_valid(column), pa.scalar(False))
    else:
        hit = pc.is_in(column, value_set=pa.array(values, type=column.type))
        hit = pc.if_else(pc.is_valid(column), hit, pa.scalar(None, pa.bool_()))
    return pc.invert(hit) if node.negated else hit


def _combine(parts: list[Any], how: str, rows: int) -> Any:
    import pyarrow.compute as pc

    arrays = [p for p in parts if not isinstance(p, bool)]
    constants = [p for p in parts if isinstance(p, bool)]
    if how == "and" and constants and not all(constants):
        return False
    if how == "or" and any(constants):
        return True
    if not arrays:
        return how == "and"
    out = pc.fill_null(arrays[0], False)
    for a in arrays[1:]:
        out = (pc.and_ if how == "and" else pc.or_)(out, pc.fill_null(a, False))
    return out


def _column_kind(arrow_type: Any) -> str:
    from embedctl.index.fields import arrow_type_name

    return arrow_type_name(arrow_type)


def _as(value: Value, kind: str) -> Any:
    return float(value) if kind == "float" else value
