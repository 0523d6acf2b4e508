"""Indexes that live (PLAID, the real `minilm` as a ColBERT): add, update, delete, compact and info through the
CLI and the Python API; search sees one generation and never a tombstoned document; colbert-ai's
IndexUpdater defects (#369, #343, #261) as regression tests of ours."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from support.lifecycle import (
    COLBERT,
    INCREMENTAL,
    Searcher,
    build_base,
    copy_index,
    invoke,
    tree_digest,
    write_tsv,
)

from embedctl.errors import EmbedctlError
from embedctl.index import add_documents, compact_index, delete_documents, index_info
from embedctl.index.generations import open_generation
from embedctl.index.update import UpdateOptions
from embedctl.search.plaid import PlaidSearcher

NEW = [("n1", "Sailors on long voyages got scurvy until lemons brought them vitamin C."),
       ("n2", "Penguins huddle together through the Antarctic winter.")]
QUIET = UpdateOptions(progress=False, recluster_below_docs=0)  # the incremental add (support.lifecycle)


@pytest.fixture(scope="module")
def base(module_tmp):
    return build_base(module_tmp("lifecycle"))


@pytest.fixture(scope="module")
def searcher():
    return Searcher()


@pytest.fixture()
def index(base, tmp_path):
    return copy_index(base, tmp_path / "indexes" / "idx")


def test_add_then_search_finds_the_new_document_and_info_counts_it(index, tmp_path, searcher):
    res = invoke("index", "add", "--index", str(index), "--collection", str(write_tsv(tmp_path / "new.tsv", NEW)),
                 *INCREMENTAL)
    assert res.exit_code == 0, res.output
    assert "added 2, updated 0, unchanged 0 document(s)" in res.stderr and "version 1: 42 documents" in res.stderr
    assert searcher.ids(index, "penguins in the antarctic winter", 3)[0] == "n2"
    assert searcher.ids(index, "scurvy on long sea voyages", 3)[0] == "n1"
    res = invoke("index", "info", "--index", str(index), "--json")
    info = json.loads(res.stdout)
    assert {k: info[k] for k in ("documents", "deleted", "segments", "version")} == {
        "documents": 42, "deleted": 0, "segments": 2, "version": 1}
    assert info["bytes"] > 0 and info["model"] == "minilm" and info["backend"]["name"] in ("native", "reference")
    # the same add again: nothing new to encode, no new version
    res = invoke("index", "add", "--index", str(index), "--collection", str(tmp_path / "new.tsv"), *INCREMENTAL)
    assert res.exit_code == 0 and "unchanged 2" in res.stderr and res.stderr.rstrip().endswith("unchanged")
    assert open_generation(index).number == 1


def test_update_returns_the_new_text_and_delete_never_returns_it(index, searcher):
    topic = "mitochondria in cells"
    assert "d3" in searcher.ids(index, topic, 10)
    summary = add_documents(index, [("d3", "Document 3 now describes glaciers carving fjords.")], options=QUIET,
                            encoder=searcher.encoder)
    assert (summary["added"], summary["updated"], summary["documents"]) == (0, 1, 40)
    session = searcher.session(index)
    assert session.search(["glaciers carving fjords"], 3)[0][0][0] == "d3"
    pid = int(session.search_pids(["glaciers carving fjords"], 1)[0][0][0])
    assert "glaciers" in session.docs.snippets([pid])[0]
    assert [i for i, _ in session.search([topic], 1000)[0]].count("d3") <= 1  # the old row is tombstoned
    summary = delete_documents(index, ["d3", "d11", "not-there"])
    assert (summary["deleted"], summary["unknown"], summary["documents"]) == (2, ["not-there"], 38)
    for query in ("glaciers carving fjords", topic, "the BM25 ranking function"):
        for extra in ((), ("search.exhaustive=true",)):
            ids = searcher.ids(index, query, 1000, *extra)  # k larger than the index
            assert "d3" not in ids and "d11" not in ids
    exhaustive = searcher.ids(index, "document", 1000, "search.exhaustive=true")
    assert len(exhaustive) == 38 and len(set(exhaustive)) == 38


def test_add_after_delete_after_add(index, searcher):
    add_documents(index, NEW[:1], options=QUIET, encoder=searcher.encoder)
    delete_documents(index, ["n1"])
    assert "n1" not in searcher.ids(index, "scurvy on long sea voyages", 50, "search.exhaustive=true")
    summary = add_documents(index, NEW, options=QUIET, encoder=searcher.encoder)
    assert (summary["added"], summary["generation"], summary["segments"]) == (2, 3, 3)
    assert searcher.ids(index, "scurvy on long sea voyages", 3)[0] == "n1"
    assert searcher.ids(index, "penguins in the antarctic winter", 3)[0] == "n2"


def test_delete_cli_unknown_ids_strict_and_no_subcommand_key(index, tmp_path):
    ids = tmp_path / "ids.txt"
    ids.write_text("d1\n\nnope\n")
    res = invoke("index", "delete", "--index", str(index), "--ids", str(ids), "--strict")
    assert res.exit_code == 1 and "1 of 2 id(s) are not in the index" in res.stderr and "'nope'" in res.stderr
    assert open_generation(index).number == 0, "--strict deletes nothing"
    res = invoke("index", "delete", "--index", str(index), "--ids", str(ids), "--id", "d2")
    assert res.exit_code == 0, res.output
    assert "deleted 2 of 3 id(s)" in res.stderr and "1 not in the index: 'nope'" in res.stderr
    assert index_info(index)["deleted"] == 2
    # the subcommand is not a config key: the old spelling is an unknown key (exit 2), nothing deleted
    res = invoke("index", "index.mode=delete", f"index.root={index.parent}", "index.name=idx", "index.delete_ids=[d5]")
    assert res.exit_code == 2 and "index.mode" in res.stderr, res.output
    assert index_info(index)["deleted"] == 2


def test_compact_gives_the_same_results_and_a_fresh_builds_size(index, searcher):
    add_documents(index, NEW, options=QUIET, encoder=searcher.encoder)
    delete_documents(index, [f"d{i}" for i in range(0, 40, 3)])
    queries = ["scurvy on long sea voyages", "jazz improvisation", "volcanoes and lava", "document 7"]
    before = [searcher.hits(index, q, 10, "search.exhaustive=true") for q in queries]
    res = invoke("index", "compact", "--index", str(index))
    assert res.exit_code == 0, res.output
    assert "compacted 2 segment(s) into 1, removed 14 deleted row(s)" in res.stderr
    info = index_info(index)
    assert (info["documents"], info["deleted"], info["segments"]) == (28, 0, 1)
    after = [searcher.hits(index, q, 10, "search.exhaustive=true") for q in queries]
    for b, a in zip(before, after, strict=True):  # codes copied as they were: the same documents, same scores
        assert [i for i, _ in b] == [i for i, _ in a]
        np.testing.assert_allclose([s for _, s in b], [s for _, s in a], rtol=1e-6)
    # the compacted generation's arrays hold its live rows only: smaller than the 40-document build's
    gen, built = open_generation(index), open_generation(index, 0)
    arrays = sum(gen.path(f).stat().st_size for f in gen.referenced() if "/plaid/" in f and "segments/" in f)
    built_arrays = sum(built.path(f).stat().st_size for f in built.referenced()
                       if f.startswith("plaid/") and "centroids" not in f and "bucket" not in f and "avg_" not in f)
    assert 0 < arrays < built_arrays
    assert compact_index(index)["changed"] is False  # nothing left to compact


def test_concurrent_writer_is_refused(index):
    hold = ("import sys, time; from embedctl.util.lock import WriterLock\n"
            "with WriterLock(sys.argv[1], what='index'):\n    print('held', flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", hold, str(index)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        res = invoke("index", "delete", "--index", str(index), "--id", "d1")
        assert res.exit_code == 1 and "another writer holds" in res.stderr and f"pid {proc.pid}" in res.stderr
        with pytest.raises(EmbedctlError, match="another writer holds"):
            compact_index(index)
    finally:
        proc.kill()
        proc.wait()
    assert open_generation(index).number == 0 and index_info(index)["deleted"] == 0


def test_verify_and_search_name_a_corrupted_array_and_a_resized_one(index):
    delete_documents(index, ["d1"])
    res = invoke("index", "info", "--index", str(index), "--verify")
    assert res.exit_code == 0 and "every file matches its sha256" in res.stderr
    codes = index / "plaid" / "0.codes.npy"
    data = bytearray(codes.read_bytes())
    data[-1] ^= 0xFF  # same size, other content
    codes.write_bytes(bytes(data))
    res = invoke("index", "info", "--index", str(index), "--verify", "--json")
    assert res.exit_code == 1 and "0.codes.npy: content differs from the recorded sha256" in res.stderr
    with pytest.raises(EmbedctlError, match=r"0\.codes\.npy: content differs from the recorded sha256"):
        PlaidSearcher(index)  # search reads every file against its sha256 too (tests/index/test_integrity.py)
    data[-1] ^= 0xFF
    codes.write_bytes(bytes(data))
    norms = index / "plaid" / "0.norms.npy"
    arr = np.load(norms)
    np.save(norms, np.concatenate([arr, arr[:1]]))  # a readable .npy of another length
    with pytest.raises(EmbedctlError, match=r"0\.norms\.npy: \d+ bytes, recorded \d+"):
        PlaidSearcher(index)
    np.save(norms, arr)
    ivf = index / "plaid" / "ivf.npy"
    ivf.write_bytes(ivf.read_bytes() + b"\0" * 8)  # the same header, trailing bytes
    with pytest.raises(EmbedctlError, match=r"ivf\.npy: \d+ bytes, recorded \d+"):
        PlaidSearcher(index)


def test_colbert_ai_369_add_never_asserts_on_any_document(index, searcher):
    """colbert-ai #369: IndexUpdater.add raised AssertionError (its doclens / embeddings bookkeeping). Here an
    add of documents of every length (one token, past doc_max_length, non-ASCII) just works."""
    docs = [("tiny", "a"), ("long", " ".join(["word"] * 500)), ("uni", "naïve café — 東京 🚀")]
    assert add_documents(index, docs, options=QUIET, encoder=searcher.encoder)["added"] == 3
    assert "uni" in searcher.ids(index, "naïve café 東京", 50, "search.exhaustive=true")


def test_add_indexes_an_empty_document_as_the_build_does(index, tmp_path):
    """A collection row with no title and no text (public BEIR collections have them) is added as an empty
    text, as `embedctl index` indexes one: never fatal."""
    path = tmp_path / "with_empty.jsonl"
    path.write_text(json.dumps({"_id": "e1", "title": "", "text": ""}) + "\n"
                    + json.dumps({"_id": "e2", "title": "", "text": "Krill swarm under the sea ice."}) + "\n")
    res = invoke("index", "add", "--index", str(index), "--collection", str(path), *INCREMENTAL)
    assert res.exit_code == 0, res.output
    assert "added 2" in res.stderr


def test_colbert_ai_343_add_works_more_than_once(index, searcher):
    """colbert-ai #343: a second IndexUpdater.add did nothing (or broke the index). Five adds in a row here,
    each searchable at once and all of them afterwards."""
    texts = ["Penguins huddle in the Antarctic winter.", "Sourdough needs a lively starter.",
             "Chess openings: the Sicilian defence.", "Black holes bend light.", "Bees dance to share directions."]
    for i, text in enumerate(texts):  # (the untrained minilm head ranks short texts loosely: top 3, not top 1)
        add_documents(index, [(f"a{i}", text)], options=QUIET, encoder=searcher.encoder)
        assert f"a{i}" in searcher.ids(index, text, 3)
    assert open_generation(index).number == 5 and index_info(index)["documents"] == 45
    for i, text in enumerate(texts):
        assert f"a{i}" in searcher.ids(index, text, 3)


def test_colbert_ai_261_results_are_the_same_after_persist_and_reopen(index, searcher):
    """colbert-ai #261: results after persist_to_disk differed from those before. Here every change is on disk
    when it returns: a searcher opened before the change keeps its generation, one opened after (in this
    process or through the CLI) sees exactly the new one."""
    old = searcher.session(index)
    old_hits = old.search(["penguins in the antarctic winter"], 5)[0]
    add_documents(index, NEW, options=QUIET, encoder=searcher.encoder)
    assert old.search(["penguins in the antarctic winter"], 5)[0] == old_hits  # a reader is never disturbed
    here = searcher.hits(index, "penguins in the antarctic winter", 5)
    res = invoke("search", "penguins in the antarctic winter", "--index", str(index), "--json", "-k", "5",
                 "search.threads=1")
    fresh = [(h["id"], h["score"]) for h in json.loads(res.stdout)["hits"]]
    assert [i for i, _ in here] == [i for i, _ in fresh] and here[0][0] == "n2"
    np.testing.assert_allclose([s for _, s in here], [s for _, s in fresh], rtol=1e-5)


def test_symlinked_index_is_overwritten_where_it_points(base, tmp_path):
    real = copy_index(base, tmp_path / "disk" / "real")
    root = tmp_path / "indexes"
    root.mkdir()
    (root / "linked").symlink_to(real)
    coll = write_tsv(tmp_path / "c.tsv", NEW)
    for _ in range(2):  # twice: the second run meets the index the first one wrote
        res = invoke("index", "--collection", str(coll), "--root", str(root), "--name", "linked", "--overwrite",
                     *COLBERT)
        assert res.exit_code == 0, res.output
        assert (root / "linked").is_symlink() and index_info(root / "linked")["documents"] == 2
        assert (root / "LATEST").read_text().strip() == "linked"
        assert sorted(p.name for p in root.iterdir()) == ["LATEST", "linked"]
        assert sorted(p.name for p in real.parent.iterdir()) == ["real"]  # no .real.old, no .real.building


def test_refused_runs_leave_nothing(tmp_path, base):
    coll = write_tsv(tmp_path / "c.tsv", NEW)
    res = invoke("index", "--collection", str(coll), "--root", str(tmp_path / "idx"), "--nbits", "3", *COLBERT)
    assert res.exit_code != 0 and "nbits" in res.stderr
    assert not (tmp_path / "idx").exists()
    before = tree_digest(base)
    res = invoke("index", "add", "--index", str(base), "--collection", str(tmp_path / "missing.tsv"))
    assert res.exit_code == 1 and "missing.tsv" in res.stderr
    res = invoke("index", "delete", "--index", str(tmp_path / "nope"), "--id", "x")
    assert res.exit_code == 1 and "no index at" in res.stderr
    assert tree_digest(base) == before and not list(base.parent.glob("*.lock"))
