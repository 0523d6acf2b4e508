"""The held-out style check (issue 18): a sentence-transformers model through `embedctl index` / `search`
gives sentence-transformers' own nDCG@10 to 3 decimals on a BEIR-format folder, with no model setting
given (the model's own max_seq_length, pooling and normalization are the defaults)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from support.scifact_slice import write_slice

pytestmark = pytest.mark.slow


def _sentence_transformers_ndcg(paths) -> float:
    import pytrec_eval
    from sentence_transformers import SentenceTransformer

    from embedctl.models.hub import resolve_model_path

    model = SentenceTransformer(resolve_model_path("minilm"), device="cpu")
    docs = [json.loads(line) for line in paths["corpus"].read_text().splitlines()]
    queries = [json.loads(line) for line in paths["queries"].read_text().splitlines()]
    texts = [(d.get("title", "") + " " + d["text"]).strip() for d in docs]  # BEIR's title + " " + text
    D = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    Q = model.encode([q["text"] for q in queries], batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    scores = Q @ D.T
    run = {}
    for i, q in enumerate(queries):
        top = np.argsort(-scores[i])[:100]
        run[q["_id"]] = {docs[j]["_id"]: float(scores[i, j]) for j in top}
    qrels: dict = {}
    for line in paths["qrels"].read_text().splitlines()[1:]:
        qid, did, rel = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(rel)
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10"}).evaluate(run)
    return sum(v["ndcg_cut_10"] for v in per_query.values()) / len(qrels)


def test_index_and_search_reproduce_sentence_transformers(tmp_path, scifact):
    paths = write_slice(scifact, tmp_path / "data", num_docs=300, num_queries=40)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")

    def embedctl(*args):
        res = subprocess.run([sys.executable, "-m", "embedctl", *args], cwd=tmp_path, capture_output=True,
                             text=True, env=env, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        return res

    embedctl("index", "--collection", "data/corpus.jsonl", "index.kind=dense")
    res = embedctl("search", "--queries", "data/queries.jsonl", "--qrels", "data/qrels.tsv", "--json")
    ours = json.loads(res.stdout.strip().splitlines()[-1])["nDCG@10"]
    theirs = _sentence_transformers_ndcg(paths)
    assert round(ours, 3) == round(theirs, 3), (ours, theirs)
