"""Read side of the pre-batched format: read_batch, split_batch (property test), BatchStream resume."""

from __future__ import annotations

import json

import fsspec
import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embedctl.data.batch_writer import write_batch
from embedctl.data.batches import Batch, BatchStream, read_batch, split_batch
from embedctl.data.formats import PREBATCH_FORMAT
from embedctl.errors import EmbedctlError, InputError


def _batch(rng, nq=4, nd=7) -> Batch:
    rel = rng.choice(np.array([-1, 0, 0, 1, 2], dtype=np.int8), size=(nq, nd))
    for i in range(nq):
        rel[i, rng.integers(nd)] = 1
    toks = lambda n: [rng.integers(0, 30000, size=rng.integers(1, 9)).astype(np.uint16) for _ in range(n)]  # noqa: E731
    return Batch(rng.choice(2**60, nq, replace=False).astype(np.uint64), toks(nq),
                 rng.choice(2**60, nd, replace=False).astype(np.uint64), toks(nd), rel)


def _write_folder(root, batches) -> None:
    fs, path = fsspec.core.url_to_fs(str(root))
    meta = {"format": PREBATCH_FORMAT, "format_version": 1, "batches": []}
    for i, b in enumerate(batches):
        name = f"batch_{i:08d}"
        meta["batches"].append({"name": name, **write_batch(fs, f"{path}/{name}", b)})
    with fs.open(f"{path}/metadata.json", "w") as fh:
        json.dump(meta, fh)


def _same(a: Batch, b: Batch) -> bool:
    return (np.array_equal(a.query_ids, b.query_ids) and np.array_equal(a.document_ids, b.document_ids)
            and np.array_equal(a.relevance, b.relevance)
            and all(np.array_equal(x, y) for x, y in zip(a.query_tokens, b.query_tokens, strict=False))
            and all(np.array_equal(x, y) for x, y in zip(a.document_tokens, b.document_tokens, strict=False)))


def test_write_read_roundtrip_and_schema(tmp_path):
    b = _batch(np.random.default_rng(0))
    _write_folder(tmp_path, [b])
    got = read_batch(str(tmp_path / "batch_00000000"))
    assert _same(b, got)
    schemas = {n: pq.read_schema(tmp_path / "batch_00000000" / f"{n}.parquet") for n in ("queries", "documents", "relations")}
    assert str(schemas["queries"].field("BATCH_QUERY_ID").type) == "uint64"
    assert str(schemas["queries"].field("QUERY_TOKEN_ID_LIST").type) == "large_list<element: uint16>"
    assert str(schemas["documents"].field("DOCUMENT_TOKEN_ID_LIST").type) == "large_list<element: uint16>"
    assert [str(f.type) for f in schemas["relations"]] == ["uint64", "uint64", "int8"]
    assert schemas["relations"].names == ["BATCH_QUERY_ID", "BATCH_DOCUMENT_ID", "RELEVANCE"]


def test_read_batch_rejects_duplicates_and_unknown_ids(tmp_path):
    b = _batch(np.random.default_rng(1))
    b.document_ids[1] = b.document_ids[0]
    _write_folder(tmp_path / "dup", [b])
    with pytest.raises(InputError, match="duplicate"):
        read_batch(str(tmp_path / "dup" / "batch_00000000"))
    with pytest.raises(InputError, match="missing"):
        read_batch(str(tmp_path / "nothing"))


def test_read_batch_from_memory_url():
    b = _batch(np.random.default_rng(2))
    _write_folder("memory://pb", [b])
    assert _same(b, read_batch("memory://pb/batch_00000000"))


@st.composite
def grouped_batches(draw):
    """Batches laid out like prebatch writes them: each query's documents right after the previous ones,
    some documents shared by several queries, labels -1/1/2."""
    nq = draw(st.integers(1, 9))
    rows, doc_count = [], 0
    for _ in range(nq):
        own = draw(st.integers(1, 4))
        shared = draw(st.lists(st.integers(0, max(doc_count - 1, 0)), max_size=2)) if doc_count else []
        rows.append((list(range(doc_count, doc_count + own)), shared))
        doc_count += own
    rel = np.zeros((nq, doc_count), dtype=np.int8)
    for i, (own, shared) in enumerate(rows):
        for j, d in enumerate(own):
            rel[i, d] = 1 if j == 0 else draw(st.sampled_from([-1, 1, 2]))
        for d in shared:
            rel[i, d] = draw(st.sampled_from([-1, 1]))
    k = draw(st.integers(1, 5))
    toks = [np.array([i], dtype=np.uint16) for i in range(doc_count)]
    b = Batch(np.arange(nq, dtype=np.uint64), [np.array([i], np.uint16) for i in range(nq)],
              np.arange(100, 100 + doc_count, dtype=np.uint64), toks, rel)
    return b, k


