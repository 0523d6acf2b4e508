"""Search on AMX tiles (_search_amx.c: three bfloat16 products with float32 sums): a query's centroid scores
(search_amx.centroid_scores_amx) and the final MaxSim's residual parts (search_amx.maxsim_amx_docs), each
against float64 within its stated bound on random and real inputs, the same bits on any thread count; and where
the native backend uses them: centroid scores at search.precision fp16 or bf16 on a CPU with AMX, the MaxSim at
fp16 there, never at fp32 (whose kernels give the same bits on every CPU)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.synthetic import SyntheticEncoder

from embedctl.config.sections.index import IndexConfig
from embedctl.index.build import build_plaid_index
from embedctl.index.plaid import native_backend, search_amx
from embedctl.index.plaid.bf16 import is_bf16, on_bf16_grid
from embedctl.index.plaid.native_backend import NativeBackend
from embedctl.index.plaid.reference import decode_table
from embedctl.search.plaid import PlaidSearcher

pytestmark = pytest.mark.skipif(not native_backend.available(), reason="the C kernels were not built")
amx = pytest.mark.skipif(not search_amx.amx_available(), reason="no AMX-BF16 on this CPU")


def check(C: np.ndarray, Q: np.ndarray) -> np.ndarray:
    got = search_amx.centroid_scores_amx(search_amx.pack_bf16x2(C), Q)
    want = C.astype(np.float64) @ Q.astype(np.float64).T
    assert got.shape == (len(C), len(Q)) and got.dtype == np.float32
    assert (np.abs(got - want) <= search_amx.amx_err_bound(C, Q)).all()
    return got


@amx
@pytest.mark.parametrize("grid", [False, True])
@pytest.mark.parametrize("num_c,dim,lq", [(16384, 128, 32), (1, 128, 1), (15, 128, 32), (17, 96, 16),
                                          (1000, 40, 33), (300, 128, 64), (48, 32, 5), (33, 200, 17)])
def test_random_scores_within_the_bound_and_the_same_bits_on_any_thread_count(num_c, dim, lq, grid):
    """Ragged centroid blocks (16) and token tiles (16), dims that pad to 32, one and several token tile pairs;
    unnormalised rows of mixed magnitude (the bound is relative to sum_d |c_d q_d|). ``grid``: centroids that are
    bfloat16 values (as k-means stores them), packed as their hi half alone: the same bits as the three
    products with a lo half of zeros."""
    rng = np.random.default_rng(num_c + dim + lq)
    C = (rng.normal(size=(num_c, dim)) * rng.uniform(0.01, 3, size=(num_c, 1))).astype(np.float32)
    C = on_bf16_grid(C) if grid else C
    Q = rng.normal(size=(lq, dim)).astype(np.float32)
    got = check(C, Q)
    p = search_amx.pack_bf16x2(C)
    assert p.packed.shape[1] == (1 if grid else 2)
    if grid:
        with_zero_lo = np.concatenate([p.packed, np.zeros_like(p.packed)], axis=1)
        np.testing.assert_array_equal(search_amx.centroid_scores_amx(p._replace(packed=with_zero_lo), Q), got)
    for t in (2, 3):
        np.testing.assert_array_equal(search_amx.centroid_scores_amx(p, Q, threads=t), got)
    out = np.full((num_c, lq), np.nan, np.float32)
    assert search_amx.centroid_scores_amx(p, Q, out=out) is out
    np.testing.assert_array_equal(out, got)
    # with the blocks' maxima written as the scores are stored: the same scores, each block's exact maximum
    want_max = np.full((-(-num_c // 16) * 16, lq), -np.inf, np.float32)
    want_max[:num_c] = got
    for t in (1, 3):
        block_max = np.full((-(-num_c // 16), lq), np.nan, np.float32)
        np.testing.assert_array_equal(search_amx.centroid_scores_amx(p, Q, threads=t, block_max=block_max), got)
        np.testing.assert_array_equal(block_max, want_max.reshape(-1, 16, lq).max(axis=1))
    with pytest.raises(ValueError, match="block_max must be"):
        search_amx.centroid_scores_amx(p, Q, block_max=np.zeros((num_c // 16 + 2, lq), np.float32))


@amx
def test_exact_where_the_halves_are_exact():
    """Values that are bfloat16 already (lo = 0) and small integer sums: every product and sum exact in float32, so
    the scores are the exact dot products; zero rows score 0."""
    rng = np.random.default_rng(3)
    C = rng.integers(-8, 9, size=(40, 64)).astype(np.float32)
    Q = rng.integers(-8, 9, size=(32, 64)).astype(np.float32)
    C[7] = 0
    np.testing.assert_array_equal(check(C, Q), (C.astype(np.int64) @ Q.astype(np.int64).T).astype(np.float32))


@amx
def test_real_colbert_vectors(scifact):
    """Real inputs: the bundled model's ColBERT vectors of 40 SciFact documents (float16 as an index stores them)
    as centroids, its query vectors of 8 queries: within the bound, and within 1e-5 of float64 (unit vectors)."""
    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.encoder import load_encoder

    with open(scifact / "corpus.jsonl", encoding="utf-8") as fh:
        texts = [" ".join(filter(None, (row.get("title"), row.get("text")))) for row in map(json.loads, fh)][:40]
    with open(scifact / "queries.jsonl", encoding="utf-8") as fh:
        queries = [row["text"] for row in map(json.loads, fh)][:8]
    encoder = load_encoder(ModelConfig(kind="colbert", doc_max_length=128), device="cpu")
    vecs, _ = encoder.encode_documents(texts)
    C = np.ascontiguousarray(np.asarray(vecs, np.float32).astype(np.float16), np.float32)
    for Q in encoder.encode_queries(queries):
        Q = np.ascontiguousarray(Q, np.float32)
        got = check(C, Q)
        assert np.abs(got - C.astype(np.float64) @ Q.astype(np.float64).T).max() < 1e-5


@amx
def test_bad_arguments_are_refused():
    p = search_amx.pack_bf16x2(np.ones((20, 64), np.float32))
    with pytest.raises(ValueError, match="Lq"):
        search_amx.centroid_scores_amx(p, np.ones((4, 63), np.float32))
    with pytest.raises(ValueError, match="Lq"):
        search_amx.centroid_scores_amx(p, np.ones((0, 64), np.float32))
    with pytest.raises(ValueError, match="out must be"):
        search_amx.centroid_scores_amx(p, np.ones((4, 64), np.float32), out=np.empty((4, 20), np.float32))
    with pytest.raises(ValueError, match="threads"):
        search_amx.centroid_scores_amx(p, np.ones((4, 64), np.float32), threads=0)
    with pytest.raises(ValueError, match="finite"):
        search_amx.pack_bf16x2(np.array([[np.inf, 1.0]], np.float32))


def test_which_precisions_use_the_tiles():
    """Centroid scores at fp16 and bf16 where the CPU has AMX, the MaxSim at fp16; fp32 never (its kernels: the
    same bits on every CPU)."""
    assert not NativeBackend("fp32").amx_centroid_scores() and not NativeBackend("fp32").amx_maxsim()
    for precision in ("fp16", "bf16"):
        assert NativeBackend(precision).amx_centroid_scores() == search_amx.amx_available()
    assert NativeBackend("fp16").amx_maxsim() == search_amx.amx_available()
    assert not NativeBackend("bf16").amx_maxsim()


def maxsim_case(seed: int, nbits: int, dim: int = 128, lq: int = 32, norm_dtype=np.float16, grid: bool = False):
    """Random packed residuals of documents of 1-40 vectors (one of 70: several tiles of 16, ragged), codes into
    random centroid scores, norms; the pids of some of them, unsorted and repeated. ``grid``: bucket weights that
    are bfloat16 values (as the codec stores them)."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 41, size=30)
    lens[4] = 70
    n, nbytes = int(lens.sum()), dim * nbits // 8
    packed = rng.integers(0, 256, size=(n, nbytes), dtype=np.uint8)
    weights = np.sort(rng.normal(scale=0.05, size=2 ** nbits)).astype(np.float32)
    weights = on_bf16_grid(weights) if grid else weights
    st_t = rng.uniform(-1, 1, size=(500, lq)).astype(np.float32)
    codes = rng.integers(0, 500, size=n).astype(np.int32)
    norms = rng.uniform(0.8, 1.2, size=n).astype(norm_dtype)
    Q = rng.normal(size=(lq, dim)).astype(np.float32)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    pids = rng.integers(0, len(lens), size=40).astype(np.int64)
    return Q, decode_table(weights, nbits), packed, st_t, codes, norms, offsets, pids


