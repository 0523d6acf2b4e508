"""`embedctl evaluate` on a tiny hand-checked ranking, in every file format, plus its bad inputs."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from embedctl.cli.main import app
from embedctl.eval.io import format_run, read_qrels, read_run, write_run

runner = CliRunner()

# String ids. qA ranks doc-1, doc-2, doc-3: relevant doc-2 (rel 1) at rank 2, doc-3 (rel 2) at rank 3.
# qB ranks its only relevant doc first. qC is judged and never ranked; q-unjudged is ignored.
RANKING = [
    ("qA", [("doc-1", 3.0), ("doc-2", 2.0), ("doc-3", 1.0)]),
    ("qB", [("b/7", 5.5), ("b/8", 4.5)]),
    ("q-unjudged", [("doc-1", 1.0)]),
]
BEIR_QRELS = "query-id\tcorpus-id\tscore\nqA\tdoc-2\t1\nqA\tdoc-3\t2\nqB\tb/7\t1\nqC\tdoc-1\t1\n"
TREC_QRELS = "qA 0 doc-2 1\nqA 0 doc-3 2\nqA 0 doc-1 0\nqB 0 b/7 1\nqC 0 doc-1 1\n"

# By hand: qA DCG = 1/log2(3) + 2/log2(4); ideal = 2/log2(2) + 1/log2(3). qB: 1. qC: 0.
NDCG_A = (1 / math.log2(3) + 1.0) / (2 + 1 / math.log2(3))
EXPECTED = {
    "nDCG@10": (NDCG_A + 1.0) / 3,
    "MRR@10": (1 / 2 + 1.0) / 3,
    "Recall@10": 2 / 3,
    "Recall@100": 2 / 3,
    "map": ((1 / 2 + 2 / 3) / 2 + 1.0) / 3,
    "P_1": 1 / 3,
}


@pytest.fixture(params=["colbert", "trec"])
def files(tmp_path, request):
    run = tmp_path / f"run.{request.param}"
    write_run(str(run), RANKING, fmt=request.param)
    beir = tmp_path / "qrels.tsv"
    beir.write_text(BEIR_QRELS)
    trec = tmp_path / "qrels.trec"
    trec.write_text(TREC_QRELS)
    return run, beir, trec


def test_json_output_matches_hand_computed(files):
    run, beir, trec = files
    for qrels in (beir, trec):
        res = runner.invoke(app, ["evaluate", "--run", str(run), "--qrels", str(qrels), "--json",
                                  "--measure", "map", "-m", "P.1"])
        assert res.exit_code == 0, res.output
        got = json.loads(res.stdout.strip().splitlines()[-1])
        assert list(got)[:4] == ["nDCG@10", "MRR@10", "Recall@10", "Recall@100"]
        assert got == pytest.approx(EXPECTED, abs=1e-6)


def test_table_output(files):
    run, beir, _ = files
    res = runner.invoke(app, ["evaluate", "--run", str(run), "--qrels", str(beir)])
    assert res.exit_code == 0, res.output
    for name in ("nDCG@10", "MRR@10", "Recall@10", "Recall@100"):
        assert name in res.stdout
    assert f"{EXPECTED['MRR@10']:.4f}" in res.stdout



def test_several_runs_side_by_side(files, tmp_path):
    run, beir, _ = files
    perfect = tmp_path / "perfect.tsv"
    write_run(str(perfect), [("qA", [("doc-3", 2.0), ("doc-2", 1.0)]), ("qB", [("b/7", 1.0)]),
                             ("qC", [("doc-1", 1.0)])], fmt="colbert")
    res = runner.invoke(app, ["evaluate", "--run", str(run), "--run", str(perfect), "--qrels", str(beir), "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert list(got) == [str(run), str(perfect)]
    assert got[str(run)]["MRR@10"] == pytest.approx(EXPECTED["MRR@10"])
    assert got[str(perfect)] == pytest.approx({"nDCG@10": 1.0, "MRR@10": 1.0, "Recall@10": 1.0, "Recall@100": 1.0})
    table = runner.invoke(app, ["evaluate", "--run", str(run), "--run", str(perfect), "--qrels", str(beir)],
                          env={"COLUMNS": "250"})
    assert table.exit_code == 0 and "1.0000" in table.stdout and f"{EXPECTED['MRR@10']:.4f}" in table.stdout

def test_run_io_round_trip(tmp_path):
    path = tmp_path / "r.tsv"
    assert write_run(str(path), RANKING) == 6
    assert path.read_text().splitlines()[0] == "qA\tdoc-1\t1\t3"
    assert read_run(str(path)) == {q: dict(h) for q, h in RANKING}
    three = tmp_path / "ranks_only.tsv"
    three.write_text("q\td1\t1\nq\td2\t2\n")
    assert read_run(str(three)) == {"q": {"d1": -1.0, "d2": -2.0}}
    qrels = tmp_path / "q.trec"
    qrels.write_text(TREC_QRELS)
    assert read_qrels(str(qrels))["qA"] == {"doc-2": 1, "doc-3": 2, "doc-1": 0}
    assert list(format_run([("q", [("d", 1.5)])], fmt="trec")) == ["q Q0 d 1 1.5 embedctl\n"]


BAD = [
    ("run", "qA\tdoc-1\t1\t3.0\nqA\tdoc-2\tx\t2.0\n", "run.tsv:2: rank 'x' is not an integer"),
    ("run", "qA\tdoc-1\t1\t3.0\nqA\tdoc-1\t2\t2.0\n", "run.tsv:2: query 'qA' ranks document 'doc-1' twice"),
    ("run", "qA\tdoc-1\t1\t3.0\nqA\tdoc-2\t2\n", "run.tsv:2: expected 4 fields"),
    ("run", "qA\tdoc-1\n", "run.tsv:1: expected a ColBERT ranking"),
    ("run", "qA\tdoc-1\t1\tnan\n", "score 'nan' is not a finite number"),
    ("run", "", "the ranking is empty"),
    ("qrels", "query-id\tcorpus-id\tscore\nqA\tdoc-2\thigh\n", "qrels.tsv:2: relevance 'high' is not an integer"),
    ("qrels", "qA 0 doc-2 1\nqA 0 doc-2 2\n", "qrels.tsv:2: query 'qA', document 'doc-2' is labelled twice"),
    ("qrels", "query-id\tcorpus-id\tscore\n", "no qrels rows"),
]


@pytest.mark.parametrize("which,text,message", BAD)
def test_bad_files_name_file_and_line(tmp_path, which, text, message):
    run, qrels = tmp_path / "run.tsv", tmp_path / "qrels.tsv"
    write_run(str(run), RANKING)
    qrels.write_text(BEIR_QRELS)
    (run if which == "run" else qrels).write_text(text)
    res = runner.invoke(app, ["evaluate", "--run", str(run), "--qrels", str(qrels)])
    assert res.exit_code == 1
    assert message in " ".join(res.output.split())


def test_missing_file_unknown_measure_and_disjoint_queries(tmp_path):
    run, qrels = tmp_path / "run.tsv", tmp_path / "qrels.tsv"
    write_run(str(run), RANKING)
    qrels.write_text(BEIR_QRELS)
    res = runner.invoke(app, ["evaluate", "--run", str(tmp_path / "nope.tsv"), "--qrels", str(qrels)])
    assert res.exit_code == 1 and "nope.tsv: file not found" in res.output
    res = runner.invoke(app, ["evaluate", "--run", str(run), "--qrels", str(qrels), "-m", "ndgc_cut_10"])
    assert res.exit_code == 1 and "unknown measure 'ndgc_cut_10'" in res.output
    qrels.write_text("query-id\tcorpus-id\tscore\nother\tdoc-1\t1\n")
    res = runner.invoke(app, ["evaluate", "--run", str(run), "--qrels", str(qrels)])
    assert res.exit_code == 1 and "none of the 3 queries" in " ".join(res.output.split())
