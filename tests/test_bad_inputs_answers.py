"""Issue 18, section 2 ("answers that look right and are not"): each case a row (arguments, expected exit
code, a fragment of the message or warning), run as a real `python -m embedctl` subprocess against one
real dense index of a SciFact slice whose corpus holds an empty document (title and text empty).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.scifact_slice import write_slice

pytestmark = pytest.mark.slow  # one real index and a dozen real subprocesses

FAST = ["model.doc_max_length=64"]


def embedctl(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run([sys.executable, "-m", "embedctl", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.fixture(scope="module")
def work(tmp_path_factory, scifact):
    work = tmp_path_factory.mktemp("answers")
    paths = write_slice(scifact, work / "data", num_docs=60, num_queries=8)
    with open(paths["corpus"], "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"_id": "empty-doc", "title": "", "text": ""}) + "\n")
    queries = [json.loads(line) for line in paths["queries"].read_text().splitlines()]
    (work / "odd_queries.tsv").write_text(f"{queries[0]['_id']}\t{queries[0]['text']}\nq-empty\t\nq-punct\t?!...\n")
    qrels = [line.split("\t") for line in paths["qrels"].read_text().splitlines()[1:]]
    header = "query-id\tcorpus-id\tscore\n"
    (work / "other_qrels.tsv").write_text(header + "".join(f"{q}\tX{d}\t{s}\n" for q, d, s in qrels))
    (work / "partial_qrels.tsv").write_text(header + "".join(
        f"{q}\t{d if i == 0 else 'X' + d}\t{s}\n" for i, (q, d, s) in enumerate(qrels)))
    res = embedctl(work, "index", "--collection", "data/corpus.jsonl", *FAST)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "1 document(s) of data/corpus.jsonl have no title and no text: indexed as empty texts" in res.stderr
    return work


# (case, arguments, exit code, fragment expected on stderr (or stdout for metrics))
ROWS = [
    ("empty query in a queries file: warned by line, ranked",
     ["search", "--queries", "odd_queries.tsv", "--output", "odd.tsv"], 0,
     "no tokens the model can read: ranked on the special tokens alone"),
    ("punctuation-only query in a queries file: warned by line",
     ["search", "--queries", "odd_queries.tsv", "--output", "odd.tsv"], 0, "'?!...', odd_queries.tsv:3)"),
    ("punctuation-only single query: warned",
     ["search", "?!"], 0, "1 query has only punctuation"),
    ("empty single query: refused, nothing to rank",
     ["search", ""], 1, "the query has no tokens the model can read"),
    ("qrels of another collection (no relevant document in the index): refused",
     ["search", "--queries", "data/queries.jsonl", "--qrels", "other_qrels.tsv"], 1,
     "relevant documents of other_qrels.tsv"),
    ("qrels mostly outside the index: warned with the overlap",
     ["search", "--queries", "data/queries.jsonl", "--qrels", "partial_qrels.tsv"], 0, "warning: qrels: 1 of "),
    ("evaluate: a ranking with none of the qrels' documents: refused",
     ["evaluate", "--run", "odd.tsv", "--qrels", "other_qrels.tsv"], 1, "are in any ranking of odd.tsv"),
    ("--qrels with -k below a measure's depth: the measure is left out, saying so",
     ["search", "--queries", "data/queries.jsonl", "--qrels", "data/qrels.tsv", "-k", "10"], 0,
     "Recall@100 left out: they read deeper than the 10 hits"),
    ("a model.* override the index's pinned settings ignore: said",
     ["search", "scurvy", "model.query_max_length=16"], 0,
     "model.query_max_length=16 (command line) is ignored: the index"),
]


@pytest.mark.parametrize("case, args, code, fragment", ROWS, ids=[r[0] for r in ROWS])
def test_answers(work, case, args, code, fragment):
    res = embedctl(work, *args)
    assert res.returncode == code, f"{case}: {res.stderr[-2000:]}"
    assert fragment in res.stderr + res.stdout, f"{case}: {res.stderr[-2000:]}"
    assert "Traceback" not in res.stderr


def test_empty_and_punctuation_queries_are_ranked(work):
    res = embedctl(work, "search", "--queries", "odd_queries.tsv", "--output", "odd.tsv", "-k", "5")
    assert res.returncode == 0, res.stderr
    ranked = {line.split("\t")[0] for line in (work / "odd.tsv").read_text().splitlines()}
    assert {"q-empty", "q-punct"} <= ranked and len(ranked) == 3


def test_qrels_without_k_retrieve_every_reported_depth(work):
    """Without -k, --qrels retrieves as deep as the deepest reported measure (Recall@100): the same metrics
    as an explicit -k 100, and Recall@100 is no longer Recall@10."""
    res = embedctl(work, "search", "--queries", "data/queries.jsonl", "--qrels", "data/qrels.tsv", "--json")
    assert res.returncode == 0, res.stderr
    auto = json.loads(res.stdout.strip().splitlines()[-1])
    res = embedctl(work, "search", "--queries", "data/queries.jsonl", "--qrels", "data/qrels.tsv", "--json",
                   "-k", "100")
    assert res.returncode == 0, res.stderr
    explicit = json.loads(res.stdout.strip().splitlines()[-1])
    assert auto == pytest.approx(explicit, abs=1e-9)
    assert auto["Recall@100"] == 1.0  # 61 documents: every relevant one is within 100 hits
    res = embedctl(work, "search", "--queries", "data/queries.jsonl", "--qrels", "data/qrels.tsv", "--json",
                   "-k", "10")
    assert "Recall@100" not in json.loads(res.stdout.strip().splitlines()[-1])


def test_the_empty_document_is_searchable(work):
    res = embedctl(work, "search", "--queries", "odd_queries.tsv", "--output", "all.tsv", "-k", "100")
    assert res.returncode == 0, res.stderr
    assert "empty-doc" in {line.split("\t")[1] for line in (work / "all.tsv").read_text().splitlines()}
