"""Every PLAID backend that runs on this machine against the reference, on the same inputs.

Exact where the backend claims it (``exact_assignment``; compression bytes; centroid interactions), within
the bound its docstring states otherwise (fp32 assignment through faiss, fp32 / bf16 MaxSim).
"""

import numpy as np
import pytest
from support.assignhelpers import assert_exact, assert_exact_on_near_ties, clustered

from embedctl.errors import ConfigError
from embedctl.index.plaid import kmeans, native_backend, reference
from embedctl.index.plaid.backends import TorchBackend, available_backends, index_backend, search_backend
from embedctl.index.plaid.codec import train_codec
from embedctl.index.plaid.reference import Backend

INDEX_BACKENDS = available_backends("index") + [TorchBackend("fp32", "cpu")]  # torch's route, run on the CPU
SEARCH_BACKENDS = available_backends("search")


def _ids(backends):
    return [f"{b.name}-{b.precision}" for b in backends]


def assert_assignment(backend, got: np.ndarray, x, c, bias=None):
    if backend.exact_assignment:
        assert_exact(got, x, c, bias)
        return
    # fp32 sums: the chosen centroid's exact score is below the best by at most 2^-22 dim |x| max|c|
    exact = x.astype(np.float64) @ c.astype(np.float64).T + (0 if bias is None else bias.astype(np.float64))
    loss = exact.max(axis=1) - exact[np.arange(len(x)), got]
    bound = 2.0 ** -22 * x.shape[1] * np.linalg.norm(x, axis=1) * np.linalg.norm(c, axis=1).max()
    assert (loss <= bound + 1e-7).all()


@pytest.mark.parametrize("backend", INDEX_BACKENDS, ids=_ids(INDEX_BACKENDS))
@pytest.mark.parametrize("num_c", [7, 300, 2048])  # below one block, ragged tails, whole blocks
def test_nearest_against_the_reference(backend, num_c):
    x, c = clustered(3000, num_c, seed=num_c)
    codes, best = backend.nearest(x, c)
    assert codes.dtype == np.int32 and best.dtype == np.float32 and codes.shape == (3000,)
    assert_assignment(backend, codes, x, c)
    np.testing.assert_allclose(best, (x.astype(np.float64) * c[codes]).sum(1), rtol=0, atol=1e-5)
    bias = (-0.5 * (c * c).sum(1)).astype(np.float32)  # L2
    assert_assignment(backend, backend.nearest(x, c, bias)[0], x, c, bias)


@pytest.mark.parametrize("backend", [b for b in INDEX_BACKENDS if b.exact_assignment],
                         ids=_ids([b for b in INDEX_BACKENDS if b.exact_assignment]))
def test_exact_backends_on_near_ties_and_duplicates(backend):
    assert_exact_on_near_ties(backend.nearest, twin_distance=1e-4, min_scale=0.5)


@pytest.mark.parametrize("backend", INDEX_BACKENDS, ids=_ids(INDEX_BACKENDS))
def test_empty_and_read_only_input(backend):
    x, c = clustered(100, 64)
    assert backend.nearest(x[:0], c)[0].shape == (0,)
    x.setflags(write=False)
    assert backend.nearest(x, c)[0].shape == (100,)


@pytest.mark.parametrize("backend", INDEX_BACKENDS, ids=_ids(INDEX_BACKENDS))
@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_compression_and_norms_against_the_reference(backend, nbits):
    x, c = clustered(3000, 128, dim=64, seed=nbits)
    codec = train_codec(c.astype(np.float16), x[:1000], nbits, backend=Backend())
    cf, codes = codec.centroids_f32(), reference.nearest(x, codec.centroids_f32())[0]
    packed = backend.compress(x, cf, codes, codec.bucket_cutoffs, nbits)
    np.testing.assert_array_equal(packed, reference.compress(x, cf, codes, codec.bucket_cutoffs, nbits))
    norms = backend.decoded_norms(cf, codes, packed, codec.bucket_weights, nbits)
    want = np.linalg.norm(reference.decompress(cf, codes, packed, codec.bucket_weights, nbits, normalize=False), axis=1)
    np.testing.assert_allclose(norms, want, rtol=1e-6)