def maxsim64(Q, table, packed, st_t, codes, norms, offsets, pids):
    """float64 MaxSim of the kernel's formula, and its bound: per token, the residual part's amx_err_bound over the
    norm, maximised over the document's vectors, summed over q, plus float32 roundings of the fold and the sum."""
    R = table[packed].reshape(len(packed), -1)
    sims = R.astype(np.float64) @ Q.astype(np.float64).T
    err = search_amx.amx_err_bound(R, Q).astype(np.float64)
    inv = 1 / np.maximum(norms.astype(np.float64), 1e-12)[:, None]
    vals = (st_t[codes].astype(np.float64) + sims) * inv
    want, bound = [], []
    for p in pids:
        rows = slice(offsets[p], offsets[p + 1])
        best = vals[rows].max(0)
        want.append(best.sum())
        bound.append((err[rows] * inv[rows]).max(0).sum() + 2.0 ** -21 * np.abs(vals[rows]).max(0).sum() +
                     len(Q) * 2.0 ** -23 * np.abs(best).sum())
    return np.array(want), np.array(bound)


@amx
@pytest.mark.parametrize("grid", [False, True])
@pytest.mark.parametrize("nbits,dim,lq,norm_dtype", [(2, 128, 32, np.float16), (1, 128, 32, np.float32),
                                                     (4, 96, 17, np.float16), (2, 64, 5, np.float32),
                                                     (2, 128, 48, np.float16), (2, 100, 32, np.float16)])
