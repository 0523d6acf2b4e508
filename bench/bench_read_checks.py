"""The cost of checking files on the paths users run (issue 33): each reader checks the sha256 recorded
when the file was written before it trusts the bytes.

    python bench/bench_read_checks.py [--docs 1000 | --index DIR] [--rounds 3] [--work bench/work/read_checks] [--out FILE]

Measures, checked (A) and unchecked (B) in alternation (A B A B ...) in one process, so both meet the same
host load:

- ``hash``: GB/s of sha256 (the recorded checksum), crc32 and blake2b over 64 MiB in memory: the choice;
- ``prebatch``: `embedctl prebatch` of SciFact train over the whole SciFact token cache (documents/s of the
  cache); unchecked = the token cache's chunk reader without the sha256 (the code before the check);
- ``search_open``: opening a PLAID index of the first ``--docs`` SciFact documents (the generation and every
  array: what search does before its first query), with and without the content check, next to loading
  the encoder; and the model identity: the old signature (first/last 64 KiB), the full sha256 uncached,
  the full sha256 from the per-file cache (what every open after the first pays);
- ``resume``: the check of a step checkpoint of the bundled MiniLM (weights + Adam state) against what
  reading it for a resume costs (the model and the optimizer state loaded).

Fixtures (a token cache, batches, a PLAID index, a one-step training run) are built under ``--work`` once.
Writes --out (default bench/results/<machine-kind>/read_checks.json) and the raw run under bench/work/runs/.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import time
import zlib
from pathlib import Path

from benchdata import find_scifact
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def cli(*args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "embedctl", *args], check=True, cwd=REPO, env=env)


def fixtures(scifact: Path, work: Path, docs: int, index: str | None) -> dict[str, Path]:
    work.mkdir(parents=True, exist_ok=True)
    out = {"tokens": work / "tokens", "batches": work / "batches", "index": work / "indexes" / f"plaid{docs}",
           "train": work / "train"}
    if index:  # a copy of an existing PLAID index (read only here, but copied: nothing of it is touched)
        out["index"] = work / "indexes" / Path(index).name
        if not (out["index"] / "embedctl_index.json").is_file():
            shutil.copytree(index, out["index"])
    if not (out["tokens"] / "documents" / "ledger.json").is_file():
        cli("pretokenize", "--input", str(scifact), "--output", str(out["tokens"]))
    if not (out["batches"] / "metadata.json").is_file():
        cli("prebatch", f"prebatch.input={out['tokens']}", f"prebatch.qrels={scifact / 'qrels' / 'train.tsv'}",
            f"prebatch.output={out['batches']}", "prebatch.queries_per_batch=8")
    if not (out["index"] / "embedctl_index.json").is_file():
        corpus = work / f"corpus{docs}.jsonl"
        with open(scifact / "corpus.jsonl", encoding="utf-8") as src:
            corpus.write_text("".join(itertools.islice(src, docs)), encoding="utf-8")
        cli("index", "model.kind=colbert", "--collection", str(corpus), "--root", str(out["index"].parent),
            "--name", out["index"].name)
    if not list((out["train"] / "checkpoints").glob("step_*")):
        cli("train", f"data.path={out['batches']}", f"output.dir={out['train']}", "train.max_steps=1",
            "train.save_every=1", "output.overwrite=true")
    return out


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def alternate(rounds: int, checked, unchecked) -> dict:
    """A B A B ...: seconds of each, and the ratio A / B round by round (then its median)."""
    a, b = [], []
    for _ in range(rounds):
        a.append(timed(checked))
        b.append(timed(unchecked))
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    return {"checked_s": a, "unchecked_s": b, "checked_median_s": statistics.median(a),
            "unchecked_median_s": statistics.median(b), "ratio_median": statistics.median(ratios)}


def hash_rates(size: int = 64 << 20, rounds: int = 3) -> dict:
    data = os.urandom(size)
    fns = {"sha256": lambda: hashlib.sha256(data).digest(), "crc32": lambda: zlib.crc32(data),
           "blake2b": lambda: hashlib.blake2b(data).digest()}
    return {name: round(size / min(timed(fn) for _ in range(rounds)) / 1e9, 3) for name, fn in fns.items()}


def bench_prebatch(paths: dict, scifact: Path, rounds: int) -> dict:
    from embedctl.config import load_config
    from embedctl.data import token_cache as tc
    from embedctl.data.formats import read_parquet
    from embedctl.data.token_cache import REBUILD_HINT, chunk_name, open_token_cache
    from embedctl.prebatch.build import run_prebatch

    checked_chunk = tc.TokenCache._chunk

    def unchecked_chunk(self, kind, c, columns=None):  # the reader before the check
        return read_parquet(self.fs, tc.join(self.path, kind, chunk_name(c)), columns, hint=REBUILD_HINT)

    out = paths["batches"].parent / "batches-bench"
    loaded = load_config(None, [f"prebatch.input={paths['tokens']}", f"prebatch.qrels={scifact / 'qrels' / 'train.tsv'}",
                                f"prebatch.output={out}", "prebatch.queries_per_batch=8", "prebatch.overwrite=true"])

    def run(chunk):
        def go():
            tc.TokenCache._chunk = chunk
            try:
                run_prebatch(loaded)
            finally:
                tc.TokenCache._chunk = checked_chunk
        return go

    docs = len(open_token_cache(str(paths["tokens"]), "documents"))
    res = alternate(rounds, run(checked_chunk), run(unchecked_chunk))
    cache_bytes = sum(p.stat().st_size for p in paths["tokens"].rglob("*.parquet"))
    return {**res, "documents": docs, "token_cache_bytes": cache_bytes,
            "checked_docs_per_s": docs / res["checked_median_s"], "unchecked_docs_per_s": docs / res["unchecked_median_s"]}


def bench_search_open(paths: dict, rounds: int) -> dict:
    from embedctl.index import meta as M
    from embedctl.index.generations import open_generation
    from embedctl.index.plaid_files import open_plaid
    from embedctl.models.encoder import load_encoder
    from embedctl.models.weights_identity import legacy_signature, weights_identity

    index = paths["index"]
    meta = M.read_metadata(index)
    res = alternate(rounds, lambda: open_plaid(open_generation(index, check=True)),
                    lambda: open_plaid(open_generation(index, check=False)))
    model = meta["model"]["path"]
    weights_identity(model)  # fills the cache
    identity = {
        "legacy_signature_s": statistics.median(timed(lambda: legacy_signature(model)) for _ in range(rounds)),
        "full_uncached_s": statistics.median(timed(lambda: weights_identity(model, use_cache=False)) for _ in range(rounds)),
        "full_cached_s": statistics.median(timed(lambda: weights_identity(model)) for _ in range(rounds)),
    }
    encoder_s = statistics.median(timed(lambda: load_encoder(M.model_config(meta, "cpu"))) for _ in range(rounds))
    index_bytes = sum(p.stat().st_size for p in index.rglob("*") if p.is_file())
    return {"index_open": res, "index_bytes": index_bytes, "documents": meta["num_docs"],
            "load_encoder_s": encoder_s, "weights_identity": identity,
            "open_total_checked_s": res["checked_median_s"] + encoder_s + identity["full_cached_s"],
            "open_total_before_s": res["unchecked_median_s"] + encoder_s + identity["legacy_signature_s"]}


def bench_resume(paths: dict, rounds: int) -> dict:
    import torch

    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.encoder import load_encoder
    from embedctl.train.checkpoint import list_checkpoints, verify_checkpoint

    ckpt = list_checkpoints(paths["train"])[-1]

    def load():
        load_encoder(ModelConfig(name_or_path=str(ckpt / "model")), device="cpu", train=True)
        torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=True)

    res = alternate(rounds, lambda: (verify_checkpoint(ckpt), load()), load)
    ckpt_bytes = sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file())
    return {**res, "checkpoint_bytes": ckpt_bytes, "checkpoint": ckpt.name}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--index", default=None, help="an existing PLAID index to copy and open (else one of --docs is built)")
    ap.add_argument("--work", default=str(REPO / "bench" / "work" / "read_checks"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    scifact = find_scifact()
    paths = fixtures(scifact, Path(args.work), args.docs, args.index)
    result = {"hash_gb_per_s": hash_rates(), "prebatch": bench_prebatch(paths, scifact, args.rounds),
              "search_open": bench_search_open(paths, args.rounds), "resume": bench_resume(paths, args.rounds),
              "note": "A (checked) and B (unchecked) alternate in one process; the host was shared and loaded, "
                      "so read the ratios, not the seconds"}
    write_result("read_checks", result, args.out)


if __name__ == "__main__":
    main()
