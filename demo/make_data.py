"""Build the demo's SciFact slice (under 2 MB) from a full BEIR SciFact folder.

    python demo/make_data.py [../shared/data/scifact] [demo/data/scifact-mini]

Deterministic: the same input gives the same slice. Takes train and test queries with their relevant
abstracts and fills up with seeded random distractor abstracts.
"""

from __future__ import annotations

import csv
import json
import random
import sys
from pathlib import Path

N_TRAIN_QUERIES = 240
N_TEST_QUERIES = 80
N_DOCS = 1000
SEED = 13

LICENSE = """# SciFact mini (demo slice)

A deterministic slice of BEIR SciFact made by `demo/make_data.py` from the full BEIR folder:
{n_train} train queries and {n_test} test queries with their relevant abstracts, plus seeded random
distractor abstracts, {n_docs} abstracts in all.

- Origin: SciFact (Wadden et al., "Fact or Fiction: Verifying Scientific Claims", EMNLP 2020), as
  packaged by BEIR (Thakur et al., NeurIPS 2021 Datasets and Benchmarks).
- License: claims (queries) CC BY-NC 2.0; abstracts from S2ORC under ODC-By. Non-commercial use of the
  claims only; keep this note with the files.
- Files: corpus.jsonl (`_id`, `title`, `text`), queries.jsonl (`_id`, `text`), qrels/train.tsv and
  qrels/test.tsv (`query-id  corpus-id  score`, tab-separated, with header).
"""


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    with path.open() as fh:
        rows = csv.reader(fh, delimiter="\t")
        next(rows)
        for qid, did, score in rows:
            out.setdefault(qid, {})[did] = int(score)
    return out


def write_qrels(path: Path, qrels: dict[str, dict[str, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid in sorted(qrels, key=int):
            for did, score in sorted(qrels[qid].items()):
                fh.write(f"{qid}\t{did}\t{score}\n")


def main(src: Path, dst: Path) -> None:
    rng = random.Random(SEED)
    train, test = read_qrels(src / "qrels/train.tsv"), read_qrels(src / "qrels/test.tsv")
    train = {q: train[q] for q in rng.sample(sorted(train, key=int), N_TRAIN_QUERIES)}
    test = {q: test[q] for q in rng.sample(sorted(test, key=int), N_TEST_QUERIES)}
    corpus = [json.loads(line) for line in (src / "corpus.jsonl").open()]
    needed = {d for qrels in (train, test) for docs in qrels.values() for d in docs}
    others = sorted(d["_id"] for d in corpus if d["_id"] not in needed)
    keep = needed | set(rng.sample(others, N_DOCS - len(needed)))
    dst.mkdir(parents=True, exist_ok=True)
    with (dst / "corpus.jsonl").open("w") as fh:
        for doc in corpus:
            if doc["_id"] in keep:
                fh.write(json.dumps({"_id": doc["_id"], "title": doc["title"], "text": doc["text"]}) + "\n")
    wanted = set(train) | set(test)
    with (dst / "queries.jsonl").open("w") as fh:
        for line in (src / "queries.jsonl").open():
            query = json.loads(line)
            if query["_id"] in wanted:
                fh.write(json.dumps({"_id": query["_id"], "text": query["text"]}) + "\n")
    write_qrels(dst / "qrels/train.tsv", train)
    write_qrels(dst / "qrels/test.tsv", test)
    (dst / "README.md").write_text(LICENSE.format(n_train=len(train), n_test=len(test), n_docs=len(keep)))
    size = sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
    print(f"wrote {dst}: {len(keep)} abstracts, {len(train)} train + {len(test)} test queries, {size / 1e6:.2f} MB")


if __name__ == "__main__":
    repo = Path(__file__).resolve().parents[1]
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else repo.parent / "shared/data/scifact"
    target = Path(sys.argv[2]) if len(sys.argv) > 2 else repo / "demo/data/scifact-mini"
    main(source, target)
