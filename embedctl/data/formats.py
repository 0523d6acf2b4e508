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

from embedctl.util.fs import is_local_fs, write_file

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


def write_json_file(fs, path: str, obj: Any) -> None:
    write_file(fs, path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def read_json_file(fs, path: str) -> Any:
    with fs.open(path, "rb") as fh:
        return json.loads(fh.read().decode("utf-8"))


def read_parquet(fs, path: str, columns: list[str] | None = None):
    import pyarrow.parquet as pq

    if is_local_fs(fs):
        return pq.read_table(path, columns=columns)
    with fs.open(path, "rb") as fh:
        return pq.read_table(fh, columns=columns)


def join(base: str, *parts: str) -> str:
    """Join path parts with ``/`` (fsspec paths and URLs)."""
    out = base.rstrip("/")
    for p in parts:
        out = f"{out}/{p.strip('/')}"
    return out
