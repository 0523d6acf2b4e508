"""The lexical side and hybrid search through the CLI and the API (real `minilm`, real bm25s), and kill -9
during an add: vectors, fields and the lexical side always on the same version."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.lifecycle import invoke

import embedctl
from embedctl.errors import EmbedctlError
from embedctl.index.fields import segment_fields
from embedctl.index.files import plaid_chunk_files
from embedctl.index.generations import open_generation
from embedctl.index.lexical import LexicalSegment
from embedctl.util.failpoints import FAILPOINT_ENV

REPO = Path(__file__).resolve().parents[2]
TEXTS = ["Vitamin C deficiency causes scurvy in sailors.", "The moon drives the ocean tides.",
         "Lava flows from erupting volcanoes.", "Jazz musicians improvise over chord changes.",
         "Proteins fold into three-dimensional shapes.", "Mitochondria produce energy in cells.",
         "Glaciers carve fjords over thousands of years.", "Bees dance to show where flowers are."]


def corpus(path: Path, n: int = 24) -> Path:
    rows = [{"_id": f"d{i}", "text": f"{TEXTS[i % 8]} Note {i}.", "year": 2000 + i} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def dense(module_tmp):
    work = module_tmp("lexical")
    return work, embedctl.Index.build(corpus(work / "c.jsonl"), work / "idx", overrides=["index.batch_size=16"])


def test_lexical_and_hybrid_through_the_api(dense):
    _, idx = dense
    lexical = idx.search("scurvy sailors", k=5, mode="lexical")
    assert {h.id for h in lexical} == {"d0", "d8", "d16"} and all("scurvy" in h.text for h in lexical)
    assert [h.score for h in lexical] == sorted((h.score for h in lexical), reverse=True)
    neural = idx.search("scurvy sailors", k=5)
    for fusion in ("rrf", "score"):
        hybrid = embedctl.Index.open(idx.path, overrides=[f"search.fusion={fusion}"], encoder=idx.encoder)
        hits = hybrid.search("scurvy sailors", k=5, mode="hybrid")
        assert len(hits) == 5 and hits[0].id in {h.id for h in lexical} | {h.id for h in neural}
    # rrf: under score fusion the weakest lexical hit normalises to 0, tied with documents it did not find
    only_lexical = embedctl.Index.open(idx.path, overrides=["search.hybrid_weight=0", "search.fusion=rrf"],
                                       encoder=idx.encoder)
    assert [h.id for h in only_lexical.search("scurvy sailors", k=3, mode="hybrid")] == [h.id for h in lexical[:3]]
    assert [h.id for h in idx.search("scurvy", k=5, mode="lexical", filter="year > 2010")] == ["d16"]
    ranked = idx.rank_file(write_queries(dense[0]), k=3, mode="hybrid", filter={"field": "year", "op": ">=",
                                                                                  "value": 2008})
    assert [q for q, _ in ranked] == ["q1", "q2"] and all(int(h.id[1:]) >= 8 for _, hits in ranked for h in hits)
    with pytest.raises(EmbedctlError, match="unknown search mode 'fuzzy'"):
        idx.search("x", mode="fuzzy")


def write_queries(work: Path) -> Path:
    path = work / "q.tsv"
    path.write_text("q1\tscurvy in sailors\nq2\tvolcano lava\n", encoding="utf-8")
    return path


def test_lexical_and_hybrid_through_the_cli(dense, tmp_path):
    work, idx = dense
    res = invoke("search", "volcano lava", "--index", str(idx.path), "--mode", "hybrid", "--json", "-k", "3")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.splitlines()[0])
    assert out["mode"] == "hybrid" and len(out["hits"]) == 3 and "lexical" in out["backend"]
    assert out["hits"][0]["fields"]["year"] in (2002, 2010, 2018)
    res = invoke("search", "--index", str(idx.path), "--queries", str(write_queries(work)), "--mode", "lexical",
                 "--output", str(tmp_path / "run.tsv"))
    assert res.exit_code == 0 and "bm25s" in res.output
    assert (tmp_path / "run.tsv").read_text().splitlines()[0].split("\t")[:3] == ["q1", "d0", "1"]
    res = invoke("search", "x", "--index", str(idx.path), "search.mode=fuzzy")
    assert res.exit_code == 2
    # index.kind=lexical: the BM25 side alone; index.lexical=false: none
    lex = tmp_path / "lex"
    assert invoke("index", "--collection", str(work / "c.jsonl"), "--root", str(tmp_path), "--name", "lex",
                  "index.kind=lexical").exit_code == 0
    assert not (lex / "dense.faiss").exists() and (lex / "lexical" / "data.npy").is_file()
    res = invoke("search", "glaciers fjords", "--index", str(lex), "--json", "-k", "2")
    assert res.exit_code == 0 and json.loads(res.stdout.splitlines()[0])["hits"][0]["id"] in ("d6", "d14", "d22")
    res = invoke("search", "glaciers", "--index", str(lex), "--mode", "hybrid")
    assert res.exit_code == 2 and "lexical only" in res.output
    assert invoke("index", "--collection", str(work / "c.jsonl"), "--root", str(tmp_path), "--name", "nolex",
                  "index.lexical=false", "index.batch_size=16").exit_code == 0
    res = invoke("search", "glaciers", "--index", str(tmp_path / "nolex"), "--mode", "lexical")
    assert res.exit_code == 2 and "has no lexical side" in res.output


def consistent(index: Path) -> int:
    """Every segment's rows, fields, lexical side and vectors agree; returns the version."""
    import faiss

    gen = open_generation(index)
    for seg in gen.segments:
        assert segment_fields(gen, seg).table.num_rows == seg.rows
        assert LexicalSegment(index, seg.rel("lexical"), seg.rows).rows == seg.rows
        if seg.plaid is not None:
            doclens = [np.load(gen.path(seg.rel(f"plaid/{plaid_chunk_files(i)['doclens']}")))
                       for i in range(len(seg.plaid["chunks"]))]
            assert sum(c["num_passages"] for c in seg.plaid["chunks"]) == sum(map(len, doclens)) == seg.rows
        else:
            assert faiss.read_index(str(gen.path(seg.rel("dense.faiss")))).ntotal == seg.rows
        assert set(seg.files()) <= set(gen.files or {})
    return gen.number


