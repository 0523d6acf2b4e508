"""One query split across threads (search.query_threads; OpenMP in the native kernels): every kernel and a
whole search give the same bits on 1, 2 and 3 threads, on synthetic indexes of one chunk and of several,
with and without a filter."""

from __future__ import annotations

import numpy as np
import pytest
from support.synthetic import SyntheticEncoder

from embedctl.config.sections.index import IndexConfig, SearchConfig
from embedctl.index.build import build_plaid_index
from embedctl.index.plaid import native_backend, reference, search_kernels
from embedctl.search import warp
from embedctl.search.plaid import PlaidSearcher
from embedctl.search.retrievers import PlaidRetriever
from embedctl.search.warp import WarpScratch

DOCS = [f"passage {i}" for i in range(500)]
THREADS = (2, 3)
pytestmark = pytest.mark.skipif(not native_backend.available(), reason="the C kernels were not built")


@pytest.fixture(scope="module")
def indexes(module_tmp):
    enc = SyntheticEncoder(dim=64, num_topics=96, mean_len=40)
    one = module_tmp("threads") / "one"
    build_plaid_index(enc, DOCS, one, IndexConfig(nbits=2), progress=False)  # one chunk: MaxSim in place
    many = module_tmp("threads") / "many"
    build_plaid_index(enc, DOCS, many, IndexConfig(nbits=2, chunk_size=150), progress=False)  # 4 chunks
    return enc, one, many


def queries(enc, n=8):
    return [enc.query_for(DOCS[(i * 41) % len(DOCS)], seed=i) for i in range(n)]


def test_the_library_says_whether_it_has_openmp():
    assert isinstance(search_kernels.openmp(), bool)  # False: thread counts accepted and run on one thread


@pytest.mark.parametrize("num_c,lq", [(8192, 32), (37, 7), (5, 40)])
def test_centroid_scores_are_the_same_bits_on_any_thread_count(num_c, lq):
    rng = np.random.default_rng(num_c)
    cents = rng.normal(size=(num_c, 128)).astype(np.float32)
    Q = rng.normal(size=(lq, 128)).astype(np.float32)
    want = search_kernels.centroid_scores(cents, Q)
    for t in THREADS:
        for plain in (False, True):
            np.testing.assert_array_equal(search_kernels.centroid_scores(cents, Q, plain=plain, threads=t), want)


