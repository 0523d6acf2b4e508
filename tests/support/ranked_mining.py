"""Run by tests/prebatch/test_ranks_mining.py under torchrun: every rank mines the same small corpus with the real
minilm bi-encoder in corpus chunks of 8 documents and query chunks of 3 queries (several of each per rank);
rank 0 writes the result as JSON.

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/support/ranked_mining.py OUT.json WORK
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from embedctl.config.sections.model import ModelConfig
from embedctl.models.encoder import load_encoder
from embedctl.prebatch.ranked_mining import mine_chunked
from embedctl.util.ranks import Ranks

TOPICS = ["vitamin C and scurvy", "ranking functions", "dense vectors", "mitochondria", "protein folding",
          "ocean tides", "volcanoes", "jazz"]


def main() -> None:
    import torch

    torch.set_num_threads(1)
    docs = [f"Document {i} is about {TOPICS[i % len(TOPICS)]}, part {i // len(TOPICS)}." for i in range(60)]
    docs += ["An exact copy about jazz."] * 3  # equal scores: ties broken by document id
    queries = [f"what about {t}?" for t in TOPICS]
    positives = {q: {q: 1} for q in range(len(queries))}
    encoder = load_encoder(ModelConfig(doc_max_length=32, query_max_length=16))
    with Ranks.from_env("mining-test") as ranks:
        mined = mine_chunked(encoder, queries, docs, positives, 5, margin=1.5, depth=12, chunk_docs=8, query_chunk=3,
                             batch_size=4, ranks=ranks, work=Path(sys.argv[2]), key="test")
    if mined is not None:
        Path(sys.argv[1]).write_text(json.dumps(mined, sort_keys=True))


if __name__ == "__main__":
    main()
