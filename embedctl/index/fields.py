"""The fields of an index: metadata beyond id, title and text, one typed column per field, per segment.

Each segment that has any keeps them in ``fields.parquet`` beside its ``docs.parquet`` (same rows, same
order), written by the same writer in the same change (build, add, compact, re-cluster) and listed in the
commit like every other segment file, so a version's vectors, documents and fields always agree.

Types (:data:`TYPES`): ``int`` (int64), ``float`` (float64), ``string``, ``bool``; a column's type is
inferred from every value of the segment: integers and floats together are ``float``; any other mixture
is ``string`` (each value's text). A missing value is null (``exists(field)`` is false).

Example::

    rows = [{"year": 2015}, {"year": 2016, "journal": "Cell"}]
    write_fields(path, rows)            # year int64, journal string (null in row 0)
    FieldStore(path).types()            # {"journal": "string", "year": "int"}
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embedctl.util import atomic

TYPES = ("int", "float", "string", "bool")
_ARROW = {"int": "int64", "float": "float64", "string": "string", "bool": "bool_"}


def value_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "string"


def column_type(values: Sequence[Any]) -> str:
    """The type of a column holding ``values`` (None: null): see the module docstring."""
    seen = {value_type(v) for v in values if v is not None}
    if not seen:
        return "string"
    if len(seen) == 1:
        return seen.pop()
    return "float" if seen <= {"int", "float"} else "string"


def _cast(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "float":
        return float(value)
    if kind == "string" and not isinstance(value, str):
        return str(value).lower() if isinstance(value, bool) else str(value)
    return value


def fields_table(rows: Sequence[dict[str, Any] | None]):
    """A pyarrow table of one typed column per field name (sorted) over ``rows`` (None or {} = no fields)."""
    import pyarrow as pa

    names = sorted({name for row in rows if row for name in row})
    columns, schema = {}, []
    for name in names:
        values = [(row or {}).get(name) for row in rows]
        kind = column_type(values)
        columns[name] = [_cast(v, kind) for v in values]
        schema.append(pa.field(name, getattr(pa, _ARROW[kind])()))
    return pa.table(columns, schema=pa.schema(schema))


def write_fields(path: Path, rows: Sequence[dict[str, Any] | None]) -> bool:
    """Write ``fields.parquet`` (temp name + rename) when any row has a field; returns whether it did."""
    if not any(rows):
        return False
    import pyarrow.parquet as pq

    table = fields_table(rows)
    with atomic.atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return True


def arrow_type_name(arrow_type: Any) -> str:
    """The field type (:data:`TYPES`) of a stored column's arrow type."""
    import pyarrow as pa

    if pa.types.is_boolean(arrow_type):
        return "bool"
    if pa.types.is_integer(arrow_type):
        return "int"
    if pa.types.is_floating(arrow_type):
        return "float"
    return "string"


def segment_fields(gen: Any, seg: Any) -> FieldStore:
    """The fields of one segment of a generation (embedctl.index.generations)."""
    return FieldStore(gen.path(seg.fields) if seg.fields else None, seg.rows)


class FieldStore:
    """One segment's fields, read on first use (the whole table: metadata columns are small)."""

    def __init__(self, path: Path | None, rows: int):
        self.path, self.rows = path, rows
        self._table = None

    @property
    def table(self):
        import pyarrow as pa

        if self._table is None:
            if self.path is None:
                self._table = pa.table({})
            else:
                import pyarrow.parquet as pq

                self._table = pq.read_table(self.path, memory_map=True)
        return self._table

    def types(self) -> dict[str, str]:
        if self.path is None:
            return {}
        import pyarrow.parquet as pq

        schema = pq.read_schema(self.path)
        return {f.name: arrow_type_name(f.type) for f in schema}

    def rows_of(self, local) -> list[dict[str, Any]]:
        """The non-null fields of the given local rows, in their order."""
        if self.path is None:
            return [{} for _ in local]
        import pyarrow as pa

        part = self.table.take(pa.array(list(map(int, local)), type=pa.int64())).to_pylist()
        return [{k: v for k, v in row.items() if v is not None} for row in part]

    def all_rows(self) -> list[dict[str, Any]]:
        if self.path is None:
            return [{} for _ in range(self.rows)]
        return [{k: v for k, v in row.items() if v is not None} for row in self.table.to_pylist()]