@pytest.mark.parametrize("num_c,lq", [(8192, 32), (37, 7), (24, 33), (5, 40), (16, 1)])
def test_centroid_scores_block_maxima_are_each_blocks_maximum(num_c, lq):
    """With block_max the fused multiply-add kernel writes the same scores and each block of 16 rows' maximum per
    token, NaN passed over (-inf where a block holds only NaN), on both versions and any thread count: what
    col_top_blocks selects from (ragged last blocks, more than 32 tokens, whole tiles straddling a block)."""
    rng = np.random.default_rng(num_c + lq)
    cents = rng.normal(size=(num_c, 128)).astype(np.float32)
    cents[rng.integers(0, num_c, 2)] = np.nan  # NaN rows: passed over
    Q = rng.normal(size=(lq, 128)).astype(np.float32)
    want = search_kernels.centroid_scores(cents, Q)
    padded = np.full((-(-num_c // 16) * 16, lq), -np.inf, np.float32)
    padded[:num_c] = np.where(np.isnan(want), -np.inf, want)
    want_max = padded.reshape(-1, 16, lq).max(axis=1)
    for t in (1, *THREADS):
        for plain in (False, True):
            block_max = np.full(want_max.shape, np.nan, np.float32)
            got = search_kernels.centroid_scores(cents, Q, plain=plain, threads=t, block_max=block_max)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(block_max, want_max)
    with pytest.raises(ValueError, match="block_max must be"):
        search_kernels.centroid_scores(cents, Q, block_max=np.zeros((num_c // 16 + 2, lq), np.float32))


@pytest.mark.parametrize("rows,cols,m", [(8192, 32, 33), (500, 7, 9), (1000, 40, 17), (300, 70, 5)])
def test_col_top_is_the_same_on_any_thread_count(rows, cols, m):
    rng = np.random.default_rng(rows + cols)
    st_t = rng.normal(size=(rows, cols)).astype(np.float32)
    st_t[rng.integers(0, rows, 6)] = 0.25  # exact ties across rows
    want = search_kernels.col_top(st_t, m)
    for t in THREADS:
        for plain in (False, True):
            np.testing.assert_array_equal(search_kernels.col_top(st_t, m, plain=plain, threads=t), want)
    with pytest.raises(ValueError, match="threads"):
        search_kernels.col_top(st_t, m, threads=0)


def _warp_inputs(s, Q, k=10):
    Q = s.as_query(Q)
    ST = s.centroid_scores(Q)
    ordered = s.backend.row_top(ST, warp.cells_to_select(k, None, s.num_partitions))
    cells, miss = reference.warp_probes(ST, ordered, s.warp.cell_sizes,
                                        *warp.probe_limits(ordered.shape[1], s.warp, k, None))
    nib = native_backend._nibble_tables(s.tables["table"], Q)
    scores = np.ascontiguousarray(np.take_along_axis(ST, ordered, axis=1))
    return nib, ordered, scores, cells, miss, s.warp.cell_offsets, s.warp.blocks


@pytest.mark.parametrize("plain", [False, True])
def test_warp_estimates_are_the_same_bits_on_any_thread_count(indexes, plain):
    """The scans split across threads, the folds in token order on the caller: the same pids in the same order,
    the same estimates; the pair buffers grown to every token's pairs; the scratch left clean."""
    enc, _, many = indexes
    s = PlaidSearcher(many, backend="native", precision="fp32")
    for Q in queries(enc):
        args = _warp_inputs(s, Q)
        want = search_kernels.warp_scores(*args, WarpScratch.for_docs(s.num_docs), plain=plain)
        for t in THREADS:
            scratch = WarpScratch.for_docs(s.num_docs, capacity=16)
            got = search_kernels.warp_scores(*args, scratch, plain=plain, threads=t)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
            assert np.all(scratch.best == -np.inf) and np.all(scratch.total == 0)


def test_warp_refuses_bad_document_ids_on_threads_too(indexes):
    """A document id outside the scratch, met by a scan on a helper thread: refused as on one thread, the
    scratch left clean."""
    enc, _, many = indexes
    s = PlaidSearcher(many, backend="native", precision="fp32")
    args = _warp_inputs(s, queries(enc, 1)[0])
    for t in (1, *THREADS):
        small = WarpScratch.for_docs(s.num_docs // 2)
        with pytest.raises(ValueError, match="document ids"):
            search_kernels.warp_scores(*args, small, threads=t)
        assert np.all(small.best == -np.inf) and np.all(small.total == 0)


def test_maxsim_in_place_is_the_same_bits_on_any_thread_count(indexes):
    enc, one, _ = indexes
    s = PlaidSearcher(one, backend="native", precision="fp32")
    assert len(s.codes) == 1
    pids = np.arange(0, s.num_docs, 3)
    for Q in queries(enc, 3):
        Q = s.as_query(Q)
        ST = s.centroid_scores(Q)
        want = s.backend.maxsim_docs(s.tables, Q, ST, s.codes[0], s.residuals[0], s.norms[0], s.doc_offsets, pids)
        for t in THREADS:
            got = s.backend.maxsim_docs(s.tables, Q, ST, s.codes[0], s.residuals[0], s.norms[0], s.doc_offsets, pids,
                                        threads=t)
            np.testing.assert_array_equal(got, want)


def test_maxsim_of_gathered_rows_is_the_same_bits_on_any_thread_count(indexes):
    """An index of several chunks: the documents' rows gathered, then MaxSim split by document."""
    enc, _, many = indexes
    s = PlaidSearcher(many, backend="native", precision="fp32")
    assert len(s.codes) > 1
    pids = np.arange(1, s.num_docs, 2)
    for Q in queries(enc, 3):
        Q = s.as_query(Q)
        ST = s.centroid_scores(Q)
        s._scratch.threads = 1
        want = s._maxsim(Q, pids, ST)
        for t in THREADS:
            s._scratch.threads = t
            np.testing.assert_array_equal(s._maxsim(Q, pids, ST), want)


@pytest.mark.parametrize("which", ["one", "many"])
def test_a_search_is_the_same_on_any_thread_count(indexes, which):
    """Whole searches (warp and PLAID candidates, k = 10 and 100, a filter): the same pids and scores."""
    enc, one, many = indexes
    s = PlaidSearcher(one if which == "one" else many, backend="native", precision="fp32")
    allowed = np.arange(s.num_docs) % 3 != 0
    for Q in queries(enc, 4):
        for kw in ({"k": 10}, {"k": 100}, {"k": 10, "candidates": "plaid"}, {"k": 10, "allowed": allowed}):
            want = s.search(Q, threads=1, **kw)
            for t in THREADS:
                got = s.search(Q, threads=t, **kw)
                np.testing.assert_array_equal(got[0], want[0])
                np.testing.assert_array_equal(got[1], want[1])


def test_search_query_threads_reaches_the_searcher(indexes):
    """search.query_threads sets the threads of one query's search; a batch searched side by side keeps one
    thread per query; the answers are those of one thread."""
    enc, one, _ = indexes
    gen = PlaidSearcher(one, backend="native").generation
    alone = PlaidRetriever(gen, SearchConfig(threads=1, query_threads=1, backend="native", precision="fp32"))
    split = PlaidRetriever(gen, SearchConfig(threads=2, query_threads=2, backend="native", precision="fp32"))
    assert split.searcher.query_threads == 2 and alone.searcher.query_threads == 1
    # null: search.threads when set (a server's workers set it per worker), else one per core
    assert PlaidRetriever.query_threads(SearchConfig(threads=3)) == 3
    assert PlaidRetriever.query_threads(SearchConfig(threads=3, query_threads=1)) == 1
    assert PlaidRetriever.query_threads(SearchConfig()) == PlaidRetriever(gen, SearchConfig()).workers() >= 1
    Q = np.stack([np.asarray(q, np.float32) for q in queries(enc, 4)])
    seen = []
    original = split.search_one
    split.search_one = lambda *a, **kw: seen.append(kw.get("threads")) or original(*a, **kw)
    try:
        batch = split.search(Q, 10)  # two workers: each query on one thread
        single = split.search(Q[:1], 10)  # one query: split across query_threads
    finally:
        split.search_one = original
    assert seen == [1, 1, 1, 1, None]
    want = alone.search(Q, 10)
    for got, ref in zip(batch + single, want + want[:1], strict=True):
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])
