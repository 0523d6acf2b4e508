"""prebatch: exact schema, labels, composition (seeded, false-negative grouping), bad labels, mining."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.datahelpers import scifact_slice

from embedctl.config import load_config
from embedctl.data.batches import BatchStream, read_batch, split_batch
from embedctl.data.compose import assemble, compose_queries
from embedctl.data.formats import hash_id
from embedctl.data.pretokenize import run_pretokenize
from embedctl.errors import EmbedctlError, InputError
from embedctl.prebatch.build import run_prebatch

SCHEMAS = {
    "queries": [("BATCH_QUERY_ID", "uint64"), ("QUERY_TOKEN_ID_LIST", "large_list<element: uint16>")],
    "documents": [("BATCH_DOCUMENT_ID", "uint64"), ("DOCUMENT_TOKEN_ID_LIST", "large_list<element: uint16>")],
    "relations": [("BATCH_QUERY_ID", "uint64"), ("BATCH_DOCUMENT_ID", "uint64"), ("RELEVANCE", "int8")],
}


@pytest.fixture(scope="module")
def beir(module_tmp) -> Path:
    return scifact_slice(module_tmp("sf") / "scifact", n_queries=14, extra_docs=10)


@pytest.fixture(scope="module")
def tokens(beir, module_tmp) -> Path:
    out = module_tmp("tok") / "tokens"
    run_pretokenize(load_config(None, [f"pretokenize.input={beir}", f"pretokenize.output={out}",
                                       "model.doc_max_length=48", "model.query_max_length=24"]))
    return out


def prebatch(tokens, qrels, out, *overrides):
    return run_prebatch(load_config(None, [f"prebatch.input={tokens}", f"prebatch.qrels={qrels}",
                                           f"prebatch.output={out}", *overrides]))


def qrels_of(path: Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for line in path.read_text().splitlines()[1:]:
        q, d, r = line.split("\t")
        out.setdefault(q, {})[d] = int(r)
    return out


def hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.glob("batch_*/*"))}


def test_format_labels_and_metadata(beir, tokens, tmp_path):
    out = tmp_path / "pb"
    meta = prebatch(tokens, beir / "qrels" / "train.tsv", out, "prebatch.queries_per_batch=4")
    qrels = qrels_of(beir / "qrels" / "train.tsv")
    names = sorted(p.name for p in out.glob("batch_*"))
    assert names == [f"batch_{i:08d}" for i in range(len(names))] and meta["num_batches"] == len(names)
    seen_q = []
    for name in names:
        for kind, want in SCHEMAS.items():
            schema = pq.read_schema(out / name / f"{kind}.parquet")
            assert [(f.name, str(f.type)) for f in schema] == want
        b = read_batch(str(out / name))
        assert len(set(b.query_ids.tolist())) == b.num_queries and len(set(b.document_ids.tolist())) == b.num_documents
        assert b.num_queries <= 4
        for qi, q in enumerate(b.query_ids.tolist()):
            qid = next(k for k in qrels if hash_id(k) == q)
            seen_q.append(qid)
            got = {int(b.document_ids[j]): int(b.relevance[qi, j]) for j in np.flatnonzero(b.relevance[qi])}
            assert got == {hash_id(d): r for d, r in qrels[qid].items()}
    assert sorted(seen_q) == sorted(qrels)
    saved = json.loads((out / "metadata.json").read_text())
    assert saved["counts"]["queries"] == len(qrels) and saved["format"] == "embedctl-prebatch"
    assert saved["sources"]["relations"]["size"] > 0 and saved["sources"]["documents_fingerprint"]["tokenizer"]
    assert (out / "resolved_config.yaml").is_file() and (out / "report.json").is_file()
    stream = BatchStream(str(out), split_factor=2, seed=1)
    first = next(iter(stream))
    assert first.num_queries <= 2 and (first.relevance > 0).any(axis=1).all()


def test_seeded_and_deterministic(beir, tokens, tmp_path):
    q = beir / "qrels" / "train.tsv"
    prebatch(tokens, q, tmp_path / "a", "prebatch.queries_per_batch=3", "prebatch.seed=5")
    prebatch(tokens, q, tmp_path / "b", "prebatch.queries_per_batch=3", "prebatch.seed=5")
    prebatch(tokens, q, tmp_path / "c", "prebatch.queries_per_batch=3", "prebatch.seed=6")
    assert hashes(tmp_path / "a") == hashes(tmp_path / "b")
    assert hashes(tmp_path / "a") != hashes(tmp_path / "c")
    with pytest.raises(EmbedctlError, match="--overwrite"):
        prebatch(tokens, q, tmp_path / "a", "prebatch.queries_per_batch=3")
    prebatch(tokens, q, tmp_path / "a", "prebatch.queries_per_batch=3", "prebatch.seed=6", "prebatch.overwrite=true")
    assert hashes(tmp_path / "a") == hashes(tmp_path / "c")


def _ids(beir: Path):
    qids = [json.loads(x)["_id"] for x in (beir / "queries.jsonl").read_text().splitlines()]
    dids = [json.loads(x)["_id"] for x in (beir / "corpus.jsonl").read_text().splitlines()]
    return qids, dids


def test_graded_negatives_and_queries_without_positive(beir, tokens, tmp_path, capsys):
    qids, dids = _ids(beir)
    qrels = tmp_path / "graded.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n"
                     f"{qids[0]}\t{dids[0]}\t2\n{qids[0]}\t{dids[1]}\t0\n{qids[1]}\t{dids[2]}\t1\n{qids[2]}\t{dids[3]}\t0\n")
    out = tmp_path / "pb"
    meta = prebatch(tokens, qrels, out)
    assert meta["counts"]["queries_without_positive"] == 1
    assert json.loads((out / "report.json").read_text())["queries_without_positive"] == [qids[2]]
    assert "without a positive" in capsys.readouterr().err
    b = read_batch(str(out / "batch_00000000"))
    qi = b.query_ids.tolist().index(hash_id(qids[0]))
    labels = {int(b.document_ids[j]): int(b.relevance[qi, j]) for j in np.flatnonzero(b.relevance[qi])}
    assert labels == {hash_id(dids[0]): 2, hash_id(dids[1]): -1}
    assert hash_id(qids[2]) not in b.query_ids.tolist()


def test_pairs_and_triples(beir, tokens, tmp_path):
    qids, dids = _ids(beir)
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(f"{qids[0]}\t{dids[0]}\n{qids[0]}\t{dids[1]}\n{qids[1]}\t{dids[1]}\n")
    meta = prebatch(tokens, pairs, tmp_path / "p", "prebatch.false_negatives=ignore")
    assert meta["counts"]["positives"] == 3 and meta["counts"]["negatives"] == 0
    b = read_batch(str(tmp_path / "p" / "batch_00000000"))
    assert b.num_documents == 2  # the shared document is stored once
    triples = tmp_path / "hn.jsonl"
    triples.write_text(json.dumps({"query_id": qids[0], "positives": [dids[0]], "negatives": [dids[4], dids[5]]}) + "\n")
    meta = prebatch(tokens, triples, tmp_path / "t")
    assert meta["counts"]["positives"] == 1 and meta["counts"]["negatives"] == 2
    b = read_batch(str(tmp_path / "t" / "batch_00000000"))
    assert b.relevance.tolist() == [[1, -1, -1]]  # positives first, then negatives


def test_unknown_ids_fail_with_line_or_are_reported(beir, tokens, tmp_path):
    qids, dids = _ids(beir)
    qrels = tmp_path / "bad.tsv"
    qrels.write_text(f"query-id\tcorpus-id\tscore\n{qids[0]}\t{dids[0]}\t1\n{qids[1]}\tnope\t1\nq-missing\t{dids[1]}\t1\n")
    with pytest.raises(InputError) as err:
        prebatch(tokens, qrels, tmp_path / "x")
    assert err.value.line == 3 and "unknown document id 'nope'" in str(err.value) and "bad.tsv" in str(err.value)
    assert not (tmp_path / "x" / "metadata.json").exists()
    prebatch(tokens, qrels, tmp_path / "y", "prebatch.on_error=skip")
    report = json.loads((tmp_path / "y" / "report.json").read_text())
    assert [r["line"] for r in report["skipped_rows"]] == [3, 4]
    assert set(report["queries_without_positive"]) == {qids[1], "q-missing"}


def test_false_negative_modes(beir, tokens, tmp_path):
    qids, dids = _ids(beir)
    qrels = tmp_path / "shared.tsv"  # q0 and q1 share d0; q1 also has d1
    qrels.write_text(f"query-id\tcorpus-id\tscore\n{qids[0]}\t{dids[0]}\t1\n{qids[1]}\t{dids[0]}\t1\n"
                     f"{qids[1]}\t{dids[1]}\t1\n{qids[2]}\t{dids[2]}\t1\n")
    meta = prebatch(tokens, qrels, tmp_path / "g", "prebatch.queries_per_batch=3", "prebatch.false_negatives=group")
    assert meta["num_batches"] == 2
    for name in ("batch_00000000", "batch_00000001"):
        b = read_batch(str(tmp_path / "g" / name))
        assert not ({hash_id(qids[0]), hash_id(qids[1])} <= set(b.query_ids.tolist()))
    prebatch(tokens, qrels, tmp_path / "m", "prebatch.queries_per_batch=3", "prebatch.false_negatives=mark")
    b = read_batch(str(tmp_path / "m" / "batch_00000000"))
    q0, d1 = b.query_ids.tolist().index(hash_id(qids[0])), b.document_ids.tolist().index(hash_id(dids[1]))
    assert b.relevance[q0, d1] == 1  # q1's other positive is marked relevant for q0
    prebatch(tokens, qrels, tmp_path / "i", "prebatch.queries_per_batch=3", "prebatch.false_negatives=ignore")
    b = read_batch(str(tmp_path / "i" / "batch_00000000"))
    assert b.num_queries == 3 and b.relevance[b.query_ids.tolist().index(hash_id(qids[0])),
                                              b.document_ids.tolist().index(hash_id(dids[1]))] == 0


@st.composite
def label_sets(draw):
    nq = draw(st.integers(1, 25))
    labels = {}
    for q in range(nq):
        pos = draw(st.sets(st.integers(0, 12), min_size=1, max_size=3))
        neg = draw(st.sets(st.integers(13, 20), max_size=2))
        labels[f"q{q}"] = {**{f"d{d}": 1 for d in pos}, **{f"d{d}": -1 for d in neg}}
    return labels, draw(st.integers(1, 6)), draw(st.integers(0, 3))


@settings(max_examples=150, deadline=None)
@given(label_sets())
def test_grouping_property_and_split_safe_layout(case):
    labels, per_batch, seed = case
    groups = compose_queries(list(labels), labels, per_batch, seed, "group")
    assert sorted(q for g in groups for q in g) == sorted(labels)
    for g in groups:
        assert 1 <= len(g) <= per_batch
        pos = [{d for d, r in labels[q].items() if r > 0} for q in g]
        assert all(not (pos[i] & pos[j]) for i in range(len(g)) for j in range(i + 1, len(g)))
        gq, gd, rel = assemble(g, labels, "group")
        assert len(set(gd)) == len(gd)
        # documents appear in the order their first query appears
        first_owner = [int(np.flatnonzero(rel[:, j])[0]) for j in range(len(gd))]
        assert first_owner == sorted(first_owner)
        from embedctl.data.batches import Batch

        batch = Batch(np.arange(len(gq), dtype=np.uint64), [np.zeros(1, np.uint16)] * len(gq),
                      np.arange(len(gd), dtype=np.uint64), [np.zeros(1, np.uint16)] * len(gd), rel)
        for k in (2, 3):
            for part in split_batch(batch, k):
                for i, q in enumerate(part.query_ids.tolist()):
                    got = {gd[int(part.document_ids[j])]: int(part.relevance[i, j]) for j in np.flatnonzero(part.relevance[i])}
                    assert got == labels[gq[q]]


@pytest.mark.slow
def test_mining_adds_hard_negatives_below_the_margin(beir, tokens, tmp_path):
    out = tmp_path / "mined"
    meta = prebatch(tokens, beir / "qrels" / "train.tsv", out, "prebatch.negatives_per_query=2",
                    "prebatch.queries_per_batch=5", "prebatch.mine_depth=10")
    qrels = qrels_of(beir / "qrels" / "train.tsv")
    assert 0 < meta["counts"]["mined_negatives"] <= 2 * len(qrels)
    assert meta["counts"]["negatives"] == meta["counts"]["mined_negatives"]
    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.encoder import load_encoder

    enc = load_encoder(ModelConfig(doc_max_length=48, query_max_length=24))
    for name in sorted(p.name for p in out.glob("batch_*")):
        b = read_batch(str(out / name))
        Q = enc.encode_queries([t.tolist() for t in b.query_tokens])
        D = enc.encode_documents([t.tolist() for t in b.document_tokens])
        S = Q @ D.T
        for qi in range(b.num_queries):
            assert (b.relevance[qi] < 0).sum() <= 2 and (b.relevance[qi] > 0).sum() >= 1
            ceiling = 0.95 * S[qi, b.relevance[qi] > 0].min()
            assert (S[qi, b.relevance[qi] < 0] < ceiling + 1e-4).all()