def _kill_during_add(built: Path, encoder, index: Path, phases: tuple[str, ...], extra: list[str]) -> None:
    """Copy the index ``built`` to ``index``; `index add` of one document killed at each of ``phases`` leaves
    vectors, fields and the lexical side on the old version (none of them sees it); then a whole add moves
    all three to the next version, and verify is clean."""
    import shutil

    shutil.copytree(built, index)
    new = index.parent / "new.jsonl"
    new.write_text(json.dumps({"_id": "n1", "text": "Penguins huddle in the Antarctic winter.", "year": 1990}) + "\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "embedctl", "index", "add", "--index", str(index), "--collection", str(new), *extra]
    for phase in phases:
        killed = subprocess.run(cmd, env={**env, FAILPOINT_ENV: phase}, capture_output=True, text=True, timeout=300)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert consistent(index) == 0
        opened = embedctl.Index.open(index, encoder=encoder)
        assert opened.search("penguins", k=3, mode="lexical") == []
        assert opened.search("penguins", k=3, filter="year < 2000") == []
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert consistent(index) == 1
    opened = embedctl.Index.open(index, encoder=encoder)
    assert [h.id for h in opened.search("penguins", k=3, mode="lexical")] == ["n1"]
    assert [h.id for h in opened.search("penguins", k=3, filter="year < 2000")] == ["n1"]
    assert np.isfinite(opened.search("penguins", k=1, mode="hybrid")[0].score)
    assert opened.info(verify=True)["verify"] == []


@pytest.mark.slow
def test_kill_9_during_an_add_leaves_vectors_fields_and_lexical_on_one_version(dense, tmp_path):
    _, idx = dense
    _kill_during_add(idx.path, idx.encoder, tmp_path / "idx", ("add:encoded", "add:segment-written"), [])


@pytest.fixture(scope="module")
def plaid16(module_tmp):
    from support.lifecycle import COLBERT, INCREMENTAL

    work = module_tmp("lexical-plaid")
    return embedctl.Index.build(corpus(work / "c.jsonl", 16), work / "idx", overrides=[*COLBERT, *INCREMENTAL])


@pytest.mark.slow
def test_kill_9_during_a_plaid_add_leaves_vectors_fields_and_lexical_on_one_version(plaid16, tmp_path):
    """The same on a PLAID index, killed after a chunk of the new segment is written and after the segment."""
    from support.lifecycle import INCREMENTAL

    _kill_during_add(plaid16.path, plaid16.encoder, tmp_path / "idx", ("add:chunk-written", "add:segment-written"),
                     list(INCREMENTAL))


@pytest.mark.slow
def test_kill_9_during_a_reclustering_add_leaves_vectors_fields_and_lexical_on_one_version(plaid16, tmp_path):
    """The same for an add that re-clusters (one new segment of every document: new centroids, chunks, fields
    and lexical side), killed after its first chunk."""
    _kill_during_add(plaid16.path, plaid16.encoder, tmp_path / "idx", ("add:recluster-chunk-written",), [])
