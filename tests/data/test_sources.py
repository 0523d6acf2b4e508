"""Sources and relation readers: formats, compression, URLs, and the bad-input matrix."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from embedctl.data.relations import read_relations
from embedctl.data.sources import beir_paths, is_beir_folder, iter_texts, join_title, read_queries
from embedctl.errors import InputError
from embedctl.util.qrels import read_qrels

ROWS = [("d1", "first text", "Title one"), ("d2", "second text", None), ("d3", "third", "T3")]


def _jsonl(rows) -> str:
    out = []
    for rid, text, title in rows:
        obj = {"_id": rid, "text": text}
        if title:
            obj["title"] = title
        out.append(json.dumps(obj) + "\n")
    return "".join(out)


def _tsv(rows) -> str:
    return "".join(f"{r}\t{t}" + (f"\t{ti}" if ti else "") + "\n" for r, t, ti in rows)


def _expect(records):
    return [(r.id, r.text, r.title) for r in records]


@pytest.mark.parametrize("name,writer", [
    ("c.jsonl", lambda p: p.write_text(_jsonl(ROWS))),
    ("c.tsv", lambda p: p.write_text(_tsv(ROWS))),
    ("c.jsonl.gz", lambda p: p.write_bytes(gzip.compress(_jsonl(ROWS).encode()))),
    ("c.tsv.zst", lambda p: p.write_bytes(zstandard.ZstdCompressor().compress(_tsv(ROWS).encode()))),
    ("c.parquet", lambda p: pq.write_table(pa.table({"_id": [r[0] for r in ROWS], "text": [r[1] for r in ROWS],
                                                        "title": [r[2] for r in ROWS]}), p)),
])
def test_formats_read_the_same_records(tmp_path, name, writer):
    path = tmp_path / name
    writer(path)
    assert _expect(iter_texts(str(path))) == ROWS
    assert _expect(iter_texts("file://" + str(path))) == ROWS


def test_memory_url_and_line_numbers():
    import fsspec

    fs = fsspec.filesystem("memory")
    with fs.open("/src/q.tsv", "wb") as fh:
        fh.write(b"id\ttext\nq1\twhat is x\nq2\twhy y\n")
    recs = list(iter_texts("memory://src/q.tsv"))
    assert [(r.id, r.line) for r in recs] == [("q1", 2), ("q2", 3)]
    assert read_queries("memory://src/q.tsv") == {"q1": "what is x", "q2": "why y"}


def test_join_title():
    recs = list(iter_texts_from(_jsonl(ROWS)))
    assert join_title(recs[0]) == "Title one first text"
    assert join_title(recs[0], use_title=False) == "first text"
    assert join_title(recs[0], sep=". ") == "Title one. first text"
    assert join_title(recs[1]) == "second text"


def iter_texts_from(text: str, name: str = "mem.jsonl"):
    import fsspec

    with fsspec.open(f"memory://t/{name}", "wb") as fh:
        fh.write(text.encode() if isinstance(text, str) else text)
    return iter_texts(f"memory://t/{name}")


BAD = [
    ("bad.tsv", b"d1\tok\nd2 no tab here\n", 2, "tab-separated"),
    ("bad.tsv", b"d1\tok\nd2\ta\tb\tc\n", 2, "found 4"),
    ("bad.jsonl", b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": \n', 2, "not valid JSON"),
    ("bad.jsonl", b'{"_id": "a", "text": "x"}\n[1, 2]\n', 2, "JSON object"),
    ("bad.jsonl", b'{"_id": "a", "text": "x"}\n{"text": "no id"}\n', 2, "id field"),
    ("bad.jsonl", b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": "caf\xe9"}\n', 2, "invalid UTF-8"),
    ("bad.tsv", b"d1\tok\nd2\t\xff\xfe\n", 2, "invalid UTF-8"),
    ("bad.jsonl", b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": "   "}\n', 2, "empty text"),
    ("bad.jsonl", b'{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n', 2, "duplicate id"),
    ("bad.jsonl", b'{"_id": "a", "text": "x"}\n\n{"_id": "b", "text": "y"}\n', 2, "empty line"),
]


@pytest.mark.parametrize("name,data,line,words", BAD)
def test_bad_rows_name_file_and_line(name, data, line, words):
    with pytest.raises(InputError) as err:
        list(iter_texts_from(data, name))
    assert err.value.line == line and name in str(err.value) and words in str(err.value)


@pytest.mark.parametrize("name,data,line,words", BAD)
def test_bad_rows_skipped_and_reported(name, data, line, words):
    skipped = []
    import fsspec

    with fsspec.open(f"memory://s/{name}", "wb") as fh:
        fh.write(data)
    recs = list(iter_texts(f"memory://s/{name}", on_error="skip", on_skip=skipped.append))
    assert len(recs) >= 1 and [s.line for s in skipped] == [line] and words in skipped[0].reason


def test_empty_input_and_unreadable_urls(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(InputError, match="no records"):
        list(iter_texts(str(tmp_path / "empty.jsonl")))
    with pytest.raises(InputError, match="no such file"):
        list(iter_texts(str(tmp_path / "missing.jsonl")))
    with pytest.raises(InputError, match="format from the file name"):
        list(iter_texts(str(tmp_path / "x.bin")))
    with pytest.raises(InputError):
        list(iter_texts("nosuchproto://x/y.jsonl"))
    (tmp_path / "corrupt.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(InputError, match="corrupt"):
        list(iter_texts(str(tmp_path / "corrupt.jsonl.gz")))


def test_beir_paths(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl.gz").write_bytes(gzip.compress(_jsonl(ROWS).encode()))
    (tmp_path / "queries.jsonl").write_text(_jsonl(ROWS))
    corpus, queries, qrels = beir_paths(str(tmp_path), "train")
    assert corpus.endswith("corpus.jsonl.gz") and queries.endswith("queries.jsonl") and qrels.endswith("qrels/train.tsv")
    assert is_beir_folder(str(tmp_path)) and not is_beir_folder(str(tmp_path / "qrels"))


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_relations_formats(tmp_path):
    beir = _write(tmp_path, "b.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t0\nq2\td3\t1\n")
    assert read_relations(beir, "qrels").labels == {"q1": {"d1": 2, "d2": -1}, "q2": {"d3": 1}}  # judged 0: -1
    trec = _write(tmp_path, "t.qrels", "q1 0 d1 1\nq2 0 d3 3\n")
    assert read_relations(trec).labels == {"q1": {"d1": 1}, "q2": {"d3": 3}}
    pairs = _write(tmp_path, "p.tsv", "q1\td1\nq1\td2\n")
    rel = read_relations(pairs)
    assert rel.fmt == "pairs" and rel.labels == {"q1": {"d1": 1, "d2": 1}}
    triples = _write(tmp_path, "tr.tsv", "q1\td1\td9\nq1\td1\td8\n")
    assert read_relations(triples).labels == {"q1": {"d1": 1, "d9": -1, "d8": -1}}
    hn = _write(tmp_path, "hn.jsonl", json.dumps({"query_id": "q1", "positives": ["d1"], "negatives": ["d1", "d7"]}) + "\n")
    assert read_relations(hn).labels == {"q1": {"d1": 1, "d7": -1}}  # positive wins over a noisy negative
    pj = _write(tmp_path, "p.jsonl", json.dumps({"query_id": 5, "doc_id": 7}) + "\n")
    assert read_relations(pj).labels == {"5": {"7": 1}}


@pytest.mark.parametrize("text,line,words", [
    ("query-id\tcorpus-id\tscore\nq1\td1\tx\n", 2, "integer"),
    ("q1 0 d1 1\nq1 d1\n", 2, "TREC"),
    ("query-id\tcorpus-id\tscore\n", None, "no labels"),
])
def test_bad_relations(tmp_path, text, line, words):
    path = _write(tmp_path, "bad.tsv", text)
    with pytest.raises(InputError, match=words) as err:
        read_relations(path, "qrels")
    assert err.value.line == line


def test_scifact_qrels_read():
    from support.datahelpers import scifact_dir

    qrels = read_qrels(str(scifact_dir() / "qrels" / "test.tsv"))
    assert len(qrels) == 300 and all(v > 0 for d in qrels.values() for v in d.values())


def test_parquet_label_tables(tmp_path):
    pairs = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"query_id": ["q1", "q1", "q2"], "doc_id": ["d1", "d2", "d1"]}), pairs)
    rel = read_relations(str(pairs))
    assert rel.fmt == "pairs" and rel.labels == {"q1": {"d1": 1, "d2": 1}, "q2": {"d1": 1}}
    hn = tmp_path / "hn.parquet"
    pq.write_table(pa.table({"query_id": ["q1"], "positives": [["d1"]], "negatives": [["d5", "d6"]]}), hn)
    assert read_relations(str(hn)).labels == {"q1": {"d1": 1, "d5": -1, "d6": -1}}
    graded = tmp_path / "g.parquet"
    pq.write_table(pa.table({"query_id": ["q1", "q2"], "doc_id": ["d1", "d2"], "relevance": [3, 0]}), graded)
    assert read_relations(str(graded)).labels == {"q1": {"d1": 3}, "q2": {"d2": -1}}
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"query_id": ["q1", "q2"], "doc": ["d1", "d2"]}), bad)
    with pytest.raises(InputError, match="doc_id") as err:
        read_relations(str(bad), "pairs")
    assert err.value.line == 1
