"""Write one batch folder of the pre-batched format with fixed parquet settings.

Example::

    write_batch(fs, "out/batch_00000000", batch, token_dtype="uint16")
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from embedctl.data.batches import Batch
from embedctl.data.formats import (
    batch_files,
    bytes_record,
    check_records,
    join,
    parquet_bytes,
    token_list_array,
)
from embedctl.data.token_cache import open_token_cache
from embedctl.errors import EmbedctlError
from embedctl.util.fs import write_file
from embedctl.util.progress import Progress


def batch_tables(batch: Batch, token_dtype: str = "uint16"):
    """(queries, documents, relations) arrow tables for ``batch`` with the seed's exact schemas.

    Relations hold one row per non-zero entry of ``batch.relevance``, query-major.
    """
    import pyarrow as pa

    queries = pa.table({
        "BATCH_QUERY_ID": pa.array(np.asarray(batch.query_ids, dtype=np.uint64), pa.uint64()),
        "QUERY_TOKEN_ID_LIST": token_list_array(batch.query_tokens, token_dtype),
    })
    documents = pa.table({
        "BATCH_DOCUMENT_ID": pa.array(np.asarray(batch.document_ids, dtype=np.uint64), pa.uint64()),
        "DOCUMENT_TOKEN_ID_LIST": token_list_array(batch.document_tokens, token_dtype),
    })
    scored = batch.teacher_scores
    # with teacher scores every scored pair gets a row (RELEVANCE 0 = unlabelled, as when absent)
    qi, di = np.nonzero(batch.relevance if scored is None else (batch.relevance != 0) | ~np.isnan(scored))
    relations = pa.table({
        "BATCH_QUERY_ID": pa.array(np.asarray(batch.query_ids, dtype=np.uint64)[qi], pa.uint64()),
        "BATCH_DOCUMENT_ID": pa.array(np.asarray(batch.document_ids, dtype=np.uint64)[di], pa.uint64()),
        "RELEVANCE": pa.array(batch.relevance[qi, di].astype(np.int8), pa.int8()),
        **({} if scored is None else {"TEACHER_SCORE": pa.array(scored[qi, di].astype(np.float32), pa.float32())}),
    })
    return queries, documents, relations


def write_batch(fs, folder: str, batch: Batch, token_dtype: str = "uint16") -> dict:
    """Write ``folder/{queries,documents,relations}.parquet``; returns counts and each file's record
    (``files``: name -> ``{"bytes", "sha256"}``, as embedctl.util.io.file_record) for metadata.json."""
    q, d, r = batch_tables(batch, token_dtype)
    files = {}
    for name, table in (("queries", q), ("documents", d), ("relations", r)):
        data = parquet_bytes(table)
        write_file(fs, join(folder, f"{name}.parquet"), data)
        files[f"{name}.parquet"] = bytes_record(data)
    return {"queries": q.num_rows, "documents": d.num_rows, "relations": r.num_rows,
            "positives": int((batch.relevance > 0).sum()), "negatives": int((batch.relevance < 0).sum()), "files": files}


def check_before_commit(fs, root: str, entries: Sequence[dict], caches: Sequence[Any] = ()) -> None:
    """Before metadata.json marks the folder complete: every batch file written is there with its recorded
    size, and the token caches read are unchanged since they were opened (another pretokenize did not
    rewrite them meanwhile). Raises instead of committing a mixed folder."""
    problems = check_records(fs, root, batch_files(entries))
    for cache in caches:
        now = open_token_cache(cache.url, cache.side).ledger
        if now != cache.ledger:
            problems.append(f"{cache.url} ({cache.side}): the token cache changed while the batches were written")
    if problems:
        raise EmbedctlError("not committing the batches: " + "; ".join(problems[:5]),
                            hint="rerun `embedctl prebatch --overwrite` once nothing else writes its input or output")


def with_progress(items: Sequence[Any], label: str, unit: str) -> Iterator[Any]:
    """Yield ``items`` while a Progress bar (embedctl.util.progress) advances after each one."""
    with Progress(len(items), label, unit=unit) as bar:
        for item in items:
            yield item
            bar.advance(1)