@pytest.mark.skipif(not native_backend.available(), reason="C kernels not built")
@pytest.mark.parametrize("nbits", [1, 2, 4])
@pytest.mark.parametrize("dim", [128, 48, 40])
def test_both_compression_kernels_give_the_references_bytes(nbits, dim):
    """The AVX-512 compression (dims in multiples of 16, where the CPU has it) and the plain one: the
    reference's bytes, residuals on a cutoff exactly (strictly above counts) and at zero included."""
    from embedctl.index.plaid import kernels

    x, c = clustered(2000, 64, dim=dim, seed=nbits + dim)
    codec = train_codec(c.astype(np.float16), x[:1000], nbits, backend=Backend())
    cf = np.vstack([codec.centroids_f32(), np.zeros((1, dim), np.float32)])  # a zero centroid: residual = x
    codes = reference.nearest(x, cf[:-1])[0]
    cuts = codec.bucket_cutoffs
    x[0] = cf[codes[0]]  # every residual 0
    codes[1], x[1] = len(cf) - 1, np.resize(cuts, dim)  # every residual exactly on a cutoff
    want = reference.compress(x, cf, codes, cuts, nbits)
    np.testing.assert_array_equal(kernels.compress(x, cf, codes, cuts, nbits), want)
    np.testing.assert_array_equal(kernels.compress(x, cf, codes, cuts, nbits, plain=True), want)


@pytest.mark.skipif(not native_backend.available(), reason="C kernels not built")
def test_compression_in_blocks_on_threads_gives_the_bytes_of_one_pass():
    from embedctl.index.plaid import kernels

    x, c = clustered(3 * native_backend.FUSED_ROWS + 77, 64, dim=32, seed=9)  # four blocks, the last short
    codec = train_codec(c.astype(np.float16), x[:1000], 2, backend=Backend())
    cf = codec.centroids_f32()
    codes = reference.nearest(x, cf)[0]
    backend = native_backend.NativeBackend("fp32")
    packed = backend.compress(x, cf, codes, codec.bucket_cutoffs, 2)
    np.testing.assert_array_equal(packed, kernels.compress(x, cf, codes, codec.bucket_cutoffs, 2))
    table = native_backend.decode_table(codec.bucket_weights, 2)
    np.testing.assert_array_equal(backend.decoded_norms(cf, codes, packed, codec.bucket_weights, 2),
                                  kernels.decoded_norms(cf, codes, packed, table, 2))


