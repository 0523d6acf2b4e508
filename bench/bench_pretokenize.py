"""Pretokenize throughput: `embedctl pretokenize` end to end vs raw `tokenizers` batch encoding.

    python bench/bench_pretokenize.py [--scifact DIR] [--workers 1] [--repeat 3] [--out FILE]

Both sides tokenize the same texts (SciFact corpus: title + " " + text, and the queries) with the same
Rust tokenizer, truncation and the same cores (TOKENIZERS_PARALLELISM on, both use the Rust thread
pool). The raw side starts from texts already in memory and only calls ``Tokenizer.encode_batch`` (and
takes the id lists out of the encodings);
embedctl's side reads and validates the JSONL, hashes ids, tokenizes through TextTokenizer, and writes
parquet chunks, id maps and ledgers. Tokenizer loading is excluded from both. Best of ``--repeat`` runs.
Also ``truncated_documents``: the corpus as a ColBERT index tokenizes it (doc_max_length 180, where most
abstracts are truncated), TextTokenizer.encode_documents (long texts read from a prefix: embedctl/models/
text_prefix.py) against encode_batch of the whole texts on the same truncating tokenizer, the ids compared.
Writes tokens/s for both and the ratio (target >= 0.9) to --out (default bench/results/<machine-kind>/
pretokenize.json) and the run under bench/work/runs/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchdata import find_scifact
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def texts_of(path: Path, use_title: bool = True) -> list[str]:
    out = []
    for line in path.read_text().splitlines():
        obj = json.loads(line)
        title = obj.get("title") or ""
        out.append(f"{title} {obj['text']}" if use_title and title else obj["text"])
    return out


def raw_run(tok, side_texts: dict[str, list[str]], budgets: dict[str, int]) -> tuple[float, int]:
    from tokenizers import Tokenizer

    tokens, elapsed = 0, 0.0
    for side, texts in side_texts.items():
        backend = Tokenizer.from_str(tok.tokenizer.backend_tokenizer.to_str())
        backend.no_padding()
        backend.enable_truncation(max_length=budgets[side])
        t0 = time.perf_counter()
        ids = [e.ids for e in backend.encode_batch(texts, add_special_tokens=True)]  # the output: id lists
        elapsed += time.perf_counter() - t0
        tokens += sum(len(x) for x in ids)
    return elapsed, tokens


def embedctl_run(scifact: Path, out: Path, workers: int) -> tuple[float, int]:
    from embedctl.config import load_config
    from embedctl.data.pretokenize import run_pretokenize

    loaded = load_config(None, [f"pretokenize.input={scifact}", f"pretokenize.output={out}",
                                f"pretokenize.workers={workers}", "model.query_max_length=64"])
    import embedctl.data.pretokenize as engine

    tokenizer = engine.make_tokenizer(loaded.cfg.model)
    original = engine.make_tokenizer
    engine.make_tokenizer = lambda cfg: tokenizer  # loading the tokenizer is not part of the measurement
    try:
        t0 = time.perf_counter()
        ledgers = run_pretokenize(loaded)
        elapsed = time.perf_counter() - t0
    finally:
        engine.make_tokenizer = original
    tokens = sum(ch["tokens"] for led in ledgers for ch in led["chunks"].values())
    return elapsed, tokens


def truncated_run(texts: list[str], repeat: int) -> dict:
    """ColBERT documents at doc_max_length 180: embedctl's ids (a prefix of each long text) against the whole
    texts' on the same truncating Rust tokenizer; best of ``repeat`` each, alternating."""
    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.tokenization import TextTokenizer

    tok = TextTokenizer(ModelConfig(kind="colbert", doc_max_length=180))
    backend = tok._backend("document")
    whole_s, prefix_s = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        whole = [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
        t1 = time.perf_counter()
        ours = tok.encode_documents(texts)
        prefix_s.append(time.perf_counter() - t1)
        whole_s.append(t1 - t0)
    head, tail = tok.prefix_ids + tok.marker_ids["document"], tok.suffix_ids
    return {"doc_max_length": 180, "whole_texts_s": round(min(whole_s), 3), "embedctl_s": round(min(prefix_s), 3),
            "ratio": round(min(prefix_s) / min(whole_s), 3), "same_ids": ours == [head + r + tail for r in whole],
            "runs": {"whole_texts_s": [round(t, 3) for t in whole_s], "embedctl_s": [round(t, 3) for t in prefix_s]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scifact")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None, help="result file (default: the latest for this machine kind)")
    args = ap.parse_args()
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    scifact = find_scifact(args.scifact)

    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.tokenization import TextTokenizer

    tok = TextTokenizer(ModelConfig(query_max_length=64))
    side_texts = {"document": texts_of(scifact / "corpus.jsonl"), "query": texts_of(scifact / "queries.jsonl")}
    budgets = {"document": tok.max_length("document"), "query": tok.max_length("query")}
    raw, ours = [], []
    work = Path(tempfile.mkdtemp(prefix="embedctl-bench-pretok-"))
    try:
        for i in range(args.repeat):
            raw.append(raw_run(tok, side_texts, budgets))
            out = work / f"run{i}"
            ours.append(embedctl_run(scifact, out, args.workers))
            shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    raw_t, raw_tokens = min(raw)
    our_t, our_tokens = min(ours)
    result = {
        "dataset": "SciFact corpus + queries", "documents": len(side_texts["document"]),
        "queries": len(side_texts["query"]), "workers": args.workers, "cores": os.cpu_count(),
        "load_average_at_start": os.getloadavg()[0],
        "raw_tokenizers": {"seconds": round(raw_t, 3), "tokens": raw_tokens, "tokens_per_s": round(raw_tokens / raw_t)},
        "embedctl_pretokenize": {"seconds": round(our_t, 3), "tokens": our_tokens, "tokens_per_s": round(our_tokens / our_t)},
        "ratio": round((our_tokens / our_t) / (raw_tokens / raw_t), 3), "target": 0.9,
        "runs": {"raw_s": [round(t, 3) for t, _ in raw], "embedctl_s": [round(t, 3) for t, _ in ours]},
        "truncated_documents": truncated_run(side_texts["document"], args.repeat),
    }
    print(json.dumps(result, indent=2))
    write_result("pretokenize", result, args.out)


if __name__ == "__main__":
    main()
