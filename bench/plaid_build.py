"""PLAID engine alone: ``python bench/plaid_build.py build --collection corpus.jsonl --out DIR [options]``.

A bench and test tool, not shipped in the package (users run ``embedctl index``): builds an index folder
through ``build_plaid_index`` (embedctl_index.json + plaid/, built in ``.<out>.building`` with its ledger:
a rerun resumes) and prints one JSON summary on stdout (sizes, timings, resumed chunks, peak_rss_mb).
tests/index/test_plaid_index.py kills it with SIGKILL mid-build; bench_plaid.py and plaid_seeds.py time it.
Reads BEIR corpus.jsonl (title + " " + text) or ColBERT TSV (pid, text[, title]).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's embedctl, run from anywhere

from embedctl.config.sections.index import IndexConfig  # noqa: E402
from embedctl.config.sections.model import ModelConfig  # noqa: E402
from embedctl.errors import EmbedctlError  # noqa: E402
from embedctl.index.build import build_plaid_index  # noqa: E402
from embedctl.models.encoder import load_encoder  # noqa: E402


def read_texts(path: str, limit: int | None = None) -> list[str]:
    """Document texts in file order from a BEIR corpus.jsonl or a ColBERT TSV."""
    texts: list[str] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if limit is not None and len(texts) >= limit:
                break
            if not line.strip():
                continue
            if path.endswith(".jsonl"):
                row = json.loads(line)
                title, text = row.get("title") or "", row.get("text") or ""
            else:
                parts = line.rstrip("\n").split("\t")
                text, title = parts[1], parts[2] if len(parts) > 2 else ""
            texts.append(f"{title} {text}".strip())
    return texts


def emulate_avx2() -> None:
    """What an AVX2-only CPU gets: no VNNI or AMX assignment kernels, no native bfloat16 encoder."""
    from embedctl.index.plaid import kernels
    from embedctl.models import encode_backends

    kernels.vnni_available = lambda: False
    kernels.amx_available = lambda: False
    encode_backends._bf16_unavailable = lambda encoder: "emulating a CPU with AVX2 and no AVX-512"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/plaid_build.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="encode a collection with a ColBERT model and write a PLAID index")
    b.add_argument("--collection", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--model", default="minilm")
    b.add_argument("--limit", type=int, default=None, help="only the first N documents")
    b.add_argument("--nbits", type=int, default=2)
    b.add_argument("--chunk-size", type=int, default=None)
    b.add_argument("--sample-docs", type=int, default=None)
    b.add_argument("--doc-max-length", type=int, default=180)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--kmeans-points-per-centroid", type=int, default=32)
    b.add_argument("--assign-precision", default="auto", choices=["auto", "fp32", "bf16", "int16", "int8"])
    b.add_argument("--threads", type=int, default=None)
    b.add_argument("--device", default="cpu", help="where the encoder and the backend run (cuda: the torch backend)")
    b.add_argument("--no-progress", action="store_true")
    b.add_argument("--emulate-avx2", action="store_true",
                   help="choose as on a CPU with AVX2 and no AVX-512: the AVX2 int16 assignment kernel (auto "
                        "precision) and the ONNX encoder (auto backend); ONNX Runtime still runs this CPU's widest "
                        "instructions, so encoding is faster than on a real AVX2 host and rest / encode reads high")
    args = p.parse_args(argv)
    if args.emulate_avx2:
        emulate_avx2()
    try:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        model_cfg = ModelConfig(name_or_path=args.model, kind="colbert", doc_max_length=args.doc_max_length)
        encoder = load_encoder(model_cfg, device=args.device)
        cfg = IndexConfig(nbits=args.nbits, chunk_size=args.chunk_size, seed=args.seed,
                          kmeans_points_per_centroid=args.kmeans_points_per_centroid,
                          assign_precision=args.assign_precision)
        summary = build_plaid_index(encoder, read_texts(args.collection, args.limit), args.out, cfg,
                                    progress=not args.no_progress, sample_docs=args.sample_docs,
                                    device=None if args.device == "cpu" else args.device)
    except EmbedctlError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    import resource

    summary["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: KiB
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
