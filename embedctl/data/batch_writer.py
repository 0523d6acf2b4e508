"""Write one batch folder of the pre-batched format with fixed parquet settings.

Example::

    write_batch(fs, "out/batch_00000000", batch, token_dtype="uint16")
"""

from __future__ import annotations

import numpy as np

from embedctl.data.batches import Batch
from embedctl.data.formats import join, parquet_bytes, token_list_array
from embedctl.util.fs import write_file


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
    """Write ``folder/{queries,documents,relations}.parquet``; returns counts for metadata.json."""
    q, d, r = batch_tables(batch, token_dtype)
    for name, table in (("queries", q), ("documents", d), ("relations", r)):
        write_file(fs, join(folder, f"{name}.parquet"), parquet_bytes(table))
    return {"queries": q.num_rows, "documents": d.num_rows, "relations": r.num_rows,
            "positives": int((batch.relevance > 0).sum()), "negatives": int((batch.relevance < 0).sum())}
