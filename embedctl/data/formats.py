"""On-disk constants and helpers shared by the token cache and the pre-batched format.

Parquet files are written with fixed settings (no timestamps, fixed compression, one row group) so the
same rows always give the same bytes. Local files go to a temporary name and are renamed; on object
stores (s3://, memory://) a PUT is all-or-nothing, so the final key is written directly and the ledger /
metadata.json (written last) is what marks the work complete.

String ids become uint64 through :func:`hash_id` (the first 8 bytes of BLAKE2b, little-endian), stable
across machines and Python versions; collisions are checked where ids are collected.
"""

from __future__ import annotations

import hashlib
import io
import json
from typing import Any

from embedctl.errors import InputError
from embedctl.util.fs import is_local_fs, remote_errors
from embedctl.util.io import check_files

TOKEN_CACHE_FORMAT = "embedctl-token-cache"
TOKEN_CACHE_VERSION = 1
PREBATCH_FORMAT = "embedctl-prebatch"
PREBATCH_VERSION = 1
UINT16_VOCAB_LIMIT = 65535  # ids 0..65534 fit in uint16 with room to spare; bigger vocabularies use uint32

PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "compression_level": 3,
    "use_dictionary": False,
    "write_statistics": False,
    "version": "2.6",
}


def token_dtype_name(vocab_size: int) -> str:
    """``"uint16"`` when every id fits (vocab <= 65,535), else ``"uint32"``."""
    return "uint16" if vocab_size <= UINT16_VOCAB_LIMIT else "uint32"


def hash_id(text_id: str) -> int:
    """Stable 64-bit id for a string id, e.g. ``hash_id("4983")`` -> an int in [0, 2**64)."""
    return int.from_bytes(hashlib.blake2b(text_id.encode("utf-8"), digest_size=8).digest(), "little")


def token_list_array(lists, dtype: str):
    """Build a ``large_list<dtype>`` arrow array from a list of int lists (or 1-D numpy arrays)."""
    import numpy as np
    import pyarrow as pa

    lengths = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if lists and isinstance(lists[0], np.ndarray):
        values = np.concatenate(lists).astype(dtype, copy=False) if len(lists) else np.zeros(0, dtype)
    else:
        import itertools

        values = np.fromiter(itertools.chain.from_iterable(lists), dtype=dtype, count=int(offsets[-1]))
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))


def token_lists_of(column) -> list:
    """A ``large_list<uint16|uint32>`` column -> list of 1-D numpy arrays (views, no copies)."""
    import pyarrow as pa

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = arr.offsets.to_numpy()
    values = arr.values.to_numpy(zero_copy_only=False)
    return [values[offsets[i]: offsets[i + 1]] for i in range(len(arr))]


def parquet_bytes(table) -> bytes:
    """Serialise ``table`` with :data:`PARQUET_OPTIONS` into one row group (deterministic bytes)."""
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=max(1, table.num_rows), **PARQUET_OPTIONS)
    return buf.getvalue()


def read_json_file(fs, path: str) -> Any:
    with fs.open(path, "rb") as fh:
        return json.loads(fh.read().decode("utf-8"))


DAMAGED_HINT = ("rerun the command that wrote it (the same `embedctl pretokenize` rebuilds missing or damaged "
                "chunks; `embedctl prebatch --overwrite` rewrites batches); `embedctl data inspect --verify` checks every file")


def read_parquet(fs, path: str, columns: list[str] | None = None, hint: str = DAMAGED_HINT):
    """Read a parquet file; a missing or unreadable one raises InputError naming it (never a raw
    FileNotFoundError or ArrowInvalid)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if is_local_fs(fs):
            return pq.read_table(path, columns=columns)
        with remote_errors(path), fs.open(path, "rb") as fh:
            return pq.read_table(fh, columns=columns)
    except FileNotFoundError as exc:
        raise InputError("missing file", path=path, hint=hint) from exc
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"not a readable parquet file ({exc})", path=path, hint=hint) from exc


def read_checked_parquet(fs, path: str, record: dict[str, Any], columns: list[str] | None = None,
                         hint: str = DAMAGED_HINT):
    """:func:`read_parquet` of a file whose ``{"bytes", "sha256"}`` record is known: its bytes are read once,
    compared with the record (size, then sha256), and parsed from memory, so what is parsed is what was
    checked. A record without sha256 (older ledgers) reads the file unchecked."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not record.get("sha256"):
        return read_parquet(fs, path, columns, hint=hint)
    try:
        with remote_errors(path), fs.open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError as exc:
        raise InputError("missing file", path=path, hint=hint) from exc
    if record.get("bytes") is not None and len(data) != int(record["bytes"]):
        raise InputError(f"{len(data)} bytes, recorded {record['bytes']} (damaged or replaced)",
                         path=path, hint=hint)
    if hashlib.sha256(data).hexdigest() != record["sha256"]:
        raise InputError("content differs from the recorded sha256 (damaged or replaced)",
                         path=path, hint=hint)
    try:
        return pq.read_table(pa.BufferReader(data), columns=columns)
    except pa.ArrowException as exc:
        raise InputError(f"not a readable parquet file ({exc})", path=path, hint=hint) from exc


def bytes_record(data: bytes) -> dict[str, Any]:
    """The ``embedctl.util.io.file_record`` of a file whose bytes are ``data`` (``{"bytes", "sha256"}``),
    taken from memory while writing it, so the file is not read back."""
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def batch_files(entries: list[dict]) -> dict[str, dict]:
    """Every file metadata.json's batch entries record, relative to the folder (older metadata: presence only)."""
    out: dict[str, dict] = {}
    for e in entries:
        recorded = e.get("files") or {}
        for name in ("queries.parquet", "documents.parquet", "relations.parquet"):
            out[f"{e['name']}/{name}"] = recorded.get(name, {})
    return out


def check_records(fs, folder: str, records: dict[str, dict[str, Any]], full: bool = False) -> list[str]:
    """``embedctl.util.io.check_files`` for any filesystem: problems with the files ``records`` lists
    (missing, another size, with ``full`` another sha256). Sizes come from one listing (cheap on object
    stores); a record without ``bytes`` (older ledgers) is checked for presence only."""
    if is_local_fs(fs):
        sized = {k: v for k, v in records.items() if v.get("bytes") is not None}
        problems = check_files(folder, sized, full=full)
        import os

        return problems + [f"{join(folder, k)}: missing" for k in sorted(set(records) - set(sized))
                           if not os.path.isfile(join(folder, k))]
    with remote_errors(folder):
        listing = {p.rstrip("/"): info.get("size") for p, info in fs.find(folder, detail=True).items()}
    problems = []
    for name, want in sorted(records.items()):
        path = join(folder, name)
        size = listing.get(path, listing.get(fs._strip_protocol(path)))
        if size is None:
            problems.append(f"{path}: missing")
        elif want.get("bytes") is not None and size != want["bytes"]:
            problems.append(f"{path}: {size} bytes, recorded {want['bytes']}")
        elif full and want.get("sha256") and hashlib.sha256(fs.cat_file(path)).hexdigest() != want["sha256"]:
            problems.append(f"{path}: content differs from the recorded sha256 (damaged or replaced)")
    return problems


def join(base: str, *parts: str) -> str:
    """Join path parts with ``/`` (fsspec paths and URLs)."""
    out = base.rstrip("/")
    for p in parts:
        out = f"{out}/{p.strip('/')}"
    return out