def test_maxsim_within_its_bound_of_float64_and_the_same_bits_on_any_thread_count(nbits, dim, lq, norm_dtype, grid):
    """``grid``: residual values that are bfloat16 values, decoded without a lo half (both decoders: nbits 2 with
    whole groups of 8 bytes, and the byte copies): the same bits as with a lo half of zeros."""
    Q, table, packed, st_t, codes, norms, offsets, pids = maxsim_case(nbits + dim + lq, nbits, dim, lq, norm_dtype,
                                                                      grid)
    split = search_amx.residual_split(table)
    assert split.shape[1] == (1 if grid else 2)
    got = search_amx.maxsim_amx_docs(split, Q, packed, st_t, codes, norms, offsets, pids)
    if grid:
        with_zero_lo = np.concatenate([split, np.zeros_like(split)], axis=1)
        np.testing.assert_array_equal(
            search_amx.maxsim_amx_docs(with_zero_lo, Q, packed, st_t, codes, norms, offsets, pids), got)
    want, bound = maxsim64(Q, table, packed, st_t, codes, norms, offsets, pids)
    assert got.dtype == np.float32 and (np.abs(got - want) <= bound).all()
    for t in (2, 3):
        np.testing.assert_array_equal(search_amx.maxsim_amx_docs(split, Q, packed, st_t, codes, norms, offsets,
                                                                     pids, threads=t), got)


@amx
def test_maxsim_refuses_bad_arguments():
    Q, table, packed, st_t, codes, norms, offsets, pids = maxsim_case(1, 2)
    split = search_amx.residual_split(table)
    bad = codes.copy()
    bad[offsets[pids[0]]] = len(st_t)
    with pytest.raises(ValueError, match="centroid ids"):
        search_amx.maxsim_amx_docs(split, Q, packed, st_t, bad, norms, offsets, pids)
    with pytest.raises(ValueError, match="need split"):
        search_amx.maxsim_amx_docs(split, Q[:, :64], packed, st_t, codes, norms, offsets, pids)
    with pytest.raises(ValueError, match="one row per vector"):
        search_amx.maxsim_amx_docs(split, Q, packed, st_t, codes[:-1], norms, offsets, pids)
    with pytest.raises(ValueError, match="without vectors"):  # document 0 empty
        search_amx.maxsim_amx_docs(split, Q, packed, st_t, codes, norms, np.concatenate([offsets[:1], offsets]),
                                       np.array([1, 0]))
    with pytest.raises(ValueError, match="byte table"):
        search_amx.residual_split(np.zeros((256, 3), np.float32))


@pytest.fixture(scope="module")
def index(module_tmp):
    enc = SyntheticEncoder(dim=64, num_topics=96, mean_len=40)
    docs = [f"passage {i}" for i in range(400)]
    out = module_tmp("amx_scores") / "idx"
    build_plaid_index(enc, docs, out, IndexConfig(nbits=2), progress=False)
    return enc, docs, out


