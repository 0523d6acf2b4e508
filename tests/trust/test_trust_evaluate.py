"""Evaluate says what it can't know: a measure name that would abort pytrec_eval is refused before it is
called, a measure deeper than the ranking, queries with fewer hits than a measure reads and judged queries
with no relevant label are each named on stderr; the figures stay on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    run = tmp_path / "run.tsv"  # a top-2 ranking (q2: one hit)
    run.write_text("q1\td1\t1\t2.0\nq1\td2\t2\t1.0\nq2\td3\t1\t1.0\n")
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\nq2 0 d3 1\n")
    unlabelled = tmp_path / "unlabelled.txt"  # q2 judged, nothing relevant
    unlabelled.write_text("q1 0 d1 1\nq2 0 d3 0\n")
    return {"run": run, "qrels": qrels, "unlabelled": unlabelled}


CRASHERS = ["P_0", "ndcg_cut_0", "ndcg_cut_5,0", "success_0", "map_cut_0", "recall_0", "ndcg_5", "Rndcg_5",
            "relative_P_0", "nDCG@0", "nDCG@99999999999999999999", "P_99999999999999999999"]


@pytest.mark.parametrize("measure", CRASHERS)
def test_a_measure_that_would_abort_pytrec_eval_is_refused(files, cli, measure):
    res = cli("evaluate", "--run", str(files["run"]), "--qrels", str(files["qrels"]), "-m", measure)
    assert res.exit_code == 1, res.output
    assert f"measure {measure!r}" in res.output and "how to fix" in res.output


def test_p_0_in_a_real_process_exits_cleanly(files):
    """What used to abort the interpreter (C assertion, no message, the pipeline's status lost)."""
    res = subprocess.run([sys.executable, "-m", "embedctl", "evaluate", "--run", str(files["run"]), "--qrels",
                          str(files["qrels"]), "-m", "P_0"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 1, res.stderr
    assert "the depth '0' must be a whole number from 1 to" in res.stderr
    assert "Assertion" not in res.stderr


def test_cut_lists_and_plain_families_still_work(files, cli):
    res = cli("evaluate", "--run", str(files["run"]), "--qrels", str(files["qrels"]), "-m", "P_1,2", "--json")
    assert res.exit_code == 0, res.output
    assert '"P_1": 1.0' in res.output and '"P_2": 0.5' in res.output


def test_a_measure_deeper_than_the_ranking_is_named(files, cli):
    res = cli("evaluate", "--run", str(files["run"]), "--qrels", str(files["qrels"]), "-m", "ndcg_cut_100")
    assert res.exit_code == 0, res.output
    text = res.output.replace("\n", " ")
    assert "ndcg_cut_100" in text and "read(s) deeper than" in text and "at most 2 hit(s)" in text
    assert "lower bounds" in text


def test_fewer_hits_than_k_is_noted(files, cli, tmp_path):
    deep = tmp_path / "deep.tsv"  # q1 has 12 hits, q2 one: Recall@10 is answerable for q1 only
    deep.write_text("".join(f"q1\tx{i}\t{i + 1}\t{20 - i}\n" for i in range(12)) + "q2\td3\t1\t1.0\n")
    res = cli("evaluate", "--run", str(deep), "--qrels", str(files["qrels"]), "-m", "P_5")
    assert res.exit_code == 0, res.output
    assert "1 of 2 ranked queries have fewer than 10 hits" in res.output.replace("\n", " ")


def test_judged_queries_without_a_relevant_label_are_named(files, cli):
    res = cli("evaluate", "--run", str(files["run"]), "--qrels", str(files["unlabelled"]), "--json")
    assert res.exit_code == 0, res.output
    assert "1 of 2 judged queries" in res.output and "have no relevant document" in res.output


def test_json_stays_json_with_the_warnings_on_stderr(files):
    res = subprocess.run([sys.executable, "-m", "embedctl", "evaluate", "--run", str(files["run"]), "--qrels",
                          str(files["unlabelled"]), "-m", "ndcg_cut_100", "--json"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr
    metrics = json.loads(res.stdout, parse_constant=lambda c: pytest.fail(f"JSON holds {c}"))
    assert "ndcg_cut_100" in metrics
    assert "warning:" in res.stderr


@pytest.mark.parametrize("measure,key", [("iprec_at_recall_0.5", "iprec_at_recall_0.50"),
                                         ("Rprec_mult_0.5", "Rprec_mult_0.50"), ("P.5", "P_5"),
                                         ("ndcg_cut.10", "ndcg_cut_10")])
def test_decimal_parameters_and_dotted_depths_are_read(files, cli, measure, key):
    res = cli("evaluate", "--run", str(files["run"]), "--qrels", str(files["qrels"]), "-m", measure, "--json")
    assert res.exit_code == 0, res.output
    assert f'"{key}"' in res.output


def test_a_ranking_of_the_whole_collection_is_not_called_a_lower_bound():
    """`search --qrels` on an index of 32 documents ranks all 32: Recall@100 misses nothing, yet it was called a
    lower bound, "deeper than queries.jsonl" (the queries file named as the ranking). With the index's
    documents known, a whole-collection ranking gets no depth warning; a shorter one still does."""
    from embedctl.eval.coverage import note_what_cannot_be_known

    run = {"q1": {"d1": 2.0, "d2": 1.0, "d3": 0.5}, "q2": {"d3": 1.0, "d1": 0.5, "d2": 0.1}}
    qrels = {"q1": {"d1": 1}, "q2": {"d3": 1}}
    names = ["nDCG@10", "Recall@100"]
    assert note_what_cannot_be_known(run, qrels, names, run_name="r", qrels_name="q", collection_size=3) == []
    lines = note_what_cannot_be_known(run, qrels, names, run_name="r", qrels_name="q", collection_size=50)
    assert len(lines) == 1 and "nDCG@10, Recall@100 read(s) deeper than r" in lines[0]
    assert note_what_cannot_be_known(run, qrels, names, run_name="r", qrels_name="q") == lines
    run["q2"] = {"d3": 1.0}  # q2 ranked one of the 3 documents: its missing hits are real misses
    lines = note_what_cannot_be_known(run, qrels, ["P_2"], run_name="r", qrels_name="q", collection_size=3)
    assert lines == ["note: 1 of 2 ranked queries have fewer than 2 hits; the missing hits count as not relevant"]