@pytest.mark.skipif(not native_backend.available(), reason="C kernels not built")
@pytest.mark.parametrize("threads", [1, 3, 16])
def test_blocks_follow_the_threads_and_give_the_same_answers(threads):
    """With more threads the rows go in smaller blocks (about 4 a thread, at least MIN_BLOCK_ROWS), so that none
    idles: the same codes, scores, bytes and norms whatever the thread count (16 threads on this machine's cores
    included)."""
    import torch

    from embedctl.index.plaid import kernels

    n = 2 * native_backend.FUSED_ROWS + 77
    assert native_backend._block_rows(65536, 2) == native_backend.FUSED_ROWS
    assert native_backend._block_rows(65536, 16) == 1024
    assert native_backend._block_rows(1000, 16) == native_backend.MIN_BLOCK_ROWS
    x, c = clustered(n, 300, dim=32, seed=11)
    codec = train_codec(c.astype(np.float16), x[:1000], 2, backend=Backend())
    cf = codec.centroids_f32()
    want_codes, want_best = reference.nearest(x, cf)
    table = native_backend.decode_table(codec.bucket_weights, 2)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        for backend in [b for b in INDEX_BACKENDS if isinstance(b, native_backend.NativeBackend)]:
            codes, best = backend.nearest(x, cf)
            assert_exact(codes, x, cf)
            np.testing.assert_allclose(best, want_best, rtol=0, atol=1e-6)
            packed = backend.compress(x, cf, want_codes, codec.bucket_cutoffs, 2)
            np.testing.assert_array_equal(packed, kernels.compress(x, cf, want_codes, codec.bucket_cutoffs, 2))
            np.testing.assert_array_equal(backend.decoded_norms(cf, want_codes, packed, codec.bucket_weights, 2),
                                          kernels.decoded_norms(cf, want_codes, packed, table, 2))
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("backend", INDEX_BACKENDS, ids=_ids(INDEX_BACKENDS))
def test_a_kmeans_step_with_the_kept_squared_norms_is_the_step_without_them(backend):
    """k-means computes |x|^2 once for its iterations (reference.squared_norms): the same step, bit for bit."""
    x, _ = clustered(3000, 64, seed=9)
    cent = x[:48].copy()
    fresh = backend.kmeans_step(x, cent)
    kept = backend.kmeans_step(x, cent, reference.squared_norms(x))
    for a, b in zip(fresh, kept, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", INDEX_BACKENDS, ids=_ids(INDEX_BACKENDS))
def test_hints_change_only_the_speed(backend):
    """A likely best centroid per row (k-means passes the previous assignment) seeds a fused kernel's scan: the
    same codes and scores whether the hints are right, wrong, -1 (none) or out of range, with and without bias."""
    x, c = clustered(3000, 300, dim=128, seed=12)
    rng = np.random.default_rng(3)
    for bias in (None, (-0.5 * (c * c).sum(1)).astype(np.float32)):
        codes, best = backend.nearest(x, c, bias)
        wrong = rng.integers(-2, len(c) + 2, len(x))  # -2, -1, C and C + 1 included: ignored
        for hints in (codes.astype(np.int64), wrong, np.full(len(x), -1)):
            got = backend.nearest(x, c, bias, hints=hints)
            np.testing.assert_array_equal(got[0], codes)
            np.testing.assert_array_equal(got[1], best)


@pytest.mark.parametrize("backend", [b for b in INDEX_BACKENDS if b.exact_assignment],
                         ids=_ids([b for b in INDEX_BACKENDS if b.exact_assignment]))
def test_hints_on_near_ties_and_duplicates(backend):
    """Seeded at a later duplicate or at a twin inside the rounding bound, an exact tie still goes to the first."""
    rng = np.random.default_rng(4)

    def hinted(x, c, bias):
        return backend.nearest(x, c, bias, hints=rng.integers(len(c) - 600, len(c), len(x)))  # twins, duplicates

    assert_exact_on_near_ties(hinted, twin_distance=1e-4, min_scale=0.5)


@pytest.mark.parametrize("backend", INDEX_BACKENDS, ids=_ids(INDEX_BACKENDS))
def test_centroids_changed_in_place_between_calls_are_seen(backend):
    """Nothing about the centroids is kept between calls: an in-place change between two calls gives the new
    answers."""
    x, c = clustered(2000, 300, dim=128, seed=13)
    first = backend.nearest(x, c)[0]
    assert_assignment(backend, first, x, c)
    c[first[:50]] *= -1.0  # the nearest centroids of 50 rows now point away
    second = backend.nearest(x, c)[0]
    assert_assignment(backend, second, x, c)
    assert (second[:50] != first[:50]).all()


@pytest.mark.parametrize("backend", INDEX_BACKENDS, ids=_ids(INDEX_BACKENDS))
def test_a_kmeans_step_with_hints_is_the_step_without_them(backend):
    x, _ = clustered(3000, 64, seed=9)
    cent = x[:48].copy()
    fresh = backend.kmeans_step(x, cent)
    hinted = backend.kmeans_step(x, cent, hints=np.roll(fresh[0], 1))
    for a, b in zip(fresh, hinted, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", INDEX_BACKENDS, ids=_ids(INDEX_BACKENDS))
def test_kmeans_is_seeded_and_exact_backends_give_the_reference_centroids(backend):
    x, _ = clustered(8000, 64, seed=4)
    a = kmeans.train_centroids(x, 64, niters=4, seed=5, backend=backend)
    np.testing.assert_array_equal(a, kmeans.train_centroids(x, 64, niters=4, seed=5, backend=backend))
    assert a.shape == (64, 64) and a.dtype == np.float16
    np.testing.assert_allclose(np.linalg.norm(a.astype(np.float32), axis=1), 1.0, atol=1e-3)
    ref = kmeans.train_centroids(x, 64, niters=4, seed=5, backend=Backend())
    if backend.exact_assignment:
        np.testing.assert_array_equal(a, ref)

    def fit(cent):
        cent = cent.astype(np.float32)
        return (x * cent[reference.nearest(x, cent)[0]]).sum(1).mean()

    assert fit(a) >= fit(ref) - 0.01


def _search_inputs(seed: int = 0, nbits: int = 2):
    rng = np.random.default_rng(seed)
    x, c = clustered(2000, 64, dim=64, seed=seed)
    codec = train_codec(c.astype(np.float16), x[:500], nbits, backend=Backend())
    codes, packed = codec.compress(x, Backend())
    norms = codec.norms(codes, packed, Backend())
    Q = clustered(32, 8, dim=64, seed=seed + 1)[0]
    ST = Q @ codec.centroids_f32().T
    lens = rng.integers(1, 40, size=80)
    lens = lens[np.cumsum(lens) <= len(x)]
    n = int(lens.sum())
    return Q, ST, codec, codes[:n], packed[:n], norms[:n], lens.astype(np.int64)


def _maxsim_bound(backend, Q, codec, packed, norms) -> float:
    """How far a backend's MaxSim may be from the reference's per document: bf16 ~1e-3 a token similarity;
    fp16 each table entry rounded (relative 2^-11), an entry at most (dims a byte holds) x max|Q| x max|weight|,
    nbytes entries a similarity, divided by its norm; fp32 the same terms summed in another order."""
    if backend.precision == "bf16":
        return 2e-3 * len(Q)
    if backend.precision == "fp16":
        per_byte = Q.shape[1] // packed.shape[1]
        entry = per_byte * float(np.abs(Q).max()) * float(np.abs(codec.bucket_weights).max())
        return 1e-5 + len(Q) * packed.shape[1] * entry * 2.0 ** -11 / float(np.min(norms))
    return 1e-5


@pytest.mark.parametrize("backend", SEARCH_BACKENDS, ids=_ids(SEARCH_BACKENDS))
def test_centroid_interactions_against_the_reference(backend):
    Q, ST, codec, codes, _, _, lens = _search_inputs(1)
    counts = np.concatenate([lens[:5], [0], lens[5:]])  # an empty segment scores -inf
    np.testing.assert_allclose(backend.segment_maxsum(ST, codes, counts), reference.segment_maxsum(ST, codes, counts),
                               rtol=1e-6, atol=1e-6)
    slots = np.random.default_rng(2).integers(-1, 30, size=len(codes))  # -1: not a candidate, skipped
    np.testing.assert_array_equal(backend.scatter_max_rows(ST, codes, slots, 30),
                                  reference.scatter_max_rows(ST, codes, slots, 30))


@pytest.mark.parametrize("backend", SEARCH_BACKENDS, ids=_ids(SEARCH_BACKENDS))
@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_maxsim_against_the_reference(backend, nbits):
    Q, ST, codec, codes, packed, norms, lens = _search_inputs(nbits, nbits)
    want = reference.maxsim(Q, codec.centroids_f32(), codes, packed, norms, lens, codec.bucket_weights, nbits)
    tables = backend.search_tables(codec.centroids_f32(), codec.bucket_weights, nbits)
    got = backend.maxsim(tables, Q, ST, codes, packed, norms, lens)
    np.testing.assert_allclose(got, want, rtol=0, atol=_maxsim_bound(backend, Q, codec, packed, norms))


@pytest.mark.parametrize("backend", SEARCH_BACKENDS, ids=_ids(SEARCH_BACKENDS))
@pytest.mark.parametrize("m", [1, 7, 64, 300])
def test_row_top_against_the_reference(backend, m):
    # the best centroids of each query token, best first; exact ties (coarse scores, a constant row) to the
    # smaller column, as a stable sort of -ST
    rng = np.random.default_rng(m)
    ST = np.concatenate([rng.standard_normal((6, 1000)), np.round(rng.standard_normal((6, 1000)), 1),
                         np.zeros((1, 1000))]).astype(np.float32)
    want = np.argsort(-ST, axis=1, kind="stable")[:, :m]
    np.testing.assert_array_equal(reference.row_top(ST, m), want)
    np.testing.assert_array_equal(backend.row_top(ST, m), want)
    Q, ST, *_ = _search_inputs(5)  # real scores, every column
    np.testing.assert_array_equal(backend.row_top(ST, ST.shape[1]), np.argsort(-ST, axis=1, kind="stable"))


def _csr(lens: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
    """Offsets [num_docs + 1] of documents of ``lens`` rows, and some pids (unsorted, repeated) among them."""
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return offsets, rng.integers(0, len(lens), size=2 * len(lens)).astype(np.int64)


@pytest.mark.parametrize("backend", SEARCH_BACKENDS, ids=_ids(SEARCH_BACKENDS))
def test_doc_maxsum_against_the_reference(backend):
    # the stage-4 centroid interaction read in place from CSR lists: an empty list scores -inf
    Q, ST, codec, codes, _, _, lens = _search_inputs(3)
    lens = np.concatenate([lens[:4], [0], lens[4:]])
    offsets, pids = _csr(lens, np.random.default_rng(4))
    codes = codes.astype(np.int32)
    got = backend.doc_maxsum(ST, codes, offsets, pids)
    np.testing.assert_array_equal(got, reference.doc_maxsum(ST, codes, offsets, pids))
    np.testing.assert_array_equal(got, reference.segment_maxsum(ST, np.concatenate([codes[offsets[p]:offsets[p + 1]]
                                                                                     for p in pids]), lens[pids]))
    assert np.isneginf(got[pids == 4]).all()


@pytest.mark.parametrize("backend", SEARCH_BACKENDS, ids=_ids(SEARCH_BACKENDS))
@pytest.mark.parametrize("nbits", [1, 2, 4])
@pytest.mark.parametrize("norm_dtype", [np.float16, np.float32])
def test_maxsim_docs_against_the_reference_and_the_gathered_path(backend, nbits, norm_dtype):
    # the stage-5 MaxSim read in place (no gathered copies): the reference's values within the backend's
    # bound, and the very bits of the backend's own maxsim on the gathered rows
    Q, ST, codec, codes, packed, norms, lens = _search_inputs(nbits + 5, nbits)
    lens[3] = 300  # a document longer than one tile of the fused kernel
    lens = lens[np.cumsum(lens) <= len(codes)]
    norms = norms.astype(norm_dtype)
    offsets, pids = _csr(lens, np.random.default_rng(nbits))
    want = reference.maxsim_docs(Q, codec.centroids_f32(), codes, packed, norms, offsets, pids, codec.bucket_weights,
                                 nbits)
    tables = backend.search_tables(codec.centroids_f32(), codec.bucket_weights, nbits)
    got = backend.maxsim_docs(tables, Q, ST, codes, packed, norms, offsets, pids)
    np.testing.assert_allclose(got, want, rtol=0, atol=_maxsim_bound(backend, Q, codec, packed, norms))
    idx = np.concatenate([np.arange(offsets[p], offsets[p + 1]) for p in pids])
    np.testing.assert_array_equal(got, backend.maxsim(tables, Q, ST, codes[idx], packed[idx], norms[idx], lens[pids]))


def test_fused_kernels_refuse_bad_ids():
    if not native_backend.available():
        pytest.skip("the C kernels were not built")
    from embedctl.index.plaid import search_kernels

    Q, ST, codec, codes, packed, norms, lens = _search_inputs(2)
    offsets, pids = _csr(lens, np.random.default_rng(0))
    st_t = np.ascontiguousarray(ST.T)
    bad = codes.astype(np.int32).copy()
    bad[offsets[pids[0]]] = len(st_t)  # a centroid id past the end
    with pytest.raises(ValueError, match="centroid ids"):
        search_kernels.doc_maxsum(st_t, bad, offsets, pids)
    lut = np.zeros((packed.shape[1], 256, len(Q)), np.float32)
    with pytest.raises(ValueError, match="centroid ids"):
        search_kernels.maxsim_lut_docs(lut, packed, st_t, bad, norms, offsets, pids)
    with pytest.raises(ValueError, match="pids"):
        search_kernels.doc_maxsum(st_t, codes.astype(np.int32), offsets, np.array([len(lens)]))
    with pytest.raises(ValueError, match="offsets"):
        search_kernels.maxsim_lut_docs(lut, packed[:5], st_t, codes[:5].astype(np.int32), norms[:5], offsets, pids)


def test_choosing_a_backend():
    assert index_backend("cpu", "auto", "reference").describe() == {"name": "reference", "precision": "exact"}
    assert index_backend("cuda", "auto", "auto").name == "torch"
    assert search_backend("cpu", "fp32", "reference").name == "reference"
    with pytest.raises(ConfigError, match="index.assign_precision"):
        index_backend("cpu", "int4")
    with pytest.raises(ConfigError, match="search.backend"):
        search_backend("cpu", "auto", "gpu")
    with pytest.raises(ConfigError, match="`index.backend` = torch runs on a GPU"):
        index_backend("cpu", "auto", "torch")
    if native_backend.available():
        auto = index_backend("cpu", "auto")
        assert auto.name == "native" and auto.precision in native_backend.runnable_precisions("index")
        assert index_backend("cpu", "fp32").describe() == {"name": "native", "precision": "fp32"}
    else:
        assert index_backend("cpu", "auto").name == "reference"
        with pytest.raises(ConfigError, match="were not built"):
            index_backend("cpu", "auto", "native")


@pytest.mark.skipif(not native_backend.available(), reason="C kernels not built")
def test_a_precision_the_cpu_cannot_run_is_refused():
    missing = [p for p in ("int16", "int8", "bf16") if p not in native_backend.runnable_precisions("index")]
    for precision in missing:
        with pytest.raises(ConfigError, match="this CPU cannot run it"):
            index_backend("cpu", precision)


@pytest.mark.parametrize("amx", [False, True])
@pytest.mark.parametrize("table_fast", [False, True])
def test_search_precision_auto_is_fp16_where_its_table_is_fast_amx_or_not(monkeypatch, amx, table_fast):
    """bf16 is chosen only when asked for: on a 2-core AMX host a whole search took 1.4-1.7x fp32's time in it
    (bench/results/x86_64-amx-2c/search_precision.json)."""
    from embedctl.index.plaid import kernels, search_kernels

    monkeypatch.setattr(kernels, "amx_available", lambda: amx)
    monkeypatch.setattr(search_kernels, "float16_table_fast", lambda: table_fast)
    assert native_backend.search_precision("auto") == ("fp16" if table_fast else "fp32")
    assert native_backend.search_precision("bf16") == "bf16"
