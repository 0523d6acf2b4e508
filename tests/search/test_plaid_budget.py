"""PLAID's adaptive candidate budget (embedctl/search/plaid_budget.py, issue 36) and the filtered path's
cost model (issue 34), checked against exhaustive MaxSim (the reference) on small synthetic indexes."""

from __future__ import annotations

import numpy as np
import pytest
from support.synthetic import SyntheticEncoder

from embedctl.config.sections.index import IndexConfig
from embedctl.index.build import build_plaid_index
from embedctl.search.plaid import PlaidSearcher
from embedctl.search.plaid_budget import cells_by_size, choose_budget, table_params

DOCS = [f"passage {i}" for i in range(300)]


@pytest.fixture(scope="module")
def index(module_tmp):
    enc = SyntheticEncoder(dim=64, num_topics=96, mean_len=40)
    out = module_tmp("plaid-budget") / "idx"
    build_plaid_index(enc, DOCS, out, IndexConfig(nbits=2, chunk_size=150), progress=False)
    return enc, PlaidSearcher(out, precision="fp32")


def queries(enc, n=12):
    return [enc.query_for(DOCS[(i * 37) % len(DOCS)], seed=i) for i in range(n)]


def test_cells_by_cumulative_size():
    ST = np.array([[0.9, 0.8, 0.7, 0.1], [0.1, 0.2, 0.3, 0.95]], np.float32)
    sizes = np.array([5, 5, 5, 50])
    # token 0 needs cells 0, 1 (10 documents) to reach 8; token 1's best cell alone holds 50
    np.testing.assert_array_equal(cells_by_size(ST, sizes, 8, 1, 4), [2, 1])
    np.testing.assert_array_equal(cells_by_size(ST, sizes, 100, 1, 3), [3, 3])  # capped
    np.testing.assert_array_equal(cells_by_size(ST, sizes, 1, 2, 4), [2, 2])  # at least `least`


def test_threshold_never_drops_a_query_token():
    ST = np.array([[0.9, 0.2], [0.3, 0.38]], np.float32)  # the second token's best centroid scores 0.38
    b = choose_budget(ST, 10, np.array([10, 10]), 1000)
    assert b.threshold == pytest.approx(0.38) and b.adaptive == ("ncells", "centroid_score_threshold", "ndocs")
    assert b.ndocs >= table_params(10)[2]
    given = choose_budget(ST, 10, np.array([10, 10]), 1000, ncells=1, threshold=0.5, ndocs=256)
    assert given.threshold == 0.5 and given.ndocs == 256 and list(given.cells) == [1, 1] and given.adaptive == ()


def test_adaptive_default_equals_exhaustive_on_a_small_index(index):
    enc, s = index
    for Q in queries(enc):
        for k in (10, 100):
            pe, se = s.search(Q, k, exhaustive=True)
            pa, sa = s.search(Q, k)
            np.testing.assert_array_equal(pa[:10], pe[:10])
            np.testing.assert_allclose(sa[:10], se[:10], rtol=1e-5, atol=1e-5)


def test_explicit_keys_override_one_by_one(index):
    enc, s = index
    Q = queries(enc, 1)[0]
    s.search(Q, 10, ncells=3, candidates="plaid")
    assert s.last_params["ncells"] == 3 and s.last_params["adaptive"] == ["centroid_score_threshold", "ndocs"]
    s.search(Q, 10, ncells=3)  # auto: WARP's candidates take search.ncells as each token's cells
    assert s.last_params["candidates"] == "warp" and s.last_params["ncells"] == {"min": 3, "mean": 3.0, "max": 3}
    s.search(Q, 10, centroid_score_threshold=0.7, ndocs=32)  # auto: keys only PLAID's stages read select them
    assert s.last_params["centroid_score_threshold"] == 0.7 and s.last_params["ndocs"] == 32
    assert s.last_params["adaptive"] == ["ncells"]


def test_k_hits_whenever_k_documents_exist(index):
    enc, s = index
    for Q in queries(enc, 4):
        for kw in ({}, {"ncells": 1, "centroid_score_threshold": 10.0, "ndocs": 1}):
            pids, _ = s.search(Q, 250, **kw)  # more than any budget's candidates: every document scored
            assert len(pids) == 250 and len(set(pids.tolist())) == 250
        pe, _ = s.search(Q, 250, exhaustive=True)
        np.testing.assert_array_equal(s.search(Q, 250, ncells=1, centroid_score_threshold=10.0, ndocs=1)[0], pe)


@pytest.mark.parametrize("share,ndocs,path", [(0.25, None, "exact"), (0.5, None, "candidates"),
                                              (0.25, 64, "candidates"), (0.5, 64, "candidates")])
def test_filtered_top10_equals_exhaustive_filtered(index, share, ndocs, path):
    """A filter's documents scored exactly while that costs at most twice stage 5's work, else the candidate
    path: every allowed document ranked by centroid interaction and scored exactly from the best down (adaptive
    budget), or PLAID's candidates widened by 1 / selectivity (an explicit search.ndocs): the exact filtered
    top 10 (the reference: exhaustive MaxSim over the allowed documents)."""
    enc, s = index
    allowed = np.random.default_rng(1).random(s.num_docs) < share
    for Q in queries(enc):
        pe, _ = s.search(Q, 10, exhaustive=True, allowed=allowed)
        pf, _ = s.search(Q, 10, allowed=allowed, ndocs=ndocs)
        assert s.last_params["filter_path"] == path
        np.testing.assert_array_equal(pf, pe)
        assert allowed[pf].all() and len(pf) == 10


def test_filtered_candidate_path_scores_more_until_none_can_reach_the_top_k(index):
    """rank_allowed from a pool of only k documents: it keeps scoring in interaction order until no other
    allowed document could reach the top k, so it still returns the exact filtered top k (the reference), having
    scored fewer documents than exhaustive search for most queries."""
    enc, s = index
    rng = np.random.default_rng(2)
    scored = []
    for i, Q in enumerate(queries(enc)):
        allowed = rng.random(s.num_docs) < (0.3, 0.6, 0.9)[i % 3]
        pe, se = s.search_exhaustive(Q, 10, allowed=allowed)
        pr, sr = s.rank_allowed(s.as_query(Q), s.centroid_scores(s.as_query(Q)), allowed, 10, 10)
        np.testing.assert_array_equal(pr, pe)
        np.testing.assert_allclose(sr, se, rtol=1e-6)
        scored.append(s.last_params["filter_exact_docs"] / allowed.sum())
    assert np.median(scored) < 1
    few = np.zeros(s.num_docs, dtype=bool)
    few[[3, 7, 11]] = True  # fewer than k pass: all of them, best first
    Q = s.as_query(queries(enc, 1)[0])
    pids, _ = s.rank_allowed(Q, s.centroid_scores(Q), few, 10, 10)
    assert sorted(pids.tolist()) == [3, 7, 11]
    np.testing.assert_array_equal(pids, s.search_exhaustive(Q, 10, allowed=few)[0])
