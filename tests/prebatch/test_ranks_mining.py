"""Hard-negative mining and `embedctl prebatch` on 2 and 3 gloo ranks (CPU, one thread each): the same result
and the same batch files as one process."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.datahelpers import scifact_slice

from embedctl.config import load_config
from embedctl.data.pretokenize import run_pretokenize
from embedctl.prebatch.ranked_mining import best_first

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "support" / "ranked_mining.py"


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return env


def torchrun(n: int, *args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n),
                           *args], env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_best_first_breaks_ties_by_document_id():
    scores = torch.tensor([[0.5, 0.9, 0.5, 0.9, 0.1]])
    ids = torch.arange(10, 15).expand(1, -1)
    s, i = best_first(scores, ids, 4)
    assert i.tolist() == [[11, 13, 10, 12]] and s[0].tolist() == pytest.approx([0.9, 0.9, 0.5, 0.5])


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
    run_pretokenize(load_config(None, [f"pretokenize.input={beir}", f"pretokenize.output={tmp_path / 'tok'}",
                                       "model.doc_max_length=48", "model.query_max_length=24"]))
    digests = {}
    for n in (1, 2):
        out = tmp_path / f"out{n}"
        torchrun(n, "-m", "embedctl", "prebatch", "--input", str(tmp_path / "tok"), "--qrels",
                 str(beir / "qrels" / "train.tsv"), "--output", str(out), "prebatch.negatives_per_query=2",
                 "prebatch.queries_per_batch=5", "prebatch.mine_depth=10", "model.doc_max_length=48",
                 "model.query_max_length=24")
        digests[n] = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
                      for p in sorted(out.rglob("*")) if p.is_file() and (p.name == "report.json"
                                                                          or p.parent.name.startswith("batch_"))}
        meta = json.loads((out / "metadata.json").read_text())
        meta["config"].pop("output")
        digests[n]["metadata.json"] = json.dumps(meta, sort_keys=True)
        assert not (out / ".mining").exists()
    assert digests[2] == digests[1] and len(digests[1]) > 4
