"""Hard-negative mining and `embedctl prebatch` on 2 and 3 gloo ranks (CPU, one thread each): the same result
and the same batch files as one process; a rank killed mid-mining stops the run, and a rerun with another
number of ranks finishes with the bytes of an uninterrupted run."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from support.datahelpers import scifact_slice
from support.ledgerwatch import kill_rank

from embedctl.config import load_config
from embedctl.data.pretokenize import run_pretokenize
from embedctl.prebatch.mining import mine_negatives
from embedctl.prebatch.ranked_mining import best_first

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "support" / "ranked_mining.py"


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def launch(n: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n), *args]


def torchrun(n: int, *args: str) -> str:
    done = subprocess.run(launch(n, *args), env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


LENGTHS = ["model.doc_max_length=48", "model.query_max_length=24"]


def pretokenized(beir: Path, tok: Path) -> Path:
    run_pretokenize(load_config(None, [f"pretokenize.input={beir}", f"pretokenize.output={tok}", *LENGTHS]))
    return tok


def prebatch_cmd(tok: Path, beir: Path, out: Path, *extra: str) -> list[str]:
    return ["-m", "embedctl", "prebatch", "--input", str(tok), "--qrels", str(beir / "qrels" / "train.tsv"),
            "--output", str(out), "prebatch.negatives_per_query=2", "prebatch.queries_per_batch=5",
            "prebatch.mine_depth=10", *LENGTHS, *extra]


def batch_digest(out: Path) -> dict[str, str]:
    """sha256 of every batch file and report.json; metadata.json without the output path."""
    digests = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in sorted(out.rglob("*")) if p.is_file() and (p.name == "report.json"
                                                                   or p.parent.name.startswith("batch_"))}
    meta = json.loads((out / "metadata.json").read_text())
    meta["config"].pop("output")
    digests["metadata.json"] = json.dumps(meta, sort_keys=True)
    return digests


def test_best_first_breaks_ties_by_document_id():
    scores = torch.tensor([[0.5, 0.9, 0.5, 0.9, 0.1]])
    ids = torch.arange(10, 15).expand(1, -1)
    s, i = best_first(scores, ids, 4)
    assert i.tolist() == [[11, 13, 10, 12]] and s[0].tolist() == pytest.approx([0.9, 0.9, 0.5, 0.5])


class IntegerEncoder:
    """Small integer vectors (ColBERT: several per text, zero-padded queries): every score is exact, so any
    blocking of the arithmetic gives the same numbers, and many of them tie."""

    def __init__(self, kind: str):
        self.kind, self.queries_encoded = kind, 0

    def _vectors(self, text: str, n: int) -> np.ndarray:
        seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
        return np.random.default_rng(seed).integers(-2, 3, (n, 4)).astype(np.float32)

    def encode_queries(self, items) -> np.ndarray:
        self.queries_encoded += len(items)
        if self.kind == "biencoder":
            return np.stack([self._vectors(t, 1)[0] for t in items]).reshape(len(items), 4)
        out = np.zeros((len(items), 3, 4), np.float32)
        for i, t in enumerate(items):
            out[i, :1 + len(t) % 3] = self._vectors(t, 1 + len(t) % 3)
        return out

    def encode_documents(self, items, batch_size: int = 32, progress: bool = False):
        if self.kind == "biencoder":
            return np.stack([self._vectors(t, 1)[0] for t in items]).reshape(len(items), 4)
        parts = [self._vectors(t, 1 + len(t) % 4) for t in items]
        return np.concatenate(parts), np.array([len(p) for p in parts], dtype=np.int64)


def exact_scores(encoder, queries, docs) -> np.ndarray:
    """The whole score matrix at once (ColBERT: MaxSim in plain Python)."""
    Q, D = encoder.encode_queries(queries), encoder.encode_documents(docs)
    if encoder.kind == "biencoder":
        return Q @ D.T
    vectors, lens = D
    starts = np.concatenate([[0], np.cumsum(lens)])
    return np.array([[sum(max(q @ v for v in vectors[starts[d]:starts[d + 1]]) if q.any() else 0.0 for q in Q[i])
                      for d in range(len(docs))] for i in range(len(queries))])


def ranked(S: np.ndarray, q: int) -> list[int]:
    return sorted(range(S.shape[1]), key=lambda d: (-S[q, d], d))


@pytest.mark.parametrize("kind", ["biencoder", "colbert"])
def test_query_and_corpus_chunks_give_the_whole_matrix_result(kind):
    queries = [f"query {i}{'?' * (i % 3)}" for i in range(11)]
    docs = [f"doc {i}" for i in range(37)] + ["same text"] * 4  # equal scores: ties broken by document id
    S = exact_scores(IntegerEncoder(kind), queries, docs)
    positives = {q: {ranked(S, q)[9 + q % 4]: 1} for q in range(len(queries))}  # a few documents above each
    labelled = {q: set(positives[q]) | {q, 37 + q % 2} for q in positives}
    want = {}
    for q in range(len(queries)):
        ceiling = 0.9 * min(S[q, d] for d in positives[q])
        want[q] = [d for d in ranked(S, q)[:15] if d not in labelled[q] and S[q, d] < ceiling][:6]
    assert sum(len(v) for v in want.values()) >= 10
    assert any(S[q, a] == S[q, b] for q, v in want.items() for a, b in zip(v[:-1], v[1:], strict=True))  # tied
    for chunk_docs, query_chunk in [(1000, 1000), (4, 3), (7, 1), (1, 11), (41, 2)]:
        encoder = IntegerEncoder(kind)
        got = mine_negatives(encoder, queries, docs, positives, 6, margin=0.9, depth=15, labelled=labelled,
                             chunk_docs=chunk_docs, query_chunk=query_chunk)
        assert got == want, (chunk_docs, query_chunk)
        assert encoder.queries_encoded == len(queries)  # each query chunk encoded once


@pytest.mark.slow
def test_mining_on_2_and_3_ranks_equals_one(tmp_path):
    results = {}
    for n in (1, 2, 3):
        torchrun(n, str(WORKER), str(tmp_path / f"mined{n}.json"), str(tmp_path / f"work{n}"))
        results[n] = (tmp_path / f"mined{n}.json").read_text()
    assert results[2] == results[1] and results[3] == results[1]
    assert not (tmp_path / "work2").exists()  # merged chunk files are removed


@pytest.mark.slow
def test_prebatch_on_2_ranks_writes_the_batches_of_one(tmp_path):
    beir = scifact_slice(tmp_path / "scifact", n_queries=14, extra_docs=10)
    tok = pretokenized(beir, tmp_path / "tok")
    digests = {}
    for n in (1, 2):
        out = tmp_path / f"out{n}"
        torchrun(n, *prebatch_cmd(tok, beir, out))
        digests[n] = batch_digest(out)
        assert not (out / ".mining").exists()
    assert digests[2] == digests[1] and len(digests[1]) > 4


@pytest.mark.slow
def test_kill_9_of_a_prebatch_rank_mid_mining_then_one_process_resumes(tmp_path):
    """Rank 1 of a 2-rank prebatch is SIGKILLed once corpus chunks are on disk: the launcher and rank 0 exit
    non-zero within seconds and nothing is committed; one process then reuses the finished chunks (it encodes
    fewer) and writes the bytes of an uninterrupted one-process run."""
    beir = scifact_slice(tmp_path / "scifact", n_queries=10, extra_docs=100)
    tok = pretokenized(beir, tmp_path / "tok")
    num_chunks = -(-len((beir / "corpus.jsonl").read_text().splitlines()) // 4)
    small = ["prebatch.mine_chunk_docs=4", "prebatch.mine_query_chunk=4"]  # 3 query chunks, ~28 corpus chunks
    torchrun(1, *prebatch_cmd(tok, beir, tmp_path / "one", *small))
    want = batch_digest(tmp_path / "one")
    out, log = tmp_path / "out", tmp_path / "killed.log"
    work = out / ".mining"
    with open(log, "w") as err:
        proc = subprocess.Popen(launch(2, *prebatch_cmd(tok, beir, out, *small, "ranks.dead_s=3")), env=_env(),
                                stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 120
    while len(list(work.glob("*.top_scores.npy"))) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if proc.poll() is not None:
        pytest.fail(log.read_text()[-3000:])
    exited_after = kill_rank(proc, 1, timeout=60)
    assert proc.returncode != 0 and exited_after < 30, log.read_text()[-3000:]
    assert re.search(r"rank 0: stopped by the launcher|rank 1 of 2 stopped responding", log.read_text())
    assert not (out / "metadata.json").exists() and not list(out.glob("batch_*"))
    finished = len(list(work.glob("*.top_scores.npy")))
    assert 2 <= finished < num_chunks and len(list(work.glob("queries.*.npy"))) == 3
    err = torchrun(1, *prebatch_cmd(tok, beir, out, *small))
    encoded = len(re.findall(r"encoding: \d+/\d+ docs", err))
    assert encoded == num_chunks - finished, err[-3000:]  # the killed run's chunks were reused
    assert batch_digest(out) == want and not work.exists()