@settings(max_examples=150, deadline=None)
@given(grouped_batches())
def test_split_keeps_every_query_with_all_its_labelled_documents(case):
    batch, k = case
    parts = split_batch(batch, k)
    assert len(parts) == k
    assert np.array_equal(np.concatenate([p.query_ids for p in parts]), batch.query_ids)
    for p in parts:
        assert len(set(p.document_ids.tolist())) == p.num_documents  # no duplicates inside a part
        for qi, q in enumerate(p.query_ids):
            full = batch.relevance[int(q)]
            want = {int(batch.document_ids[d]): int(full[d]) for d in np.flatnonzero(full)}
            got = {int(p.document_ids[d]): int(p.relevance[qi, d]) for d in np.flatnonzero(p.relevance[qi])}
            assert got == want  # every positive and negative of the query travels with it
        # documents keep their stored order
        assert np.all(np.diff(p.document_ids.astype(np.int64)) > 0)
    covered = set(np.concatenate([p.document_ids for p in parts]).tolist())
    assert covered == set(batch.document_ids.tolist())


def test_split_factor_one_is_identity_and_empty_parts():
    b = _batch(np.random.default_rng(3), nq=2)
    assert split_batch(b, 1) == [b]
    parts = split_batch(b, 3)
    assert [p.num_queries for p in parts] == [1, 1, 0] and parts[2].num_documents == 0


def _ids(stream, n):
    return [tuple(b.query_ids.tolist()) for _, b in zip(range(n), stream, strict=False)]


def test_stream_is_seeded_endless_and_resumes_exactly(tmp_path):
    rng = np.random.default_rng(4)
    _write_folder(tmp_path, [_batch(rng, nq=4) for _ in range(5)])
    full = _ids(BatchStream(str(tmp_path), split_factor=2, seed=7), 23)  # > 2 epochs of 10 steps
    assert _ids(BatchStream(str(tmp_path), split_factor=2, seed=7, prefetch=0), 23) == full
    assert _ids(BatchStream(str(tmp_path), split_factor=2, seed=8), 23) != full
    assert full[:10] != full[10:20]  # new order per epoch
    for cut in (0, 1, 7, 10, 13):
        s = BatchStream(str(tmp_path), split_factor=2, seed=7)
        head = _ids(s, cut)
        state = json.loads(json.dumps(s.state_dict()))
        s2 = BatchStream(str(tmp_path), split_factor=2, seed=7)
        s2.load_state_dict(state)
        assert head + _ids(s2, 23 - cut) == full, cut


def test_stream_unshuffled_order_and_state_checks(tmp_path):
    rng = np.random.default_rng(5)
    bs = [_batch(rng, nq=3) for _ in range(3)]
    _write_folder(tmp_path, bs)
    s = BatchStream(str(tmp_path), shuffle=False)
    got = [b.query_ids.tolist() for _, b in zip(range(4), s, strict=False)]
    assert got == [bs[0].query_ids.tolist(), bs[1].query_ids.tolist(), bs[2].query_ids.tolist(), bs[0].query_ids.tolist()]
    with pytest.raises(EmbedctlError, match="split_factor"):
        BatchStream(str(tmp_path), split_factor=2, shuffle=False).load_state_dict(s.state_dict())


def test_stream_needs_complete_folder(tmp_path):
    with pytest.raises(InputError, match="metadata.json"):
        BatchStream(str(tmp_path))


def test_resume_refuses_rebuilt_data(tmp_path):
    rng = np.random.default_rng(6)
    _write_folder(tmp_path / "a", [_batch(rng) for _ in range(2)])
    _write_folder(tmp_path / "b", [_batch(rng) for _ in range(2)])
    s = BatchStream(str(tmp_path / "a"))
    next(iter(s))
    state = s.state_dict()
    meta = json.loads((tmp_path / "b" / "metadata.json").read_text())
    meta["counts"] = {"changed": 1}
    (tmp_path / "b" / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(EmbedctlError, match="data_fingerprint"):
        BatchStream(str(tmp_path / "b")).load_state_dict(state)
    BatchStream(str(tmp_path / "a")).load_state_dict(state)
    legacy = {k: v for k, v in state.items() if k != "data_fingerprint"}
    BatchStream(str(tmp_path / "b")).load_state_dict(legacy)  # states without it still load
