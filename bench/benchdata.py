"""Where the benchmarks find BEIR SciFact, and a PLAID index's vectors (shared by the bench scripts)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def find_scifact(arg: str | Path | None = None) -> Path:
    """--scifact DIR, else $EMBEDCTL_SCIFACT, else ../shared/data/scifact beside the checkout."""
    for c in (arg, os.environ.get("EMBEDCTL_SCIFACT"), REPO.parent / "shared" / "data" / "scifact",
              "/work/shared/data/scifact"):
        if c and (Path(c) / "corpus.jsonl").is_file():
            return Path(c)
    sys.exit("SciFact not found: pass --scifact DIR or set EMBEDCTL_SCIFACT "
             "(a BEIR folder with corpus.jsonl, queries.jsonl, qrels/)")


def add_index_arguments(ap, queries: int) -> None:
    """The arguments of a bench over SciFact indexes: --index NAME=FOLDER (repeatable), --scifact, --queries."""
    ap.add_argument("--index", action="append", required=True, help="NAME=FOLDER of a PLAID index of SciFact documents")
    ap.add_argument("--scifact", help="BEIR SciFact folder (default: ../shared/data/scifact)")
    ap.add_argument("--queries", type=int, default=queries, help=f"first N test queries (default {queries})")


def queries_of(scifact: Path, split: str) -> tuple[list[str], list[str], dict]:
    """(qids sorted as numbers, their texts, qrels) of the queries judged in ``qrels/<split>.tsv``."""
    import json

    from embedctl.eval.io import read_qrels  # the caller has put the checkout on sys.path

    qrels = read_qrels(str(scifact / "qrels" / f"{split}.tsv"))
    texts = {}
    for line in (scifact / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["_id"] in qrels:
            texts[row["_id"]] = row["text"]
    qids = sorted(texts, key=int)
    return qids, [texts[q] for q in qids], qrels


HELD_OUT_QUERIES = 200  # the configs' held-out split of SciFact train: 200 queries out, the other 609 trained on
HELD_OUT_SEED = 42


def train_split(scifact: Path, held: int = HELD_OUT_QUERIES, seed: int = HELD_OUT_SEED) -> tuple[list[str], list[str]]:
    """(trained-on qids, held-out qids) of SciFact train, each sorted as numbers: ``held`` queries drawn with
    random.Random(seed) from the judged train queries (sorted as numbers). The models for hybrid fusion train
    on the first list (prebatch.qrels = a file from :func:`write_split_qrels`); fusion is chosen on the second."""
    import random

    from embedctl.eval.io import read_qrels  # the caller has put the checkout on sys.path

    qids = sorted(read_qrels(str(scifact / "qrels" / "train.tsv")), key=int)
    out = set(random.Random(seed).sample(qids, held))
    return [q for q in qids if q not in out], [q for q in qids if q in out]


def write_split_qrels(scifact: Path, folder: Path) -> tuple[Path, Path]:
    """qrels/train.tsv cut in two BEIR qrels files under ``folder``: train-fit.tsv (the queries trained on)
    and train-heldout.tsv (the held-out ones); header and lines kept as they are."""
    fit, held = train_split(scifact)
    lines = (scifact / "qrels" / "train.tsv").read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], [ln for ln in lines[1:] if ln.strip()]
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "train-fit.tsv", folder / "train-heldout.tsv"
    for path, keep in zip(paths, (set(fit), set(held)), strict=True):
        path.write_text("\n".join([header] + [r for r in rows if r.split("\t")[0] in keep]) + "\n", encoding="utf-8")
    return paths


def index_vectors(index: Path, count: int, seed: int = 0):
    """(the codec of a PLAID index folder, float32 [<= count, dim] of its chunk-0 vectors drawn seeded and
    decompressed: unit vectors as compression saw them, approximately). nbits 2, as the bench indexes are."""
    import numpy as np

    from embedctl.index.plaid.codec import Codec

    folder = Path(index) / "plaid"
    load = lambda name: np.load(folder / name)  # noqa: E731
    codec = Codec(centroids=load("centroids.npy"), avg_residual=load("avg_residual.npy"),
                  bucket_cutoffs=load("bucket_cutoffs.npy"), bucket_weights=load("bucket_weights.npy"), nbits=2)
    codes, residuals = load("0.codes.npy"), load("0.residuals.npy")
    pick = np.sort(np.random.default_rng(seed).choice(len(codes), min(count, len(codes)), replace=False))
    return codec, np.ascontiguousarray(codec.decompress(codes[pick], residuals[pick]), dtype=np.float32)
