"""index.passages (embedctl/index/passages.py): long documents split by the model's tokens into
overlapping passages, indexed as rows; search returns documents at their best passage. Real minilm,
tiny corpora, both kinds."""

from __future__ import annotations

import json

import numpy as np
import pytest

import embedctl
from embedctl.errors import ConfigError, EmbedctlError
from embedctl.index.passages import best_per_document, split_text, window_starts

SHORT = 32  # model.doc_max_length: the long document's tail is far beyond it
TOPICS = ["vitamin C and scurvy", "the BM25 ranking function", "faiss and dense vectors", "mitochondria in cells",
          "protein folding", "ocean tides and the moon", "volcanoes and lava", "jazz improvisation"]
HEAD = "Ancient ships carried sailors across the oceans for months. " * 5
TAIL = "The secret ingredient is saffron harvested from crocus flowers in Kashmir."
TAIL_QUERY = "saffron harvested from crocus flowers in Kashmir"
KINDS = {"dense": [], "plaid": ["model.kind=colbert"]}


def corpus(path, extra=()):
    rows = [{"_id": f"d{i}", "text": f"Document {i} is about {TOPICS[i % len(TOPICS)]}.", "year": 2000 + i}
            for i in range(16)]
    rows.append({"_id": "long1", "text": HEAD + TAIL, "year": 1990})
    rows += list(extra)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def overrides(kind, passages=True, *more):
    return [*KINDS[kind], f"model.doc_max_length={SHORT}", f"index.passages={str(passages).lower()}",
            "index.passage_overlap=8", "index.recluster_below_docs=0", *more]


@pytest.fixture(scope="module", params=sorted(KINDS))
def built(request, module_tmp):
    work = module_tmp(f"passages-{request.param}")
    coll = corpus(work / "corpus.jsonl")
    return embedctl.Index.build(coll, work / "idx", overrides=overrides(request.param))


# -- the split (the reference) -------------------------------------------------------------------------
def test_windows_cover_every_token_with_the_overlap():
    for n, size, overlap in [(1, 4, 1), (4, 4, 1), (5, 4, 1), (100, 16, 4), (17, 16, 15), (33, 8, 0)]:
        starts = window_starts(n, size, overlap)
        covered = np.zeros(n, bool)
        for s in starts:
            covered[s:s + size] = True
        assert covered.all() and starts[0] == 0 and starts[-1] + size >= n
        assert all(b - a == size - overlap for a, b in zip(starts, starts[1:], strict=False))
        assert len(starts) == 1 or starts[-2] + size < n  # no window after one that reached the end


def test_split_text_keeps_characters_between_tokens_and_short_texts_whole():
    text = "alpha  beta, gamma delta"
    offsets = [(0, 5), (7, 11), (11, 12), (13, 18), (19, 24)]
    assert split_text(text, offsets, 5, 1) == [(0, text)]
    assert split_text(text, offsets, 3, 1) == [(0, "alpha  beta,"), (11, ", gamma delta")]


def test_best_per_document_keeps_each_document_once_at_its_best_passage():
    pids, scores = np.array([5, 6, 1, 7, 2]), np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    kept = best_per_document(pids, scores, ["a", "a", "b", "a", "c"], 2)
    assert kept[0].tolist() == [5, 1] and kept[1].tolist() == [0.9, 0.7]


# -- build and search ------------------------------------------------------------------------------------
def test_search_returns_documents_at_their_best_passage(built):
    info = built.info()
    assert info["documents"] == 17 == len(built) and info["passages"]["rows"] > 17
    assert info["passages"]["overlap"] == 8
    hits = built.search(TAIL_QUERY, k=5)
    assert hits[0].id == "long1" and TAIL in hits[0].text and hits[0].passage > 0
    assert HEAD.split(".")[0] not in hits[0].text.split("Kashmir")[-1]
    assert hits[1].passage == 0  # a short document is one passage
    # every document once, k of them whenever k exist (the engine is asked for more passages than k)
    every = built.search("ships sailing across the oceans", k=17)
    assert len(every) == 17 and len({h.id for h in every}) == 17
    assert [h.score for h in every] == sorted((h.score for h in every), reverse=True)


@pytest.mark.slow  # two builds / a build and four changes of a tiny index: ~10-20 s
def test_tail_of_a_long_document_is_found_with_passages_not_with_truncation(tmp_path):
    coll = corpus(tmp_path / "c.jsonl")
    truncated = embedctl.Index.build(coll, tmp_path / "t", overrides=overrides("dense", False))
    assert len(truncated.session.docs) == 17 and truncated.search(TAIL_QUERY, k=1)[0].passage is None
    assert truncated.search(TAIL_QUERY, k=1)[0].id != "long1"
    passages = embedctl.Index.build(coll, tmp_path / "p", overrides=overrides("dense"))
    assert passages.search(TAIL_QUERY, k=1)[0].id == "long1"


def test_search_json_shows_the_best_passage(built, cli):
    res = cli("search", "--index", str(built.path), TAIL_QUERY, "-k", "2", "--json")
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)["hits"]
    assert hits[0]["id"] == "long1" and hits[0]["passage"] > 0 and "saffron" in hits[0]["text"]
    assert hits[1]["passage"] == 0


def test_filters_and_lexical_search_act_on_documents(built):
    hits = built.search(TAIL_QUERY, k=5, filter="year < 2003")
    assert {h.id for h in hits} == {"long1", "d0", "d1", "d2"} and hits[0].id == "long1"
    assert all(h.fields["year"] < 2003 for h in hits)
    lexical = built.search("saffron crocus", k=5, mode="lexical")
    assert [h.id for h in lexical] == ["long1"] and "saffron" in lexical[0].text


