"""WARP-style candidate generation (embedctl/search/warp.py, issue 36): the cell-ordered layout, the native
kernels against the reference (estimates, cell selection, centroid scores, the byte table), and searches
against exhaustive MaxSim on small synthetic indexes (several chunks, deletes)."""

from __future__ import annotations

import numpy as np
import pytest
from support.synthetic import SyntheticEncoder

from embedctl.config.sections.index import IndexConfig
from embedctl.errors import EmbedctlError
from embedctl.index.build import build_plaid_index
from embedctl.index.plaid import native_backend, search_kernels
from embedctl.index.plaid.reference import Backend, decode_table, decompress, warp_probes
from embedctl.search.plaid import PlaidSearcher
from embedctl.search.warp import BLOCK, WarpLayout, WarpScratch, probe_limits, warp_pool

DOCS = [f"passage {i}" for i in range(400)]
needs_kernels = pytest.mark.skipif(not native_backend.available(), reason="the C kernels were not built")


@pytest.fixture(scope="module")
def index(module_tmp):
    enc = SyntheticEncoder(dim=64, num_topics=96, mean_len=40)
    out = module_tmp("warp") / "idx"
    build_plaid_index(enc, DOCS, out, IndexConfig(nbits=2, chunk_size=150), progress=False)  # 3 chunks
    return enc, out


def queries(enc, n=12):
    return [enc.query_for(DOCS[(i * 37) % len(DOCS)], seed=i) for i in range(n)]


