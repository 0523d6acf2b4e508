"""`embedctl search` end to end with the real embedded model on a SciFact slice, plus its bad input.

One dense index is built per module (cwd = a temp folder, default index.root), then searched the way a user
would: one query with no flag, --json, --queries --output (ColBERT and TREC), --qrels, and `evaluate`.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from support.scifact_slice import write_slice
from typer.testing import CliRunner

from embedctl.cli.main import app
from embedctl.index import meta as M

pytestmark = pytest.mark.slow  # one real index per module (~30 s on 2 busy cores)
FAST = ["model.doc_max_length=128"]
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def workdir(module_tmp, scifact):
    work = module_tmp("search")
    paths = write_slice(scifact, work / "data", num_docs=200, num_queries=20)
    old = os.getcwd()
    os.chdir(work)
    try:
        res = invoke("index", "--collection", "data/corpus.jsonl", *FAST)
    finally:
        os.chdir(old)
    assert res.exit_code == 0, res.output
    return work, paths


@pytest.fixture()
def in_workdir(workdir, monkeypatch):
    monkeypatch.chdir(workdir[0])
    return workdir


def first_query(paths) -> tuple[str, str, set[str]]:
    q = json.loads(paths["queries"].read_text().splitlines()[0])
    rel = {line.split("\t")[1] for line in paths["qrels"].read_text().splitlines()[1:] if line.split("\t")[0] == q["_id"]}
    return q["_id"], q["text"], rel


def test_one_query_with_no_flag_prints_a_table(in_workdir):
    work, paths = in_workdir
    _, text, relevant = first_query(paths)
    res = invoke("search", text)
    assert res.exit_code == 0, res.output
    assert f"index: {work / 'indexes' / 'corpus'}" in res.stderr
    for column in ("rank", "id", "score", "text"):
        assert column in res.stdout
    assert any(doc_id in res.stdout for doc_id in relevant)  # an easy slice: a relevant doc is in the top 10


def test_json_single_query(in_workdir):
    work, paths = in_workdir
    _, text, relevant = first_query(paths)
    res = invoke("search", text, "-k", "3", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["query"] == text and out["kind"] == "dense" and out["k"] == 3
    assert out["backend"]["search"] == {"name": "faiss", "precision": "fp32"}
    assert [h["rank"] for h in out["hits"]] == [1, 2, 3]
    scores = [h["score"] for h in out["hits"]]
    assert scores == sorted(scores, reverse=True)
    corpus_ids = {json.loads(line)["_id"] for line in paths["corpus"].read_text().splitlines()}
    assert all(isinstance(h["id"], str) and h["id"] in corpus_ids and h["text"] for h in out["hits"])


def test_batch_ranking_evaluate_and_qrels(in_workdir):
    work, paths = in_workdir
    res = invoke("search", "--queries", "data/queries.jsonl", "--output", "run.tsv", "-k", "100")
    assert res.exit_code == 0, res.output
    lines = (work / "run.tsv").read_text().splitlines()
    assert len(lines) == 20 * 100
    qid, pid, rank, score = lines[0].split("\t")
    assert rank == "1" and float(score) > 0
    res = invoke("evaluate", "--run", "run.tsv", "--qrels", "data/qrels.tsv", "--json")
    assert res.exit_code == 0, res.output
    metrics = json.loads(res.stdout)
    assert metrics["nDCG@10"] > 0.5 and metrics["Recall@100"] == 1.0  # 200 docs: every relevant one is in 100

    res = invoke("search", "--queries", "data/queries.jsonl", "--output", "run.trec", "-k", "100", "--format", "trec")
    assert res.exit_code == 0, res.output
    assert (work / "run.trec").read_text().splitlines()[0].split()[1] == "Q0"
    trec = json.loads(invoke("evaluate", "--run", "run.trec", "--qrels", "data/qrels.tsv", "--json").stdout)
    assert trec == pytest.approx(metrics, abs=1e-6)

    res = invoke("search", "--queries", "data/queries.jsonl", "--qrels", "data/qrels.tsv", "-k", "100", "--json",
                 "search.metrics=[map]")
    assert res.exit_code == 0, res.output
    direct = json.loads(res.stdout.strip().splitlines()[-1])
    assert direct.pop("map") > 0 and direct == pytest.approx(metrics, abs=1e-6)


def test_k_beyond_the_collection_returns_fewer_rows(in_workdir):
    work, paths = in_workdir
    res = invoke("search", "--queries", "data/queries.jsonl", "--output", "all.tsv", "-k", "500")
    assert res.exit_code == 0, res.output
    lines = (work / "all.tsv").read_text().splitlines()
    assert len(lines) == 20 * 200 and max(int(line.split("\t")[2]) for line in lines) == 200


@pytest.mark.parametrize("query", ["", "   \t  ", "\u200b\u200b"])
def test_query_without_tokens(in_workdir, query):
    res = invoke("search", query)
    assert res.exit_code == 1
    assert "has no tokens the model can read" in res.stderr


def _copy_index(work, name):
    src = work / "indexes" / "corpus"
    dst = work / "indexes" / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return dst


def _edit_meta(index, change):
    path = index / "embedctl_index.json"
    meta = json.loads(path.read_text())
    change(meta)
    path.write_text(json.dumps(M.seal(meta)))  # as if a build had written it so (an edit alone is refused)


def test_index_from_another_model_or_format_is_refused(in_workdir):
    work, _ = in_workdir
    other = _copy_index(work, "other-model")
    _edit_meta(other, lambda m: m["model"].__setitem__("weights", "0" * 32))
    res = invoke("search", "scurvy", "--index", str(other))
    assert res.exit_code == 1
    assert "was built with another model" in res.stderr and "weights" in res.stderr and "--overwrite" in res.stderr

    tok = _copy_index(work, "other-tokenizer")
    _edit_meta(tok, lambda m: m["model"]["tokenizer"].__setitem__("query_max_length", 99))
    res = invoke("search", "scurvy", "--index", "other-tokenizer")  # a name under index.root works too
    assert res.exit_code == 1 and "tokenization changed" in res.stderr

    old = _copy_index(work, "old-format")
    _edit_meta(old, lambda m: m.__setitem__("format_version", 0))
    res = invoke("search", "scurvy", "--index", str(old))
    assert res.exit_code == 1 and "version 0" in res.stderr and "this embedctl reads" in res.stderr

    res = invoke("search", "scurvy", "--index", str(work / "indexes" / "corpus"), f"model.name_or_path={work}")
    assert res.exit_code == 1 and "was built with model 'minilm'" in res.stderr


def test_missing_unfinished_and_no_index(in_workdir, tmp_path, monkeypatch):
    work, _ = in_workdir
    res = invoke("search", "scurvy", "--index", str(work / "nowhere"))
    assert res.exit_code == 1 and "not an embedctl index" in res.stderr and "embedctl index --collection" in res.stderr
    (work / "indexes" / ".half.building").mkdir(exist_ok=True)
    res = invoke("search", "scurvy", "--index", str(work / "indexes" / "half"))
    assert res.exit_code == 1 and "never finished" in res.stderr and "resumes" in res.stderr
    monkeypatch.chdir(tmp_path)
    res = invoke("search", "scurvy")
    assert res.exit_code == 1 and "no index found under" in res.stderr


def test_usage_errors(in_workdir):
    res = invoke("search")
    assert res.exit_code == 2 and "nothing to search" in res.stderr
    res = invoke("search", "--queries", "data/queries.jsonl")
    assert res.exit_code == 2 and "--output" in res.stderr
    res = invoke("search", "--queries", "data/queries.jsonl", "--output", "data/queries.jsonl")
    assert res.exit_code == 2 and "would be overwritten" in res.stderr
    res = invoke("search", "scurvy", "-k", "0")
    assert res.exit_code == 2 and "search.k" in res.stderr  # a range checked when the config loads


def test_a_query_and_a_queries_file_the_command_line_wins(in_workdir):
    """A shipped config names its test queries (search.queries): `embedctl search CONFIG "text"` searches the
    text, with a note; a file given on the command line beside a config's search.query ranks the file."""
    work, paths = in_workdir
    (work / "batch.yaml").write_text("search:\n  queries: data/queries.jsonl\n  output: file-run.tsv\n")
    (work / "one.yaml").write_text("search:\n  query: what causes scurvy\n")
    _, text, _ = first_query(paths)
    res = invoke("search", "batch.yaml", text)
    assert res.exit_code == 0, res.output
    assert "rank" in res.stdout and not (work / "file-run.tsv").exists()
    assert "search.queries=data/queries.jsonl (file batch.yaml) is not used" in res.stderr
    res = invoke("search", "one.yaml", "--queries", "data/queries.jsonl", "--output", "one-run.tsv")
    assert res.exit_code == 0, res.output
    assert len((work / "one-run.tsv").read_text().splitlines()) == 20 * 10
    assert "search.query (file one.yaml) is not used" in res.stderr
    # both for this run, or both from the same file: which one was meant is unknowable
    res = invoke("search", text, "--queries", "data/queries.jsonl", "--output", "x.tsv")
    assert res.exit_code == 2 and "not both (the query: command line; search.queries=data/queries.jsonl: " \
        "command line)" in res.stderr.replace("\n", " ")
    (work / "both.yaml").write_text("search:\n  query: scurvy\n  queries: data/queries.jsonl\n")
    res = invoke("search", "both.yaml", "--output", "x.tsv")
    assert res.exit_code == 2 and "file both.yaml" in res.stderr and not (work / "x.tsv").exists()


