"""embedctl.eval.metrics against numbers computed by hand (trec_eval conventions)."""

from __future__ import annotations

import math

import pytest

from embedctl.errors import EmbedctlError
from embedctl.eval.metrics import DEFAULT_MEASURES, cut_run, evaluate_run, parse_measure, per_query

LOG2_3 = math.log2(3)

# q1: graded labels, d9 judged non-relevant; q2: its one relevant doc sits at rank 11; q3: not ranked at all.
QRELS = {"q1": {"d1": 1, "d3": 2, "d9": 0}, "q2": {"d5": 1}, "q3": {"d7": 1}}
RUN = {
    "q1": {"d2": 0.9, "d1": 0.8, "d3": 0.7, "d4": 0.6},
    "q2": {**{f"x{i:02d}": 1.0 - i / 100 for i in range(10)}, "d5": 0.5, "x99": 0.4},
    "unjudged": {"d1": 1.0},
}


def test_defaults_by_hand():
    got = evaluate_run(RUN, QRELS)
    assert list(got) == list(DEFAULT_MEASURES)
    # q1: DCG = 1/log2(3) + 2/log2(4); ideal = 2/log2(2) + 1/log2(3); q2, q3: 0 in the top 10.
    ndcg_q1 = (1 / LOG2_3 + 2 / 2) / (2 + 1 / LOG2_3)
    assert got["nDCG@10"] == pytest.approx(ndcg_q1 / 3)
    assert got["MRR@10"] == pytest.approx(0.5 / 3)      # q2's hit at rank 11 is cut away
    assert got["Recall@10"] == pytest.approx(1 / 3)
    assert got["Recall@100"] == pytest.approx(2 / 3)   # q1 and q2 complete, q3 unranked


def test_extra_trec_measures():
    got = evaluate_run(RUN, QRELS, [*DEFAULT_MEASURES, "map", "P_5", "P.10", "recip_rank"])
    ap_q1 = (1 / 2 + 2 / 3) / 2
    ap_q2 = 1 / 11
    assert got["map"] == pytest.approx((ap_q1 + ap_q2) / 3)
    assert got["P_5"] == pytest.approx((2 / 5) / 3)
    assert got["P_10"] == pytest.approx((2 / 10) / 3)
    assert got["recip_rank"] == pytest.approx((1 / 2 + 1 / 11) / 3)  # uncut, unlike MRR@10


def test_at_k_names_and_expanding_measures():
    got = evaluate_run(RUN, QRELS, ["nDCG@3", "MRR@1", "P@2", "P"])
    assert got["MRR@1"] == 0.0
    assert got["P@2"] == pytest.approx((1 / 2) / 3)
    assert {"P_5", "P_10", "P_1000"} <= set(got)
    ndcg3_q1 = (1 / LOG2_3 + 2 / 2) / (2 + 1 / LOG2_3)
    assert got["nDCG@3"] == pytest.approx(ndcg3_q1 / 3)


def test_ties_follow_trec_eval_order_when_cutting():
    # equal scores: trec_eval ranks docid "b" before "a"; MRR@1 must cut the same way
    run = {"q": {"a": 1.0, "b": 1.0}}
    assert list(cut_run(run, 1)["q"]) == ["b"]
    assert evaluate_run(run, {"q": {"b": 1}}, ["MRR@1"])["MRR@1"] == 1.0
    assert evaluate_run(run, {"q": {"a": 1}}, ["MRR@1"])["MRR@1"] == 0.0


def test_negative_labels_count_as_not_relevant():
    got = evaluate_run({"q": {"a": 2.0, "b": 1.0}}, {"q": {"a": -1, "b": 1}}, ["MRR@10"])
    assert got["MRR@10"] == 0.5


def test_per_query_values():
    rows = per_query(RUN, QRELS, ["MRR@10", "Recall@100"])
    assert set(rows) == {"q1", "q2", "q3"}
    assert rows["q1"]["MRR@10"] == 0.5 and rows["q2"]["Recall@100"] == 1.0 and rows["q3"]["Recall@100"] == 0.0


def test_bad_measure_and_empty_qrels():
    with pytest.raises(EmbedctlError, match="unknown measure 'ndgc@10'"):
        parse_measure("ndgc@10")
    with pytest.raises(EmbedctlError, match="depth"):
        parse_measure("nDCG@0")
    with pytest.raises(EmbedctlError, match="no judgments"):
        evaluate_run(RUN, {})
    with pytest.raises(EmbedctlError, match="finite"):
        evaluate_run({"q1": {"d1": float("nan")}}, QRELS)