def test_layout_holds_every_live_vector_once_by_cell(index):
    _, out = index
    s = PlaidSearcher(out, backend="reference")
    lay = s.warp
    assert len(s.codes) == 3 and np.all(lay.cell_offsets % BLOCK == 0)
    codes = np.concatenate([np.asarray(c) for c in s.codes])
    packed = np.concatenate([np.asarray(r) for r in s.residuals])
    norms = np.concatenate([np.asarray(n, np.float32) for n in s.norms])
    pids = np.repeat(np.arange(s.num_docs), s.doclens)
    rows = lay.packed_rows()
    seen = 0
    for c in range(s.num_partitions):
        lo, hi = lay.cell_offsets[c], lay.cell_offsets[c + 1]
        real = lay.pids[lo:hi] >= 0
        assert real.sum() == lay.cell_sizes[c] and np.all(real[:lay.cell_sizes[c]])  # padding only at the end
        want = np.flatnonzero(codes == c)  # index order within the cell
        np.testing.assert_array_equal(lay.pids[lo:hi][real], pids[want])
        np.testing.assert_array_equal(rows[lo:hi][real], packed[want])
        np.testing.assert_array_equal(lay.norms[lo:hi][real], norms[want])
        assert np.all(lay.norms[lo:hi][~real] == 1)
        seen += len(want)
    assert seen == len(codes)
    # one record a block of 16: its bytes position-major, then its norms and pids (what the kernel reads)
    assert lay.blocks.shape == (len(lay.pids) // BLOCK, packed.shape[1] + 8, BLOCK) and lay.blocks.flags.c_contiguous
    record = lay.blocks[1]
    np.testing.assert_array_equal(record[:packed.shape[1]].T, rows[BLOCK:2 * BLOCK])
    np.testing.assert_array_equal(record[packed.shape[1]:packed.shape[1] + 4].reshape(-1).view(np.float32),
                                  lay.norms[BLOCK:2 * BLOCK])
    np.testing.assert_array_equal(record[packed.shape[1] + 4:].reshape(-1).view(np.int32), lay.pids[BLOCK:2 * BLOCK])


def test_layout_leaves_deleted_documents_out():
    codes = [np.array([0, 1, 0, 1, 1], np.int32)]
    residuals = [np.arange(10, dtype=np.uint8).reshape(5, 2)]
    norms = [np.ones(5, np.float16)]
    lay = WarpLayout.build(codes, residuals, norms, np.array([2, 1, 2]), 2, np.array([False, True, False]))
    assert list(lay.cell_sizes) == [1, 3]  # document 1 (vector 2, cell 0) left out
    assert lay.pids[lay.pids >= 0].tolist() == [0, 0, 2, 2]  # cell 0: vector 0; cell 1: vectors 1, 3, 4


def _inputs(s, Q, nc=4):
    ST = s.centroid_scores(s.as_query(Q))
    ordered = s.backend.row_top(ST, nc + 1)
    cells, miss = warp_probes(ST, ordered, s.warp.cell_sizes, *probe_limits(ordered.shape[1], s.warp, 10, nc))
    return ST, ordered, cells, miss


def test_reference_estimates_are_the_definition(index):
    """Per document: sum over tokens of the larger of its best vector in the token's probed cells (exact
    decompressed similarity) and the token's best unprobed cell's score; listed when some vector beat it."""
    enc, out = index
    s = PlaidSearcher(out, backend="reference")
    vectors = decompress(s.centroids, np.concatenate([np.asarray(c) for c in s.codes]),
                         np.concatenate([np.asarray(r) for r in s.residuals]), s.bucket_weights, s.nbits, normalize=False)
    vectors /= np.maximum(np.concatenate([np.asarray(n, np.float32) for n in s.norms]), 1e-12)[:, None]
    codes = np.concatenate([np.asarray(c) for c in s.codes])
    owner = np.repeat(np.arange(s.num_docs), s.doclens)
    Q = s.as_query(queries(enc, 1)[0])
    ST, ordered, cells, miss = _inputs(s, Q, nc=3)
    pids, est = s.backend.warp_scores(s.tables, Q, ST, ordered, cells, miss, s.warp, None)
    want = np.zeros(s.num_docs)
    hit = np.zeros(s.num_docs, bool)
    for q in range(len(Q)):
        probed = np.isin(codes, ordered[q, :cells[q]])
        best = np.full(s.num_docs, -np.inf)
        np.maximum.at(best, owner[probed], vectors[probed] @ Q[q])
        hit |= best > miss[q]
        want += np.maximum(best, miss[q])
    np.testing.assert_array_equal(pids, np.flatnonzero(hit))
    np.testing.assert_allclose(est, want[hit], rtol=1e-5, atol=1e-5)


@needs_kernels
@pytest.mark.parametrize("plain", [False, True])
def test_native_estimates_equal_the_reference(index, plain):
    enc, out = index
    ref = PlaidSearcher(out, backend="reference")
    nat = PlaidSearcher(out, backend="native", precision="fp32")
    for Q in queries(enc, 4):
        Q = ref.as_query(Q)
        ST, ordered, cells, miss = _inputs(ref, Q, nc=5)
        want = ref.backend.warp_scores(ref.tables, Q, ST, ordered, cells, miss, ref.warp, None)
        cells_c = np.ascontiguousarray(ordered)
        got = search_kernels.warp_scores(
            native_backend._nibble_tables(nat.tables["table"], Q), cells_c,
            np.ascontiguousarray(np.take_along_axis(ST, cells_c, axis=1)), cells, miss, nat.warp.cell_offsets,
            nat.warp.blocks, nat.warp.scratch(nat._scratch), plain=plain)
        order = np.argsort(got[0])
        np.testing.assert_array_equal(got[0][order], want[0])
        np.testing.assert_allclose(got[1][order], want[1], rtol=1e-5, atol=1e-5)
        sc = nat.warp.scratch(nat._scratch)
        assert np.all(sc.best == -np.inf) and np.all(sc.total == 0)  # the scratch is left clean for the next query


@needs_kernels
@pytest.mark.parametrize("probed", ["few", "many"])
def test_native_estimates_come_ascending_however_many_documents(index, probed):
    """Few documents touched (a bar only the best vectors pass): listed first-seen and sorted by the wrapper;
    many: read off in pid order by the kernel. Either way ascending pids and the reference's estimates."""
    enc, out = index
    ref = PlaidSearcher(out, backend="reference")
    nat = PlaidSearcher(out, backend="native", precision="fp32")
    Q = ref.as_query(queries(enc, 1)[0])
    ST, ordered, cells, miss = _inputs(ref, Q, nc=5)
    if probed == "few":  # each token's bar just below its best centroid's score
        miss = np.asarray(ST.max(axis=1) - 0.02, dtype=np.float32)
    want = ref.backend.warp_scores(ref.tables, Q, ST, ordered, cells, miss, ref.warp, None)
    got = nat.backend.warp_scores(nat.tables, Q, ST, ordered, cells, miss, nat.warp, nat.warp.scratch(nat._scratch))
    assert (len(got[0]) * 8 < nat.num_docs) == (probed == "few")
    np.testing.assert_array_equal(got[0], want[0])
    assert np.all(np.diff(got[0]) > 0)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


@needs_kernels
@pytest.mark.parametrize("threads", [1, 2])
def test_dense_and_pair_by_pair_folds_give_the_same_bits(index, threads):
    """A token with many kept vectors for the documents adds its gains over every document at once (dense), one
    with few pair by pair: a scratch for far more documents (never touched) makes every token take the pairs,
    the index's own makes a token keeping every vector of its cells take the dense pass (checked below). The
    same pids and the same bits either way, with the index's bars and with bars below every score."""
    enc, out = index
    s = PlaidSearcher(out, backend="native", precision="fp32")
    lay = s.warp
    kept = int((lay.pids >= 0).sum())  # more than any token's pairs
    for Q in queries(enc, 3):
        Q = s.as_query(Q)
        ST, ordered, cells, miss = _inputs(s, Q, nc=5)
        nib = native_backend._nibble_tables(s.tables["table"], Q)
        scores = np.ascontiguousarray(np.take_along_axis(ST, ordered, axis=1))
        low = np.full_like(miss, -10.0)  # every vector of the probed cells kept
        pairs = np.array([lay.cell_sizes[ordered[q, :cells[q]]].sum() for q in range(len(cells))])
        assert np.all(s.num_docs <= 8 * pairs)  # with the low bars, dense for every token (DENSE_PER_PAIR 8)
        for bars in (miss, low):
            args = (nib, ordered, scores, cells, bars, lay.cell_offsets, lay.blocks)
            dense, wide = WarpScratch.for_docs(s.num_docs), WarpScratch.for_docs(8 * kept + 1)
            got = search_kernels.warp_scores(*args, dense, threads=threads)
            want = search_kernels.warp_scores(*args, wide, threads=threads)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
            for sc in (dense, wide):
                assert np.all(sc.best == -np.inf) and np.all(sc.total == 0)


@needs_kernels
def test_warp_kernel_refuses_bad_arguments(index):
    enc, out = index
    s = PlaidSearcher(out, backend="native", precision="fp32")
    Q = s.as_query(queries(enc, 1)[0])
    ST, ordered, cells, miss = _inputs(s, Q)
    nib = native_backend._nibble_tables(s.tables["table"], Q)
    scores = np.ascontiguousarray(np.take_along_axis(ST, ordered, axis=1))
    lay = s.warp
    with pytest.raises(ValueError, match="wrong shape"):
        search_kernels.warp_scores(nib[:, :-1], ordered, scores, cells, miss, lay.cell_offsets, lay.blocks,
                                   lay.scratch(s._scratch))
    bad = ordered.copy()
    bad[0, 0] = s.num_partitions
    with pytest.raises(ValueError, match="cell ids"):
        search_kernels.warp_scores(nib, bad, scores, cells, miss, lay.cell_offsets, lay.blocks,
                                   lay.scratch(s._scratch))
    with pytest.raises(ValueError, match="ncells"):
        search_kernels.warp_scores(nib, ordered, scores, cells + ordered.shape[1], miss, lay.cell_offsets, lay.blocks,
                                   lay.scratch(s._scratch))
    offsets = lay.cell_offsets.copy()
    offsets[ordered[0, 0] + 1] = offsets[ordered[0, 0]] + 8  # a probed cell's end off the 16-vector blocks
    with pytest.raises(ValueError, match="cell offsets"):
        search_kernels.warp_scores(nib, ordered, scores, cells, miss, offsets, lay.blocks,
                                   lay.scratch(s._scratch))
    offsets = lay.cell_offsets.copy()
    offsets[ordered[0, 0] + 1] = offsets[-1] + 16  # ... or past the last vector
    with pytest.raises(ValueError, match="cell offsets"):
        search_kernels.warp_scores(nib, ordered, scores, cells, miss, offsets, lay.blocks,
                                   lay.scratch(s._scratch))
    small = s.num_docs // 2  # a scratch for fewer documents than the layout holds: refused mid-way ...
    scratch = WarpScratch.for_docs(small)
    with pytest.raises(ValueError, match="document ids"):
        search_kernels.warp_scores(nib, ordered, scores, cells, miss, lay.cell_offsets, lay.blocks, scratch)
    assert np.all(scratch.best == -np.inf) and np.all(scratch.total == 0)  # ... with the scratch left clean
    sc = lay.scratch(s._scratch)
    assert np.all(sc.best == -np.inf) and np.all(sc.total == 0)


@needs_kernels
@pytest.mark.parametrize("plain", [False, True])
def test_warp_kernel_grows_its_pair_buffers(index, plain):
    """A token whose probed cells hold more vectors than the pair buffers: grown to fit, the same estimates."""
    enc, out = index
    s = PlaidSearcher(out, backend="native", precision="fp32")
    Q = s.as_query(queries(enc, 1)[0])
    ST, ordered, cells, miss = _inputs(s, Q, nc=5)
    nib = native_backend._nibble_tables(s.tables["table"], Q)
    scores = np.ascontiguousarray(np.take_along_axis(ST, ordered, axis=1))
    lay = s.warp
    args = (nib, ordered, scores, cells, miss, lay.cell_offsets, lay.blocks)
    roomy = search_kernels.warp_scores(*args, WarpScratch.for_docs(s.num_docs, capacity=1 << 20), plain=plain)
    tight = WarpScratch.for_docs(s.num_docs, capacity=16)
    got = search_kernels.warp_scores(*args, tight, plain=plain)
    assert len(tight.pids) > 16 and len(tight.pids) == len(tight.scores)
    np.testing.assert_array_equal(got[0], roomy[0])
    np.testing.assert_array_equal(got[1], roomy[1])
    assert np.all(tight.best == -np.inf) and np.all(tight.total == 0)


@needs_kernels
@pytest.mark.parametrize("shape", [(8192, 32, 33), (300, 7, 3), (50, 5, 50), (13, 40, 4), (500, 70, 9), (1000, 128, 65)])
def test_col_top_is_row_top_of_the_transpose(shape):
    rows, cols, m = shape
    rng = np.random.default_rng(rows)
    st_t = rng.normal(size=(rows, cols)).astype(np.float32)
    st_t[rng.integers(0, rows, 6)] = 0.25  # exact ties across rows
    want = Backend().row_top(np.ascontiguousarray(st_t.T), m)
    for plain in (False, True):
        np.testing.assert_array_equal(search_kernels.col_top(st_t, m, plain=plain), want)
    np.testing.assert_array_equal(native_backend.NativeBackend().row_top(st_t.T, m), want)  # a transposed view
    st_t[3, 2] = np.nan  # never selected; a column left with fewer than m numbers is refused
    st_t[(rows // m) * 2 if m > 2 else 0, 1] = np.nan  # a block's first row
    for plain in (False, True):
        if m < rows:
            got = search_kernels.col_top(st_t, m, plain=plain)
            assert 3 not in got[2] and (rows // m) * 2 not in got[1]
        else:
            with pytest.raises(ValueError, match="NaN"):
                search_kernels.col_top(st_t, m, plain=plain)


def block_maxima(st_t: np.ndarray) -> np.ndarray:
    """The maxima of st_t's blocks of 16 rows, NaN passed over (-inf for a block of NaN): col_top_blocks' input."""
    rows, cols = st_t.shape
    padded = np.full((-(-rows // 16) * 16, cols), -np.inf, np.float32)
    padded[:rows] = np.where(np.isnan(st_t), -np.inf, st_t)
    return np.ascontiguousarray(padded.reshape(-1, 16, cols).max(axis=1))


@needs_kernels
@pytest.mark.parametrize("shape", [(16384, 32, 33), (8192, 32, 33), (300, 7, 3), (50, 5, 50), (13, 40, 4),
                                   (500, 70, 9), (1000, 128, 65), (2000, 17, 48), (4000, 33, 49), (777, 3, 1), (3000, 20, 128), (5000, 16, 129)])
def test_col_top_from_block_maxima_is_col_top(shape):
    """col_top_blocks (each column's gate the m-th best of its block maxima, then only the blocks reaching it) gives
    col_top's answer: ties to the smaller row, ragged last blocks, column groups of 16 and a tail, m at and just past
    the AVX-512 insert's 128, fewer blocks than m (col_top itself), NaN scores passed over, both versions."""
    rows, cols, m = shape
    rng = np.random.default_rng(rows + cols)
    st_t = rng.normal(size=(rows, cols)).astype(np.float32)
    st_t[rng.integers(0, rows, 6)] = 0.25  # exact ties across rows
    st_t[rng.integers(0, rows, 40), rng.integers(0, cols, 40)] = 4.0  # ties among the best
    for plain in (False, True):
        np.testing.assert_array_equal(search_kernels.col_top_blocks(st_t, block_maxima(st_t), m, plain=plain),
                                      search_kernels.col_top(st_t, m))
    if m < rows:
        st_t[rng.integers(0, rows, 20), rng.integers(0, cols, 20)] = np.nan
        st_t[16:32, 0] = np.nan  # a whole block of one column
        want = search_kernels.col_top(st_t, m)
        for plain in (False, True):
            np.testing.assert_array_equal(search_kernels.col_top_blocks(st_t, block_maxima(st_t), m, plain=plain), want)


@needs_kernels
def test_col_top_from_block_maxima_when_the_floor_gathers_too_many():
    """Every block maximum equal in a column (constant scores): all of them reach its floor, more than the gate's
    gathering holds (8 m), so that column's gates come from col_top's lists as before; the same answer."""
    st_t = np.random.default_rng(1).normal(size=(8192, 20)).astype(np.float32)
    st_t[:, 3] = 0.5
    st_t[::2, 7] = 1.0  # every block's maximum 1.0: all 512 blocks reach the floor, past the 264 gathered
    for plain in (False, True):
        np.testing.assert_array_equal(search_kernels.col_top_blocks(st_t, block_maxima(st_t), 33, plain=plain),
                                      search_kernels.col_top(st_t, 33))


@needs_kernels
def test_col_top_from_block_maxima_refuses_bad_arguments():
    st_t = np.zeros((100, 4), np.float32)
    with pytest.raises(ValueError, match="block_max must be"):
        search_kernels.col_top_blocks(st_t, np.zeros((6, 4), np.float32), 3)
    with pytest.raises(ValueError, match="1 <= m"):
        search_kernels.col_top_blocks(st_t, block_maxima(st_t), 101)
    st_t[:, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        search_kernels.col_top_blocks(st_t, block_maxima(st_t), 3)


@needs_kernels
@pytest.mark.parametrize("lq", [32, 7, 40, 1])
def test_centroid_scores_kernel_is_exact_and_the_same_on_every_cpu(lq):
    rng = np.random.default_rng(lq)
    C = rng.normal(size=(301, 64)).astype(np.float32)
    Q = rng.normal(size=(lq, 64)).astype(np.float32)
    fast = search_kernels.centroid_scores(C, Q)
    np.testing.assert_array_equal(fast, search_kernels.centroid_scores(C, Q, plain=True))  # fmaf chains: same bits
    np.testing.assert_allclose(fast, C.astype(np.float64) @ Q.T.astype(np.float64), rtol=0, atol=2e-5)


@needs_kernels
@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_byte_table_from_nibbles_equals_the_products(nbits):
    rng = np.random.default_rng(nbits)
    table = decode_table(np.sort(rng.normal(scale=0.05, size=2 ** nbits)).astype(np.float32), nbits)
    per, dim, lq = table.shape[1], 64, 9
    Q = rng.normal(size=(lq, dim)).astype(np.float32)
    want = np.einsum("vt,btq->bvq", table.astype(np.float64), Q.T.reshape(dim // per, per, lq).astype(np.float64))
    got = search_kernels.byte_lut(native_backend._nibble_tables(table, Q))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_nibble_tables_are_each_nibbles_products(nbits):
    """nib[q, b, 0, n] = Q[q] . the values of byte n << 4 in byte b's first half of dims, nib[q, b, 1, n] those of byte n
    in its second half: the definition in float64, and the same bits with the weights made once."""
    rng = np.random.default_rng(10 + nbits)
    table = decode_table(np.sort(rng.normal(scale=0.05, size=2 ** nbits)).astype(np.float32), nbits)
    per, dim, lq = table.shape[1], 64, 9
    half, nib = per // 2, np.arange(16)
    Q = rng.normal(size=(lq, dim)).astype(np.float32)
    Qb = Q.astype(np.float64).reshape(lq, dim // per, per)
    want = np.stack([Qb[:, :, :half] @ table[nib << 4, :half].T.astype(np.float64),
                     Qb[:, :, half:] @ table[nib, half:].T.astype(np.float64)], axis=2)
    got = native_backend._nibble_tables(table, Q)
    assert got.shape == (lq, dim // per, 2, 16) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    weights = native_backend.nibble_weights(table)
    np.testing.assert_array_equal(native_backend._nibble_tables(table, Q, weights), got)


@pytest.mark.parametrize("backend", ["reference", "native"])
def test_warp_search_returns_exhaustive_top10(index, backend):
    if backend == "native" and not native_backend.available():
        pytest.skip("the C kernels were not built")
    enc, out = index
    s = PlaidSearcher(out, backend=backend, precision="fp32")
    for Q in queries(enc):
        pe, se = s.search(Q, 10, exhaustive=True)
        pw, sw = s.search(Q, 10, candidates="warp")
        assert s.last_params["candidates"] == "warp" and s.last_params["pool"] == warp_pool(10) == 40
        np.testing.assert_array_equal(pw, pe)
        np.testing.assert_allclose(sw, se, rtol=1e-5, atol=1e-5)  # stage 5's exact scores


def test_warp_never_returns_deleted_documents(index, tmp_path):
    import shutil

    from embedctl.index.generations import open_generation
    from embedctl.index.update import delete_documents

    enc, out = index
    copy = tmp_path / "idx"
    shutil.copytree(out, copy)
    Q = queries(enc, 1)[0]
    before, _ = PlaidSearcher(copy).search(Q, 10)
    delete_documents(copy, [str(p) for p in before[:3]])  # ids of a list collection: their positions
    s = PlaidSearcher(open_generation(copy))
    after, _ = s.search(Q, 10, candidates="warp")
    assert not set(before[:3].tolist()) & set(after.tolist()) and len(after) == 10


def test_candidates_must_be_known(index):
    enc, out = index
    with pytest.raises(EmbedctlError, match="expected auto, warp or plaid"):
        PlaidSearcher(out).search(queries(enc, 1)[0], 10, candidates="fast")


def test_every_cell_probed_makes_the_estimates_exact(index):
    """With every cell probed each token sees every vector: the estimates are exact MaxSim."""
    enc, out = index
    s = PlaidSearcher(out, precision="fp32")
    Q = s.as_query(queries(enc, 1)[0])
    ST = s.centroid_scores(Q)
    ordered = s.backend.row_top(ST, s.num_partitions)
    cells, miss = warp_probes(ST, ordered, s.warp.cell_sizes,
                              *probe_limits(ordered.shape[1], s.warp, 10, s.num_partitions))
    assert np.all(cells == s.num_partitions)
    pids, est = s.backend.warp_scores(s.tables, Q, ST, ordered, cells, miss, s.warp, s.warp.scratch(s._scratch))
    exact = s._maxsim(Q, np.arange(s.num_docs), ST)
    np.testing.assert_array_equal(pids, np.arange(s.num_docs))
    np.testing.assert_allclose(est, exact, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(s.search(Q, 10, ncells=s.num_partitions, candidates="warp")[0],
                                  s.search(Q, 10, exhaustive=True)[0])


def test_warp_with_plaid_only_keys_is_refused_naming_them():
    from typer.testing import CliRunner

    from embedctl.cli.main import app
    from embedctl.config.sections.index import SearchConfig

    assert SearchConfig(candidates="warp").problems() == []
    assert SearchConfig(candidates="auto", ndocs=64).problems() == []  # auto takes PLAID's stages then
    (key, message), = SearchConfig(candidates="warp", ndocs=64, centroid_score_threshold=0.4).problems()
    assert key == "centroid_score_threshold" and "search.candidates=plaid" in message
    result = CliRunner().invoke(app, ["search", "anything", "search.candidates=warp", "search.ndocs=64"])
    assert result.exit_code == 2 and "`search.ndocs`" in result.output and "only tunes PLAID" in result.output


def test_a_session_set_to_plaid_candidates_holds_no_warp_copy(index):
    enc, out = index
    s = PlaidSearcher(out, warp_layout=False)
    assert s._warp is None
    Q = queries(enc, 1)[0]
    s.search(Q, 10, candidates="plaid")
    assert s._warp is None
    pw, _ = s.search(Q, 10, candidates="warp")  # built on first use
    assert s._warp is not None
    np.testing.assert_array_equal(pw, PlaidSearcher(out).search(Q, 10, candidates="warp")[0])


@needs_kernels
def test_native_probes_are_the_reference_probes(index):
    """The C kernel's counts and scores outside the probed cells (embedctl_warp_probes) against reference
    .warp_probes: real queries at k 10, 100 and 1000 and explicit ncells, random sizes with empty cells and
    ties of running sums at ``want``, every cell selected (the lowest score), and bad arguments refused."""
    from embedctl.index.plaid.reference import warp_probes
    from embedctl.search.warp import cells_to_select, probe_limits

    enc, out = index
    s = PlaidSearcher(out, backend="native")
    for Q in queries(enc, 6):
        Q = s.as_query(Q)
        ST = s.centroid_scores(Q)
        for k, nc in ((10, None), (100, None), (1000, None), (10, 3), (10, 10_000)):
            ordered = s.backend.row_top(ST, cells_to_select(k, nc, s.num_partitions))
            limits = probe_limits(ordered.shape[1], s.warp, k, nc)
            got = s.backend.warp_probes(ST, ordered, s.warp.cell_sizes, *limits)
            want = warp_probes(ST, ordered, s.warp.cell_sizes, *limits)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
            assert got[0].dtype == np.int64 and got[1].dtype == np.float32
            # warp_scores after warp_probes reads the cells' scores it gathered: the same as gathering them anew
            scratch = s.warp.scratch(s._scratch)
            kept = s.backend.warp_scores(s.tables, Q, ST, ordered, got[0], got[1], s.warp, scratch)
            s.backend._probe_cache.last = None
            fresh = s.backend.warp_scores(s.tables, Q, ST, ordered, got[0], got[1], s.warp, scratch)
            np.testing.assert_array_equal(kept[0], fresh[0])
            np.testing.assert_array_equal(kept[1], fresh[1])
    rng = np.random.default_rng(5)
    for trial in range(40):
        num_c, lq = int(rng.integers(3, 60)), int(rng.integers(1, 40))
        m = int(rng.integers(1, num_c + 1))
        st_t = rng.normal(size=(num_c, lq)).astype(np.float32)
        ordered = np.stack([rng.permutation(num_c)[:m] for _ in range(lq)]).astype(np.int64)
        sizes = rng.integers(0, 5, size=num_c).astype(np.int64)  # empty cells; sums that land on want exactly
        most = int(rng.integers(1, m + 1))
        least = int(rng.integers(1, most + 1))
        want = float(rng.integers(0, 12)) if trial % 4 else float("inf")
        got = search_kernels.warp_probes(st_t, ordered, sizes, want, least, most)
        np.testing.assert_array_equal(got[2], st_t.T[np.arange(lq)[:, None], ordered])  # the cells' scores
        ref = warp_probes(st_t.T, ordered, sizes, want, least, most)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])
    every = np.stack([rng.permutation(num_c) for _ in range(lq)]).astype(np.int64)  # all cells, all probed
    got = search_kernels.warp_probes(st_t, every, sizes, float("inf"), num_c, num_c)
    np.testing.assert_array_equal(got[1], st_t.min(axis=0))
    np.testing.assert_array_equal(got[1], warp_probes(st_t.T, every, sizes, float("inf"), num_c, num_c)[1])
    with pytest.raises(ValueError, match="cell ids"):
        search_kernels.warp_probes(st_t, ordered + num_c, sizes, 4.0, 1, 1)
    with pytest.raises(ValueError, match="least"):
        search_kernels.warp_probes(st_t, ordered, sizes, 4.0, 2, 1)
    with pytest.raises(ValueError, match="scores"):
        search_kernels.warp_probes(st_t[:-1], ordered, sizes, 4.0, 1, 1)