def test_queries_without_tokens_are_named_by_line_and_ranked(in_workdir):
    """An empty query (or one the tokenizer reads nothing of) is ranked as sentence-transformers encodes ""
    with a warning naming its line; a malformed line still fails naming it, before any output."""
    work, _ = in_workdir
    (work / "bad_queries.tsv").write_text("q1\tvitamin c\nq2\t\n")
    res = invoke("search", "--queries", "bad_queries.tsv", "--output", "x.tsv")
    assert res.exit_code == 0 and "query 'q2' ('', bad_queries.tsv:2)" in res.stderr
    (work / "bad_queries.tsv").write_text("q1\tvitamin c\nq2\tscurvy\nq3\t\u200b\u200b\n")
    res = invoke("search", "--queries", "bad_queries.tsv", "--output", "x.tsv")
    assert res.exit_code == 0 and "bad_queries.tsv:3)" in res.stderr and "no tokens" in res.stderr
    assert {line.split("\t")[0] for line in (work / "x.tsv").read_text().splitlines()} == {"q1", "q2", "q3"}
    (work / "bad_queries.tsv").write_text("q1\tvitamin c\nq2 without a tab\n")
    res = invoke("search", "--queries", "bad_queries.tsv", "--output", "y.tsv")
    assert res.exit_code == 1 and "bad_queries.tsv:2:" in res.stderr and "--on-error" not in res.stderr
    assert not (work / "y.tsv").exists()


