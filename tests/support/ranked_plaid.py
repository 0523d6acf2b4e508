"""Run by tests/index/test_ranks.py under torchrun (or as plain processes with RANK/WORLD_SIZE set): every
rank calls build_plaid_index on the same synthetic collection, with the synthetic encoder, so the engine's
rank logic (sample groups, chunks, k-means on rank 0, fragments, IVF) runs without the model.

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/support/ranked_plaid.py OUT [KILL_AT_CHUNK] [key=value ...]

``KILL_AT_CHUNK``: rank 1 (rank 0 with one rank) kills itself with SIGKILL as it starts its KILL_AT_CHUNK-th chunk
(1-based), so that chunk is left half done. ``key=value``: config overrides for the ``ranks`` section
(``ranks.dead_s=3``), as on embedctl's command line.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from embedctl.config import load_config  # noqa: E402
from embedctl.config.sections.index import IndexConfig  # noqa: E402
from embedctl.index import plaid_indexer  # noqa: E402
from embedctl.index.build import build_plaid_index  # noqa: E402
from embedctl.util.ranks import Ranks  # noqa: E402
from support.synthetic import SyntheticEncoder  # noqa: E402

NUM_DOCS, SAMPLE = 3000, 2100  # 3 sample groups of up to 1024 documents; 900 documents encoded in their chunks


def docs() -> list[str]:
    return [f"document {i} about topic {i % 37} and {i % 11}" for i in range(NUM_DOCS)]


def main() -> None:
    import torch

    torch.set_num_threads(1)
    out = Path(sys.argv[1])
    overrides = [a for a in sys.argv[2:] if "=" in a]
    positional = [a for a in sys.argv[2:] if "=" not in a]
    kill_at = int(positional[0]) if positional else None
    timing = load_config(None, overrides).cfg.ranks
    cfg = IndexConfig(nbits=2, chunk_size=250, batch_size=64, kmeans_niters=2, backend="reference")
    with Ranks.from_env("test", dead_s=timing.dead_s, wait_s=timing.wait_s) as ranks:
        if kill_at is not None and ranks.rank == min(1, ranks.world - 1):
            original = plaid_indexer.PlaidIndexer.write_chunk
            done = []

            def die_in_chunk(self, *args, **kwargs):
                done.append(args[0])
                if len(done) >= kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                return original(self, *args, **kwargs)

            plaid_indexer.PlaidIndexer.write_chunk = die_in_chunk
        result = build_plaid_index(SyntheticEncoder(dim=32, num_topics=64, mean_len=12), docs(), out, cfg,
                                   progress=False, sample_docs=SAMPLE, ranks=ranks)
    print(f"rank {ranks.rank}: {result.get('num_chunks', '')}", flush=True)


if __name__ == "__main__":
    main()
