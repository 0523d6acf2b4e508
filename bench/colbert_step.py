"""Time whole ColBERT training steps in one process (a profiling aid: prints, writes no result file).

    python bench/colbert_step.py [--repo PATH] [--batches bench/work/colbert/colbert-batches] [--steps 6]

One step = the train loop's work on one batch of configs/colbert_scifact.yaml: pad, encode queries and
documents in passes of ``--chunk`` texts, MaxSim InfoNCE (temperature 1), backward; no optimizer step. One
thread; the first step is a warm-up, not counted. ``--repo`` imports embedctl from another checkout (e.g. a
``git worktree`` of the base commit), so two versions can be timed side by side with farm-bench:

    farm-bench -n 4 --warmup 0 --timeout 950 --vs "python bench/colbert_step.py --repo /tmp/base" \
        -- python bench/colbert_step.py

The batches come from ``python bench/bench_colbert.py --only colbert`` (its prebatch step).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repo", type=Path, default=REPO, help="checkout whose embedctl is timed")
    p.add_argument("--batches", type=Path, default=REPO / "bench" / "work" / "colbert" / "colbert-batches")
    p.add_argument("--steps", type=int, default=6, help="timed steps, after one warm-up step")
    p.add_argument("--chunk", type=int, default=8, help="train.forward_chunk_size: texts per forward pass")
    args = p.parse_args()
    sys.path.insert(0, str(args.repo.resolve()))
    import torch

    from embedctl.config import load_config
    from embedctl.data.batches import BatchStream
    from embedctl.models.encoder import load_encoder
    from embedctl.train.losses.infonce import info_nce_loss, maxsim_scorer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = load_config(str(REPO / "configs" / "colbert_scifact.yaml"), []).cfg
    enc = load_encoder(cfg.model, train=True)
    enc.forward_chunk_size = args.chunk
    stream = iter(BatchStream(str(args.batches), seed=42, prefetch=0))
    batches = [next(stream) for _ in range(args.steps + 1)]

    def step(batch) -> None:
        q_ids, q_att = enc.tokenizer.pad([t.tolist() for t in batch.query_tokens], "query")
        d_ids, d_att = enc.tokenizer.pad([t.tolist() for t in batch.document_tokens], "document")
        q, d = enc(q_ids, q_att, "query"), enc(d_ids, d_att, "document")
        loss, _ = info_nce_loss(q.embeddings, d.embeddings, torch.as_tensor(batch.relevance), temperature=1.0,
                                score_fn=maxsim_scorer(d.mask, q.mask))
        loss.backward()
        enc.zero_grad(set_to_none=True)

    step(batches[0])
    times = []
    for batch in batches[1:]:
        t0 = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - t0)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"s/step {sum(times) / len(times):.3f} over {len(times)} steps {[round(t, 2) for t in times]}; "
          f"peak RSS {usage.ru_maxrss / 1024:.0f} MiB, {usage.ru_minflt} minor faults ({args.repo})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