def test_plaid_index_search_and_exhaustive_reference(tmp_path, scifact, monkeypatch):
    """A ColBERT model (minilm + seeded projection) picks PLAID by default; ids stay strings end to end."""
    paths = write_slice(scifact, tmp_path / "data", num_docs=100, num_queries=10)
    monkeypatch.chdir(tmp_path)
    colbert = ["model.kind=colbert", "model.doc_max_length=128"]
    res = invoke("index", "--collection", "data/corpus.jsonl", "--name", "colb", *colbert)
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "indexes" / "colb" / "embedctl_index.json").read_text())
    assert meta["kind"] == "plaid" and meta["num_docs"] == 100 and meta["plaid"]["nbits"] == 2
    _, text, _ = first_query(paths)
    out = json.loads(invoke("search", text, "-k", "5", "--json").stdout)
    assert out["kind"] == "plaid" and len(out["hits"]) == 5
    # the index names the backend that built it; search reports it beside its own, and a note when they differ
    assert meta["backend"]["name"] in ("native", "reference") and out["backend"]["index"] == meta["backend"]
    assert "note" not in out["backend"]
    ref = json.loads(invoke("search", text, "-k", "5", "--json", "search.backend=reference").stdout)
    assert ref["backend"]["search"] == {"name": "reference", "precision": "exact"}
    if meta["backend"]["name"] != "reference":
        assert "searched by the reference backend" in ref["backend"]["note"]
    assert [h["id"] for h in ref["hits"]] == [h["id"] for h in out["hits"]]  # the same answer on either backend
    table = invoke("search", text, "-k", "5")
    assert f"(index built by {meta['backend']['name']}" in table.stderr
    corpus_ids = {json.loads(line)["_id"] for line in paths["corpus"].read_text().splitlines()}
    assert {h["id"] for h in out["hits"]} <= corpus_ids
    got = {}
    generous = ["search.ncells=1000", "search.centroid_score_threshold=-10", "search.ndocs=100000"]
    for mode, knobs in (("default", []), ("generous", generous), ("exhaustive", ["search.exhaustive=true"])):
        res = invoke("search", "--queries", "data/queries.jsonl", "--output", f"{mode}.tsv", "-k", "10",
                     "--qrels", "data/qrels.tsv", "--json", *knobs)
        assert res.exit_code == 0, res.output
        got[mode] = json.loads(res.stdout.strip().splitlines()[-1])
    # the search.* PLAID knobs reach the searcher: with generous ones PLAID ranks exactly like exhaustive MaxSim
    assert (tmp_path / "generous.tsv").read_text() == (tmp_path / "exhaustive.tsv").read_text()
    assert got["generous"] == got["exhaustive"] and got["default"]["nDCG@10"] > 0.3
