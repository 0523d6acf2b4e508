"""The fast encoder in training's evaluation and in prebatch mining: ``python bench/bench_bulk_encode.py``.

Issue 36 asks for the same fast encoder in ``train``'s evaluation and ``prebatch``'s mining, with texts/s
before and after. Both run their real code here, on the first ``--docs`` SciFact documents and the test
queries, once on the exact reference (``model.encoder_backend=reference``: before) and once as the product
runs them (``auto``: bulk work, bf16 where the CPU has native bfloat16, else ONNX):

- ``evaluation``: embedctl.train.evaluation.evaluate (encode the queries and the documents, exact search,
  trec_eval measures), as a training run's evaluation calls it; texts/s and nDCG@10 of both (the fast path
  must stay within 0.002).
- ``mining``: embedctl.prebatch.mining.mine_negatives (exact search over every document, ``--negatives``
  hard negatives per query), as prebatch calls it; texts/s and how many mined negatives the two agree on.

For the bi-encoder (minilm) and minilm as a ColBERT, on ``--threads`` CPU threads. Writes
bench/results/<machine kind>/bulk_encode.json (see resultfiles.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
from benchdata import find_scifact, queries_of  # noqa: E402
from resultfiles import write_result  # noqa: E402

from embedctl.config.sections.model import ModelConfig  # noqa: E402
from embedctl.models.encoder import load_encoder  # noqa: E402
from embedctl.prebatch.mining import mine_negatives  # noqa: E402
from embedctl.train.evaluation import EvalSet, evaluate  # noqa: E402


def slice_of(scifact: Path, docs: int) -> tuple[EvalSet, dict[int, dict[int, int]]]:
    """The first ``docs`` documents, the test queries with a relevant one among them; their positives."""
    rows = [json.loads(line) for line in (scifact / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:docs]]
    doc_ids = [r["_id"] for r in rows]
    where = {d: i for i, d in enumerate(doc_ids)}
    qids, texts, qrels = queries_of(scifact, "test")
    keep = [i for i, q in enumerate(qids) if any(d in where for d in qrels[q])]
    data = EvalSet([qids[i] for i in keep], [texts[i] for i in keep], doc_ids,
                   [((r.get("title") or "") + " " + r["text"]).strip() for r in rows],
                   {qids[i]: {d: s for d, s in qrels[qids[i]].items() if d in where} for i in keep})
    positives = {n: {where[d]: s for d, s in data.qrels[q].items()} for n, q in enumerate(data.query_ids)}
    return data, positives


def encoder_for(kind: str, backend: str, texts: int):
    return load_encoder(ModelConfig(kind=kind, encoder_backend=backend), device="cpu", texts=texts)


def run_evaluation(kind: str, backend: str, data: EvalSet) -> dict:
    texts = len(data.queries) + len(data.docs)
    # training's encoder: loaded without a text count, so on the reference; at `auto` its evaluation swaps in
    # bf16 for a large eval set (encode_backends.bulk_inference), at `reference` it stays there
    encoder = encoder_for(kind, backend, 0)
    started = time.perf_counter()
    metrics = evaluate(encoder, data, batch_size=32)
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 2), "texts_per_s": round(texts / seconds, 1),
            "nDCG@10": round(metrics["eval/nDCG@10"], 4)}


def run_mining(kind: str, backend: str, data: EvalSet, positives: dict, negatives: int) -> tuple[dict, dict]:
    texts = len(data.queries) + len(data.docs)
    encoder = encoder_for(kind, backend, texts)
    started = time.perf_counter()
    mined = mine_negatives(encoder, data.queries, data.docs, positives, negatives)
    seconds = time.perf_counter() - started
    return {"backend": encoder.backend_name, "seconds": round(seconds, 2),
            "texts_per_s": round(texts / seconds, 1)}, mined


def agreement(a: dict, b: dict) -> float:
    """Share of mined negatives (query, document) the two runs have in common."""
    pairs_a = {(q, d) for q, ds in a.items() for d in ds}
    pairs_b = {(q, d) for q, ds in b.items() for d in ds}
    return round(len(pairs_a & pairs_b) / max(1, len(pairs_a)), 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scifact", help="BEIR SciFact folder (default: ../shared/data/scifact)")
    ap.add_argument("--docs", type=int, default=1000, help="the first N documents (the auto threshold is 1,000 texts)")
    ap.add_argument("--kinds", default="biencoder,colbert")
    ap.add_argument("--negatives", type=int, default=4)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out", help="result file (default: bench/results/<machine kind>/bulk_encode.json)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data, positives = slice_of(find_scifact(args.scifact), args.docs)
    result: dict = {"docs": len(data.docs), "queries": len(data.queries), "threads": args.threads,
                    "load_average_at_start": os.getloadavg(), "kinds": {}}
    for kind in args.kinds.split(","):
        row: dict = {}
        before = run_evaluation(kind, "reference", data)
        after = run_evaluation(kind, "auto", data)
        row["evaluation"] = {"reference": before, "auto": after,
                             "speedup": round(after["texts_per_s"] / before["texts_per_s"], 2),
                             "nDCG@10_delta": round(after["nDCG@10"] - before["nDCG@10"], 4)}
        print(kind, "evaluation", row["evaluation"], flush=True)
        ref, ref_mined = run_mining(kind, "reference", data, positives, args.negatives)
        fast, fast_mined = run_mining(kind, "auto", data, positives, args.negatives)
        row["mining"] = {"reference": ref, "auto": fast, "speedup": round(fast["texts_per_s"] / ref["texts_per_s"], 2),
                         "negatives_in_common": agreement(ref_mined, fast_mined)}
        print(kind, "mining", row["mining"], flush=True)
        result["kinds"][kind] = row
    result["load_average_at_end"] = os.getloadavg()
    write_result("bulk_encode", result, args.out)


if __name__ == "__main__":
    main()