# -- add, delete, compact ---------------------------------------------------------------------------------
@pytest.mark.slow  # two builds / a build and four changes of a tiny index: ~10-20 s
def test_add_update_delete_compact_act_on_all_passages(built, tmp_path):
    kind = built.kind
    idx = embedctl.Index.build(corpus(tmp_path / "c.jsonl"), tmp_path / "idx", overrides=overrides(kind))
    rows = len(idx.session.docs)
    long2 = "Quiet libraries hold old maps and letters. " * 6 + "Glaciers carve fjords along the Norwegian coast."
    added = idx.add([{"id": "long2", "text": long2, "year": 2020}])
    assert added["added"] == 1 and added["passages"] > 1 and len(idx) == 18
    hit = next(h for h in idx.search("Glaciers carve fjords along the Norwegian coast.", k=3) if h.id == "long2")
    assert hit.fields == {"year": 2020} and "fjords" in hit.text and hit.passage > 0
    assert idx.search("fjords Norwegian", k=3, mode="lexical")[0].id == "long2"
    assert idx.add([{"id": "long2", "text": long2, "year": 2020}])["changed"] is False  # same passages: no-op
    updated = idx.add([{"id": "long2", "text": long2.replace("Glaciers", "Rivers"), "year": 2020}])
    assert (updated["updated"], len(idx)) == (1, 18)
    assert idx.info()["deleted"] == added["passages"]  # every old passage tombstoned
    deleted = idx.delete(["long1"])
    assert deleted["deleted"] == 1 and len(idx) == 17
    assert "long1" not in [h.id for h in idx.search(TAIL_QUERY, k=17)]
    info = idx.compact()
    assert info["segments"] == 1 and idx.info(verify=True)["verify"] == []
    live_rows = len(idx.session.docs)
    assert live_rows == rows - (rows - 16) + updated["passages"]  # long1's passages gone, long2's new ones in
    assert idx.search("Rivers carve fjords", k=3, mode="lexical")[0].id == "long2" and len(idx) == 17
    assert "long2" in [h.id for h in idx.search("Rivers carve fjords along the Norwegian coast.", k=3)]


def test_an_add_with_other_passage_settings_is_refused(built):
    with pytest.raises(EmbedctlError, match="index.passage_overlap=4") as err:
        embedctl.Index.open(built.path, overrides=["index.passage_overlap=4"]).add([("x", "a text")])
    assert err.value.exit_code == 2
    with pytest.raises(EmbedctlError, match="index.passages=False"):
        embedctl.Index.open(built.path, overrides=["index.passages=false"]).add([("x", "a text")])


# -- bad settings -----------------------------------------------------------------------------------------
def test_bad_passage_settings_name_the_key(tmp_path, cli):
    coll = corpus(tmp_path / "c.jsonl")
    with pytest.raises(ConfigError, match=r"index.passage_overlap=16 must be less than index.passage_tokens=16"):
        embedctl.Index.build(coll, tmp_path / "a", overrides=["index.passages=true", "index.passage_tokens=16",
                                                              "index.passage_overlap=16"])
    with pytest.raises(ConfigError, match="index.passage_tokens"):
        embedctl.Index.build(coll, tmp_path / "b", overrides=["index.passage_tokens=0"])
    with pytest.raises(ConfigError, match="index.passage_overlap"):
        embedctl.Index.build(coll, tmp_path / "c", overrides=["index.passage_overlap=-1"])
    # null passage_tokens: the model's text budget (32 less 2 specials), checked once the model is known
    with pytest.raises(ConfigError, match=r"index.passage_overlap.*must be less than.*model.doc_max_length"):
        embedctl.Index.build(coll, tmp_path / "d", overrides=[f"model.doc_max_length={SHORT}", "index.passages=true",
                                                              "index.passage_overlap=30"])
    assert not (tmp_path / "d").exists()
    res = cli("index", "--collection", str(coll), "--root", str(tmp_path), "--name", "e", "index.passages=true",
              "index.passage_tokens=8", "index.passage_overlap=9")
    assert res.exit_code == 2 and "index.passage_overlap" in res.output and "index.passage_tokens" in res.output


@pytest.mark.slow  # a real server process: ~10 s
def test_server_hits_carry_the_passage(built, tmp_path):
    if built.kind != "dense":
        pytest.skip("the server path is the kind's Index.search: one kind is enough")
    import shutil

    from support.serving import Server

    index = shutil.copytree(built.path, tmp_path / "served")
    with Server(index) as server:
        hits = server.client.post("/search", json={"query": TAIL_QUERY, "k": 2}).json()["results"][0]
        assert hits[0]["id"] == "long1" and hits[0]["passage"] > 0 and "saffron" in hits[0]["text"]
        long3 = "Clocks tick in the old tower every hour. " * 6 + "Penguins huddle through the Antarctic winter."
        r = server.client.post("/documents", json={"documents": [{"id": "long3", "text": long3}]})
        assert r.status_code == 200, r.text
        hits = server.client.post("/search", json={"query": "penguins huddle in the Antarctic winter",
                                                    "k": 3}).json()["results"][0]
        assert hits[0]["id"] == "long3" and hits[0]["passage"] > 0 and len({h["id"] for h in hits}) == 3