def test_a_searcher_scores_centroids_one_way_on_every_path(index):
    """An fp16 searcher's centroid scores (the search's own, and PlaidSearcher.centroid_scores that the filtered and
    PLAID paths read) come from one place: the tiles where the CPU has AMX (within their bound of float64), the fp32
    kernel elsewhere (its bits); its top 10 the fp32 searcher's on every query (a synthetic index: no near ties)."""
    enc, docs, out = index
    fp16, fp32 = PlaidSearcher(out, precision="fp16"), PlaidSearcher(out, precision="fp32")
    assert (fp16.tables["bf16x2"] is not None) == search_amx.amx_available()
    assert fp32.tables["bf16x2"] is None
    # the build stores bfloat16 values (k-means' centroids, the codec's bucket weights): the tiles take no lo half
    assert is_bf16(np.load(out / "plaid" / "centroids.npy")) and is_bf16(np.load(out / "plaid" / "bucket_weights.npy"))
    if search_amx.amx_available():
        assert fp16.tables["bf16x2"].packed.shape[1] == 1 and fp16.tables["residual_split"].shape[1] == 1
    for i in range(6):
        Q = fp16.as_query(enc.query_for(docs[i * 37], seed=i))
        ST = fp16.centroid_scores(Q)
        if search_amx.amx_available():
            want = search_amx.centroid_scores_amx(fp16.tables["bf16x2"], Q).T
            assert (np.abs(ST - fp32.centroid_scores(Q)) <= search_amx.amx_err_bound(fp16.centroids, Q).T
                    + 1e-6).all()
        else:
            want = fp32.centroid_scores(Q)
        np.testing.assert_array_equal(ST, want)
        np.testing.assert_array_equal(fp16.search(Q, 10)[0], fp32.search(Q, 10)[0])


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_cells_from_the_block_maxima_are_the_cells_of_the_scores(index, precision):
    """The native backend's row_top of the scores its last centroid_scores wrote on this thread (with their block
    maxima: col_top_blocks; the AMX kernel's at fp16 where AMX runs, the fused multiply-add kernel's otherwise) is
    the reference's selection; scores it did not write (the caller's, or a buffer rewritten since) take col_top,
    with the same answer."""
    from embedctl.index.plaid import search_kernels
    from embedctl.index.plaid.backends import Backend

    enc, docs, out = index
    searcher = PlaidSearcher(out, precision=precision)
    backend, scratch = searcher.backend, searcher._scratch
    amx = precision == "fp16" and search_amx.amx_available()
    writes_maxima = amx or search_kernels.centroid_scores_fast()
    for i in range(4):
        Q = searcher.as_query(enc.query_for(docs[i * 53], seed=i))
        ST = backend.centroid_scores(searcher.centroids, Q, scratch, 1, searcher.tables)
        assert (getattr(backend._block_max_cache, "last", None) is not None) == writes_maxima
        want = Backend().row_top(np.ascontiguousarray(ST), 33)
        np.testing.assert_array_equal(backend.row_top(ST, 33), want)
        copy = np.ascontiguousarray(ST.T).T  # the same scores, another buffer: col_top
        np.testing.assert_array_equal(backend.row_top(copy, 33), want)
    ST_old = ST.copy()
    backend.centroid_scores(searcher.centroids, searcher.as_query(enc.query_for(docs[1], seed=9)), None, 1,
                            searcher.tables)  # a fresh array: the thread's buffer keeps no maxima
    assert getattr(backend._block_max_cache, "last", "unset") is None
    np.testing.assert_array_equal(backend.row_top(ST, 33), Backend().row_top(np.ascontiguousarray(ST_old), 33))


@amx
def test_the_float16_table_route_still_runs_and_agrees_where_the_tiles_are_off(monkeypatch):
    """On an AMX host fp16's MaxSim takes the tiles; with them off (as on a CPU without AMX) the float16 table
    route runs instead: both within the float16 table's bound of each other, in place and gathered alike."""
    Q, table, packed, st_t, codes, norms, offsets, pids = maxsim_case(9, 2)
    weights = np.unique(table)
    centroids = np.eye(500, 128, dtype=np.float32)
    tiles = NativeBackend("fp16")
    on = tiles.search_tables(centroids, weights, 2)
    monkeypatch.setattr(search_amx, "amx_available", lambda: False)
    off = NativeBackend("fp16").search_tables(centroids, weights, 2)
    assert on["residual_split"] is not None and off["residual_split"] is None
    ST = np.ascontiguousarray(st_t.T)
    got = tiles.maxsim_docs(on, Q, ST, codes, packed, norms, offsets, pids)
    lut = NativeBackend("fp16").maxsim_docs(off, Q, ST, codes, packed, norms, offsets, pids)
    entry = 4 * float(np.abs(Q).max()) * float(np.abs(weights).max())
    np.testing.assert_allclose(got, lut, rtol=0, atol=1e-5 + len(Q) * packed.shape[1] * entry * 2.0 ** -11 / 0.8)
    lens = np.diff(offsets)[pids]
    idx = np.concatenate([np.arange(offsets[p], offsets[p + 1]) for p in pids])
    np.testing.assert_array_equal(tiles.maxsim(on, Q, ST, codes[idx], packed[idx], norms[idx], lens), got)
