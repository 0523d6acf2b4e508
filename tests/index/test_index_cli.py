"""`embedctl index` end to end with the real embedded model: a SciFact slice, string ids, bad input."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.ledgerwatch import wait_for_chunks
from support.scifact_slice import write_slice
from typer.testing import CliRunner

from embedctl.cli.main import app
from embedctl.index import meta as M
from embedctl.index.build import default_name

FAST = ["model.doc_max_length=128"]  # shorter documents keep the test quick; recorded in the index
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def built(module_tmp, scifact):
    work = module_tmp("index")
    paths = write_slice(scifact, work / "data", num_docs=200, num_queries=20)
    res = invoke("index", "--collection", str(paths["corpus"]), "--root", str(work / "indexes"), *FAST)
    return work, paths, res


@pytest.mark.slow
def test_dense_index_of_a_scifact_slice(built):
    work, paths, res = built
    assert res.exit_code == 0, res.output
    index = work / "indexes" / "corpus"
    assert f"index: {index.resolve()}" in res.stderr
    meta = json.loads((index / "embedctl_index.json").read_text())
    assert (meta["format"], meta["format_version"], meta["kind"], meta["num_docs"]) == ("embedctl-index", M.FORMAT_VERSION,
                                                                                          "dense", 200)
    assert meta["backend"] == {"name": "faiss", "precision": "fp32", "encoder": "reference"}
    assert meta["request"]["index"]["kind"] == "auto"
    assert meta["model"]["name_or_path"] == "minilm" and meta["model"]["dim"] == 384
    assert meta["model"]["config"]["doc_max_length"] == 128 and meta["model"]["tokenizer"]["files"]
    assert meta["dense"]["type"] == "flat" and meta["dense"]["num_vectors"] == 200
    ids = pq.read_table(index / "docs.parquet").column("id").to_pylist()
    assert ids == [json.loads(line)["_id"] for line in paths["corpus"].read_text().splitlines()]
    assert (work / "indexes" / "LATEST").read_text().strip() == "corpus"
    for name in ("resolved_config.yaml", "overrides.yaml", "versions.json", "dense.faiss"):
        assert (index / name).is_file(), name
    assert not list((work / "indexes").glob(".*"))  # no build leftovers


@pytest.mark.slow
def test_existing_index_is_kept_without_overwrite(built):
    work, paths, _ = built
    meta = work / "indexes" / "corpus" / "embedctl_index.json"
    before = meta.read_bytes()
    res = invoke("index", "--collection", str(paths["corpus"]), "--root", str(work / "indexes"), *FAST)
    assert res.exit_code == 1
    assert "already holds an index; nothing was changed" in res.stderr and "--overwrite" in res.stderr
    assert meta.read_bytes() == before


def test_tsv_and_parquet_keep_string_ids_and_overwrite(tmp_path):
    tsv = tmp_path / "tiny.tsv"
    tsv.write_text("doc/α-1\tScurvy is caused by a lack of vitamin C.\tScurvy\n"
                   "x:2\tBM25 is a ranking function.\n"
                   "007\tThe leading zeros of this id must survive.\n", encoding="utf-8")
    root = str(tmp_path / "idx")
    res = invoke("index", "--collection", str(tsv), "--root", root, *FAST)
    assert res.exit_code == 0, res.output
    table = pq.read_table(tmp_path / "idx" / "tiny" / "docs.parquet").to_pydict()
    assert table["id"] == ["doc/α-1", "x:2", "007"]
    assert table["title"] == ["Scurvy", None, None]

    parquet = tmp_path / "tiny.parquet"
    pq.write_table(pa.table({"id": ["b-1", "a-2"], "text": ["first text", "second text"]}), parquet)
    res = invoke("index", "--collection", str(parquet), "--root", root, "--name", "tiny", "--overwrite", *FAST)
    assert res.exit_code == 0, res.output
    assert pq.read_table(tmp_path / "idx" / "tiny" / "docs.parquet").column("id").to_pylist() == ["b-1", "a-2"]
    assert json.loads((tmp_path / "idx" / "tiny" / "embedctl_index.json").read_text())["num_docs"] == 2
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == ["LATEST", "tiny"]


@pytest.mark.parametrize("dense_type,index_knob,search_knob", [
    ("ivf", "index.ivf_nlist=1", "search.nprobe=1"),
    ("hnsw", "index.hnsw_m=8", "search.hnsw_ef_search=16"),
])
def test_ivf_and_hnsw_through_the_cli(tmp_path, dense_type, index_knob, search_knob):
    tsv = tmp_path / "c.tsv"
    tsv.write_text("".join(f"d{i}\tdocument number {i} about topic {i % 7}\n" for i in range(40)))
    res = invoke("index", "--collection", str(tsv), "--root", str(tmp_path / "idx"), f"index.dense_type={dense_type}",
                 index_knob, *FAST)
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "idx" / "c" / "embedctl_index.json").read_text())
    assert meta["dense"]["type"] == dense_type
    res = invoke("search", "topic 3", "--index", str(tmp_path / "idx" / "c"), "--json", "-k", "5", search_knob,
                 "search.threads=1")
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)["hits"]
    assert 1 <= len(hits) <= 5 and all(h["id"].startswith("d") for h in hits)


BAD = [
    ("empty.jsonl", "", "empty.jsonl: the input holds no records"),
    ("dup.jsonl", '{"_id": "a", "text": "one"}\n{"_id": "b", "text": "two"}\n{"_id": "a", "text": "three"}\n',
     "dup.jsonl:3: duplicate id 'a' (first seen on line 1)"),
    ("broken.jsonl", '{"_id": "a", "text": "one"}\n{"_id": "b", "text": \n', "broken.jsonl:2:"),
    ("notext.tsv", "a\tfine\nb\n", "notext.tsv:2:"),
]


@pytest.mark.parametrize("name,content,message", BAD)
def test_bad_collections_fail_before_encoding(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    res = invoke("index", "--collection", str(path), "--root", str(tmp_path / "idx"))
    assert res.exit_code == 1, res.output
    assert message in " ".join(res.stderr.split())
    assert not (tmp_path / "idx").exists() or not list((tmp_path / "idx").iterdir())  # nothing half-written


def test_missing_collection_and_wrong_kind(tmp_path):
    res = invoke("index", "--collection", str(tmp_path / "nope.jsonl"), "--root", str(tmp_path / "idx"))
    assert res.exit_code == 1 and "nope.jsonl" in res.stderr
    res = invoke("index", "--root", str(tmp_path / "idx"))
    assert res.exit_code == 2 and "index.collection" in res.stderr
    tsv = tmp_path / "c.tsv"
    tsv.write_text("1\tsome text\n")
    res = invoke("index", "--collection", str(tsv), "--root", str(tmp_path / "idx"), "--kind", "plaid")
    assert res.exit_code == 2 and "a plaid index needs a ColBERT model" in " ".join(res.stderr.split())
    assert not (tmp_path / "idx").exists()  # a refused run leaves nothing, not even the index.root it made


def test_default_name():
    assert default_name("data/lotte.tsv.gz") == "lotte"
    assert default_name("s3://b/corpus.jsonl") == "corpus"
    assert default_name("runs/tokens/") == "tokens"
    assert Path(default_name("x.parquet")).name == "x"


@pytest.mark.slow
def test_token_cache_collection_matches_the_text_collection(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("tiny.jsonl").write_text("".join(json.dumps(d) + "\n" for d in [
        {"_id": "s-1", "title": "Scurvy", "text": "Scurvy is caused by a lack of vitamin C."},
        {"_id": "s-2", "text": "BM25 is a bag-of-words ranking function."},
        {"_id": "s-3", "text": "Mitochondria produce most of the cell's ATP."},
    ]))
    res = invoke("pretokenize", "--input", "tiny.jsonl", "--output", "tok", "--side", "documents", *FAST)
    assert res.exit_code == 0, res.output
    assert invoke("index", "--collection", "tiny.jsonl", "--name", "text", *FAST).exit_code == 0
    res = invoke("index", "--collection", "tok", "--name", "cache", *FAST)
    assert res.exit_code == 0, res.output
    assert pq.read_table("indexes/cache/docs.parquet").column("id").to_pylist() == ["s-1", "s-2", "s-3"]
    hits = {}
    for name in ("text", "cache"):
        out = invoke("search", "what causes scurvy", "--index", name, "--json")
        assert out.exit_code == 0, out.output
        hits[name] = [(h["id"], h["score"]) for h in json.loads(out.stdout)["hits"]]
    assert [i for i, _ in hits["text"]] == [i for i, _ in hits["cache"]]
    assert [s for _, s in hits["text"]] == pytest.approx([s for _, s in hits["cache"]], abs=1e-4)

    res = invoke("index", "--collection", "tok", "--name", "mismatch")  # default doc_max_length differs
    assert res.exit_code == 1
    assert "token cache was made with another tokenization" in res.stderr and "doc_max_length" in res.stderr
    assert not Path("indexes/mismatch").exists() and not Path("indexes/.mismatch.building").exists()


def _tree_digest(folder: Path) -> dict[str, str]:
    skip = {"embedctl_index.json", "overrides.yaml", "versions.json", "resolved_config.yaml"}  # timings, argv
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in skip and p.parent.name != "_work"}


@pytest.mark.slow
def test_plaid_index_killed_mid_build_resumes_to_the_same_index(tmp_path, scifact):
    """kill -9 of a real `embedctl index` after its first PLAID chunk; the rerun resumes and matches a clean build."""
    paths = write_slice(scifact, tmp_path / "data", num_docs=40, num_queries=5)
    args = ["index", "--collection", str(paths["corpus"]), "--root", str(tmp_path / "idx"), "model.kind=colbert",
            "model.doc_max_length=48", "index.chunk_size=8", "index.batch_size=4"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "embedctl", *args, "--name", "resumed"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    folder = tmp_path / "idx" / ".resumed.building"
    finished = wait_for_chunks(folder, 2, proc)  # the ledger records chunks 0 and 1
    assert finished, proc.stderr.read().decode() if proc.poll() is not None else "timed out"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "idx" / "resumed").exists()
    res = invoke("search", "scurvy", "--index", str(tmp_path / "idx" / "resumed"))
    assert res.exit_code == 1 and "never finished" in res.stderr

    # the rerun and the reference build run as fresh processes too: same torch thread count as the killed one
    # (an in-process run could inherit search.threads from another test, and float sums depend on threads)
    for name in ("resumed", "clean"):
        done = subprocess.run([sys.executable, "-m", "embedctl", *args, "--name", name], env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    meta = json.loads((tmp_path / "idx" / "resumed" / "embedctl_index.json").read_text())
    assert meta["build"]["resumed_chunks"] >= 2 and meta["num_docs"] == 40
    resumed, clean = _tree_digest(tmp_path / "idx" / "resumed"), _tree_digest(tmp_path / "idx" / "clean")
    assert sorted(resumed) == sorted(clean)
    assert [name for name in resumed if resumed[name] != clean[name]] == []


def test_fsspec_url_collection(tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    with fs.open("/embedctl-test/remote.tsv.gz", "wb", compression="gzip") as fh:
        fh.write(b"r-1\tVitamin C prevents scurvy.\nr-2\tFaiss searches dense vectors.\n")
    res = invoke("index", "--collection", "memory://embedctl-test/remote.tsv.gz", "--root", str(tmp_path / "idx"), *FAST)
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "idx" / "remote" / "embedctl_index.json").read_text())
    assert meta["collection"] == "memory://embedctl-test/remote.tsv.gz" and meta["num_docs"] == 2
    out = invoke("search", "scurvy", "--index", str(tmp_path / "idx" / "remote"), "--json", "-k", "1")
    assert json.loads(out.stdout)["hits"][0]["id"] == "r-1"
    fs.rm("/embedctl-test", recursive=True)
