"""Fields and filters end to end with the real `minilm` (dense, and as a ColBERT for PLAID): every collection
format's fields, filtered search equal to the exhaustive ranking restricted to the allowed documents (k hits
whenever k pass), through add, delete and compact; hostile filters refused with the fix (exit 2)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.lifecycle import COLBERT, INCREMENTAL, invoke

import embedctl
from embedctl.data.sources import iter_texts
from embedctl.search.filters import FilterError

TOPICS = ["vitamin C and scurvy", "ocean tides and the moon", "volcanoes and lava", "jazz improvisation"]
KINDS = {"plaid": [*COLBERT, *INCREMENTAL], "dense": ["index.batch_size=16"]}


def doc(i: int) -> dict:
    row = {"_id": f"d{i}", "text": f"Document {i} is about {TOPICS[i % 4]}, part {i // 4}.", "year": 2000 + i,
           "group": "abc"[i % 3], "even": i % 2 == 0, "metadata": {"score": i / 10}}
    if i % 10 == 0:
        row["rare"] = "x"
    return row


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_every_collection_format_carries_its_fields(tmp_path):
    jsonl = write_jsonl(tmp_path / "c.jsonl", [doc(0), doc(1)])
    assert [r.fields for r in iter_texts(str(jsonl))] == [
        {"year": 2000, "group": "a", "even": True, "metadata.score": 0.0, "rare": "x"},
        {"year": 2001, "group": "b", "even": False, "metadata.score": 0.1}]
    pq.write_table(pa.table({"id": ["p1", "p2"], "text": ["a", "b"], "title": ["T", None], "year": [1999, None],
                             "tags": [["x", "y"], []]}), tmp_path / "c.parquet")
    rows = list(iter_texts(str(tmp_path / "c.parquet")))
    assert [(r.title, r.fields) for r in rows] == [("T", {"year": 1999, "tags": '["x", "y"]'}), (None, {"tags": "[]"})]
    (tmp_path / "c.tsv").write_text("id\ttext\tyear\ttitle\tjournal\nt1\tone\t2015\tA\tCell\nt2\ttwo\t1.5\t\t\n")
    rows = list(iter_texts(str(tmp_path / "c.tsv")))
    assert [(r.title, r.fields) for r in rows] == [("A", {"year": 2015, "journal": "Cell"}), (None, {"year": 1.5})]
    (tmp_path / "plain.tsv").write_text("id\ttext\ttitle\nq\tplain\tT\n")  # the old header: no fields
    assert [(r.title, r.fields) for r in iter_texts(str(tmp_path / "plain.tsv"))] == [("T", None)]
    (tmp_path / "bad.tsv").write_text("id\ttext\tyear\nt1\tone\n")
    with pytest.raises(embedctl.errors.InputError, match="expected 3 tab-separated fields"):
        list(iter_texts(str(tmp_path / "bad.tsv")))
    beir = tmp_path / "beir"
    beir.mkdir()
    write_jsonl(beir / "corpus.jsonl", [{"_id": "b1", "title": "T", "text": "vitamin", "metadata": {"journal": "Cell"}},
                                         {"_id": "b2", "text": "a x"}])  # no word bm25s keeps
    idx = embedctl.Index.build(beir, tmp_path / "idx", overrides=["index.kind=lexical"])
    hits = idx.search("vitamin", k=5, mode="lexical", filter="metadata.journal = 'Cell'")
    assert [(h.id, h.fields) for h in hits] == [("b1", {"metadata.journal": "Cell"})]
    assert idx.search("x", k=5) == []  # a lexical index searches lexically; no term: no hits


@pytest.fixture(scope="module", params=sorted(KINDS))
def built(request, module_tmp):
    work = module_tmp(f"filters-{request.param}")
    coll = write_jsonl(work / "corpus.jsonl", [doc(i) for i in range(40)])
    idx = embedctl.Index.build(coll, work / "indexes" / "idx", overrides=KINDS[request.param])
    return work, request.param, idx


def reference(idx, query: str) -> list[str]:
    """The exact ranking of every live document (PLAID: exhaustive MaxSim; dense flat: exact)."""
    exact = embedctl.Index.open(idx.path, overrides=["search.exhaustive=true"], encoder=idx.encoder)
    return [h.id for h in exact.search(query, k=100, text=False)]


def passing(idx, expr: str) -> set[str]:
    return {idx.session.docs.ids_of([p])[0] for p in idx.session.allowed(expr).nonzero()[0]}


FILTERS = ["group = 'a'", "year < 2003", "even = true and year >= 2010", "exists(rare)", "not exists(rare)",
           "metadata.score > 2.5 or group in ('c')", "year > 3000", "group != 'a' and not (year <= 2030)"]


def test_filtered_search_is_the_exact_ranking_restricted_with_k_hits_whenever_k_pass(built):
    _, _, idx = built
    query = "vitamin C and scurvy"
    ranking = reference(idx, query)
    for expr in FILTERS:
        allowed = passing(idx, expr)
        hits = idx.search(query, k=10, filter=expr)
        assert [h.id for h in hits] == [i for i in ranking if i in allowed][:10], expr
        assert len(hits) == min(10, len(allowed))
        assert all(h.fields["year"] == 2000 + int(h.id[1:]) for h in hits)
    # PLAID's candidate path (more allowed documents than search.ndocs): still k hits, all allowed
    narrow = embedctl.Index.open(idx.path, overrides=["search.ndocs=4"], encoder=idx.encoder)
    hits = narrow.search(query, k=10, filter="year >= 2020")
    assert len(hits) == 10 and all(h.fields["year"] >= 2020 for h in hits)


def test_filtered_search_through_the_cli_is_the_api_s(built, tmp_path):
    """`embedctl search --filter` (one query, --json; a queries file, --output) returns the API's filtered hits,
    with their fields; a 100,000-value IN list is refused there and in the API with the bound (exit 2)."""
    work, _, idx = built
    query, expr = "vitamin C and scurvy", "year >= 2020 and group in ('a', 'b')"
    want = [h.id for h in idx.search(query, k=5, filter=expr)]
    res = invoke("search", query, "--index", str(idx.path), "--filter", expr, "--json", "-k", "5")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.splitlines()[0])
    assert out["filter"] == expr and [h["id"] for h in out["hits"]] == want and len(want) == 5
    assert all(h["fields"]["year"] >= 2020 and h["fields"]["group"] in "ab" for h in out["hits"])
    queries = tmp_path / "q.tsv"
    queries.write_text(f"q1\t{query}\nq2\tjazz improvisation\n", encoding="utf-8")
    res = invoke("search", "--index", str(idx.path), "--queries", str(queries), "--filter", "exists(rare)",
                 "-k", "10", "--output", str(tmp_path / "run.tsv"))
    assert res.exit_code == 0, res.output
    rows = [line.split("\t") for line in (tmp_path / "run.tsv").read_text().splitlines()]
    assert {r[0] for r in rows} == {"q1", "q2"} and {r[1] for r in rows} == passing(idx, "exists(rare)")
    huge = "year in (" + ", ".join(str(i) for i in range(100_000)) + ")"
    res = invoke("search", query, "--index", str(idx.path), "--filter", huge)
    assert res.exit_code == 2 and "more than 1024 values" in res.output, res.output[-500:]
    with pytest.raises(FilterError, match="more than 1024 values"):
        idx.search(query, filter=huge)


def test_filters_follow_add_delete_and_compact(built, tmp_path):
    work, kind, idx = built
    index = embedctl.Index(idx.path, idx.loaded)
    index._session = None
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(idx.path, copy)
    changed = embedctl.Index.open(copy, overrides=KINDS[kind], encoder=idx.encoder)
    new = {"id": "n1", "text": "Sailors got scurvy until lemons brought vitamin C.", "year": 1990, "group": "z"}
    again = dict(doc(1), id="d1", group="z")  # same text, another field: an update
    del again["_id"]
    summary = changed.add([new, again])
    assert (summary["added"], summary["updated"]) == (1, 1)
    assert {h.id for h in changed.search("scurvy", k=10, filter="group = 'z'")} == {"n1", "d1"}
    assert [h.id for h in changed.search("scurvy", k=10, filter="year < 2000")] == ["n1"]
    assert [h.id for h in changed.search("sailors lemons", k=10, mode="lexical")] == ["n1"]  # the lexical side too
    changed.delete(["d0", "n1"])
    assert changed.search("scurvy", k=10, filter="year <= 2000") == []
    assert changed.search("sailors lemons", k=10, mode="lexical") == []
    assert "n1" not in {h.id for h in changed.search("sailors lemons", k=10, mode="hybrid")}
    before = {e: [h.id for h in changed.search("scurvy", k=10, filter=e)] for e in FILTERS}
    changed.compact()
    assert changed.info()["segments"] == 1 and changed.info(verify=True)["verify"] == []
    assert {e: [h.id for h in changed.search("scurvy", k=10, filter=e)] for e in FILTERS} == before
    assert {h.id for h in changed.search("scurvy", k=10, filter="group = 'z'")} == {"d1"}
    assert changed.search("sailors lemons", k=10, mode="lexical") == []


def test_a_plaid_add_that_reclusters_keeps_fields_and_lexical(built, tmp_path):
    """The re-clustering add (one new segment of every live document, embedctl.index.recluster) writes the
    fields and the lexical side of every document again: filters and lexical search see old and new ones."""
    import shutil

    work, kind, idx = built
    if kind != "plaid":
        pytest.skip("only PLAID indexes re-cluster")
    copy = shutil.copytree(idx.path, tmp_path / "copy")
    index = embedctl.Index.open(copy, overrides=COLBERT, encoder=idx.encoder)  # re-clustering on (the default)
    index.delete(["d4"])
    again = dict(doc(1), id="d1", group="z")  # same text, another field: an update
    del again["_id"]
    summary = index.add([{"id": "n1", "text": "Sailors got scurvy until lemons brought vitamin C.", "year": 1990,
                          "group": "z"}, again])
    assert summary["recluster"] is not None and index.info()["segments"] == 1
    assert {h.id for h in index.search("scurvy", k=10, filter="group = 'z'")} == {"n1", "d1"}
    assert [h.id for h in index.search("scurvy lemons", k=10, filter="year < 2000", mode="lexical")] == ["n1"]
    ranking = reference(index, "vitamin C and scurvy")
    assert "d4" not in ranking
    for expr in FILTERS:
        allowed = passing(index, expr)
        assert "d4" not in allowed
        hits = index.search("vitamin C and scurvy", k=10, filter=expr)
        assert [h.id for h in hits] == [i for i in ranking if i in allowed][:10], expr


def test_hostile_filters_are_refused_with_the_fix(built):
    work, _, idx = built
    with pytest.raises(FilterError, match="unknown field 'journal'; this index's fields are: even, group, "
                                          "metadata.score, rare, year"):
        idx.search("q", filter="journal = 'Cell'")
    with pytest.raises(FilterError, match="field 'year' holds int values, compared with the string '2015'"):
        idx.search("q", filter="year >= '2015'")
    with pytest.raises(FilterError, match="is a bool: compare it with = or !="):
        idx.search("q", filter={"field": "even", "op": "<", "value": True})
    with pytest.raises(FilterError, match="more than 1024 values"):
        idx.search("q", filter={"field": "year", "op": "in", "values": list(range(100_000))})
    res = invoke("search", "scurvy", "--index", str(idx.path), "--filter", "year >= 2015; rm -rf /")
    assert res.exit_code == 2 and "unexpected character ';'" in res.output
    res = invoke("search", "scurvy", "--index", str(idx.path), "--filter", "yeer = 1", "--json")
    assert res.exit_code == 2 and "this index's fields are" in res.output
    assert "`search.filter` (--filter): unknown field 'yeer'" in res.output


def test_fields_of_every_format_added_to_an_index_filter_through_delete_and_compact(built, tmp_path):
    """Parquet columns, a TSV header's columns and BEIR metadata, each added to the JSONL-built index (dense and
    PLAID): filters see them at once, after a delete, and after compact (one segment)."""
    import shutil

    work, kind, idx = built
    copy = shutil.copytree(idx.path, tmp_path / "copy")
    index = embedctl.Index.open(copy, overrides=KINDS[kind], encoder=idx.encoder)
    pq.write_table(pa.table({"id": ["p1", "p2"], "text": ["Scurvy struck sailors without vitamin C.",
                                                          "Lava poured from the volcano."],
                             "year": [1901, 1902], "lab": ["north", "south"]}), tmp_path / "new.parquet")
    (tmp_path / "new.tsv").write_text("id\ttext\tyear\tjournal\n"
                                      "t1\tVitamin C cured the scurvy of the crew.\t1903\tLancet\n"
                                      "t2\tThe moon pulls the tides.\t1904\tNature\n", encoding="utf-8")
    beir = tmp_path / "beir"
    beir.mkdir()
    write_jsonl(beir / "corpus.jsonl", [
        {"_id": "b1", "title": "Scurvy", "text": "Citrus fruit kept scurvy away.", "metadata": {"journal": "BMJ"}},
        {"_id": "b2", "text": "Jazz players improvise.", "metadata": {"journal": "Cell"}}])
    for source in (tmp_path / "new.parquet", tmp_path / "new.tsv", beir):
        assert index.add(source)["added"] == 2, source

    def ids(expr: str, mode: str | None = None) -> list[str]:
        return sorted(h.id for h in index.search("scurvy vitamin C", k=50, filter=expr, mode=mode))

    checks = {"lab = 'south'": ["p2"], "year < 1903": ["p1", "p2"], "journal in ('Lancet', 'Nature')": ["t1", "t2"],
              "metadata.journal = 'BMJ'": ["b1"], "exists(lab) or exists(metadata.journal)": ["b1", "b2", "p1", "p2"]}
    for expr, want in checks.items():
        assert ids(expr) == want, expr
    assert ids("journal = 'Lancet' or metadata.journal = 'BMJ'", mode="lexical") == ["b1", "t1"]
    index.delete(["p2", "t1", "b2"])
    after = {"lab = 'south'": [], "year < 1903": ["p1"], "journal in ('Lancet', 'Nature')": ["t2"],
             "metadata.journal = 'BMJ'": ["b1"], "exists(lab) or exists(metadata.journal)": ["b1", "p1"]}
    assert {e: ids(e) for e in after} == after
    index.compact()
    assert index.info()["segments"] == 1 and index.info(verify=True)["verify"] == []
    assert {e: ids(e) for e in after} == after
    assert ids("metadata.journal = 'BMJ'", mode="hybrid") == ["b1"]
