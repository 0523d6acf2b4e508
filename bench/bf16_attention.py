"""The bf16 encode backend's attention kernel (embedctl/models/_bf16_attention.c, sequences of up to 512
tokens) against SDPA, the path it replaces, in one run: ``python bench/bf16_attention.py`` -> bf16_attention.

- ``layer``: one 32-token MiniLM layer's attention (12 heads of 32), from the fused projection's output to the
  next projection's input: SDPA with its views and copy, against the kernel; median of many calls.
- ``queries``: a 32-token ColBERT query's encoding, text in -> vectors out, one query per call, on 1 and 2
  threads; kernel and SDPA interleaved query by query on the same loaded encoder (the twin's attention
  modules switched between the two), ``--rounds`` passes over SciFact's test queries.
- ``documents``: the first ``--docs`` SciFact documents (doc_max_length 180) encoded in batches of 32 on
  ``--doc-threads`` threads, kernel and SDPA alternating batch by batch: documents/s of each.
- ``fidelity``: every test query and those documents encoded with the kernel and with SDPA: per-vector
  cosine between the two and against the fp32 reference encoder (the encode backends' bound: >= 0.999).

minilm as an untrained ColBERT, or ``--checkpoint`` (a trained ColBERT: configs/colbert_scifact.yaml's
model). ``--fusion gelu``: the same A/B for the feed-forward's GELU fused into its product
(encode_backends.PackedBf16GeluLinear) against the separate GELU; ``--fusion stack``: the twin run as one
stack of torch calls (encode_backends.Bf16Stack) against its modules under autocast (the same bits); ``--fusion
amx``: the kernel on AMX tiles (its default on a CPU with them) against its AVX-512 path; ``--fusion norm``: each
residual LayerNorm and the cast after it in one pass (embedctl.models.bf16_norm) against torch's three; ``--fusion
linear``: a query's products (but the GELU one) on AMX tiles (embedctl.models.bf16_linear, the same bits) against
oneDNN's packed products ("kernel" and "sdpa" in the result name the two sides of whichever A/B ran). The host may be loaded: compare the ratios taken in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from bench_encoder import corpus_texts, cosines  # noqa: E402
from benchdata import find_scifact, queries_of  # noqa: E402
from resultfiles import write_result  # noqa: E402

from embedctl.config.sections.model import ModelConfig  # noqa: E402
from embedctl.models import bf16_attention, bf16_linear  # noqa: E402
from embedctl.models.encode_backends import PackedBf16GeluLinear  # noqa: E402
from embedctl.models.encoder import load_encoder  # noqa: E402
from embedctl.models.native_bert import FusedQKVAttention  # noqa: E402

FUSION = {"what": "attention"}  # --fusion: which of the bf16 twin's fast paths the A/B switches


def switch(encoder, on: bool) -> None:
    for module in encoder._runner._backbone().modules():
        if FUSION["what"] == "attention" and isinstance(module, FusedQKVAttention):
            module.attention_kernel = on
        if FUSION["what"] == "gelu" and isinstance(module, PackedBf16GeluLinear):
            module.fused = on
    if FUSION["what"] == "stack":
        encoder._runner._stack.enabled = on
    if FUSION["what"] == "amx":
        bf16_attention.tiles = on
    if FUSION["what"] == "norm":
        encoder._runner._stack.norm_kernel = on
    if FUSION["what"] == "linear":
        bf16_linear.tiles = on


def median_us(fn, calls: int) -> float:
    for _ in range(calls // 10):
        fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return round(1e6 * statistics.median(times), 2)


def layer(calls: int) -> dict:
    torch.set_num_threads(1)
    b, n, heads, dim = 1, 32, 12, 32
    qkv = torch.randn(b, n, 3 * heads * dim).bfloat16()

    def sdpa():
        q, k, v = qkv.view(b, n, 3, heads, dim).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, heads * dim)

    with torch.inference_mode():
        return {"shape": [b, n, heads, dim], "threads": 1, "sdpa_us": median_us(sdpa, calls),
                "kernel_us": median_us(lambda: bf16_attention.attention(qkv, heads), calls)}


def interleaved_us(paths: dict, many: int) -> dict:
    """Median microseconds of each of ``paths`` (name -> call), the calls alternating in turn order, the first
    tenth of the rounds a warm-up."""
    times: dict = {name: [] for name in paths}
    names = list(paths)
    for i in range(many + many // 10):
        for name in (names if i % 2 == 0 else names[::-1]):
            t = time.perf_counter()
            paths[name]()
            if i >= many // 10:
                times[name].append(time.perf_counter() - t)
    return {name: round(1e6 * statistics.median(v), 2) for name, v in times.items()}


def layer_paths(calls: int) -> dict:
    """--fusion amx: one 32-token query layer and one batch of 32 documents of 180 tokens (12 heads of 32), the
    kernel on AMX tiles against its AVX-512 path, one thread, calls interleaved."""
    torch.set_num_threads(1)
    out = {}
    for name, (b, n), many in (("query_layer", (1, 32), calls), ("document_batch", (32, 180), max(10, calls // 300))):
        qkv = torch.randn(b, n, 3 * 12 * 32).bfloat16()
        med = interleaved_us({path: (lambda path=path, qkv=qkv: bf16_attention.attend(qkv, 12, None, path))
                              for path in ("amx", "avx512")}, many)
        out[name] = {"shape": [b, n, 12, 32], "amx_us": med["amx"], "avx512_us": med["avx512"],
                     "amx_over_avx512": round(med["amx"] / med["avx512"], 3)}
    return out


def norm_layer(calls: int) -> dict:
    """--fusion norm: one residual LayerNorm and cast of a query (32 tokens) and of a batch of 32 documents of 180
    tokens (H 384), the one-pass kernel against torch's add, layer_norm and cast, one thread, calls interleaved."""
    from embedctl.models import bf16_norm

    torch.set_num_threads(1)
    out = {}
    for name, (b, n), many in (("query", (1, 32), calls), ("document_batch", (32, 180), max(10, calls // 30))):
        y, x = torch.randn(b, n, 384).bfloat16(), torch.randn(b, n, 384)
        norm = ((384,), torch.ones(384), torch.zeros(384), 1e-12)
        med = interleaved_us({"kernel": lambda y=y, x=x, norm=norm: bf16_norm.residual_layer_norm(y, x, norm),
                              "torch": lambda y=y, x=x, norm=norm: torch.layer_norm(y + x, *norm).to(torch.bfloat16)},
                             many)
        out[name] = {"shape": [b, n, 384], "kernel_us": med["kernel"], "torch_us": med["torch"],
                     "kernel_over_torch": round(med["kernel"] / med["torch"], 3)}
    return out


def queries(encoder, texts: list[str], threads: list[int], rounds: int) -> dict:
    out = {}
    for t in threads:
        torch.set_num_threads(t)
        for q in texts[:10]:  # warm up both paths
            for on in (True, False):
                switch(encoder, on)
                encoder.encode_queries([q])
        lat = {"kernel": [], "sdpa": []}
        for r in range(rounds):
            for i, q in enumerate(texts):
                order = (True, False) if (i + r) % 2 == 0 else (False, True)
                for on in order:
                    switch(encoder, on)
                    start = time.perf_counter()
                    encoder.encode_queries([q])
                    lat["kernel" if on else "sdpa"].append(1000 * (time.perf_counter() - start))
        p50 = {k: round(statistics.median(v), 3) for k, v in lat.items()}
        out[f"threads{t}"] = {"p50_ms": p50, "kernel_over_sdpa": round(p50["kernel"] / p50["sdpa"], 3),
                              "n": len(lat["kernel"])}
    switch(encoder, True)
    return out


def documents(encoder, docs: list[str], threads: int, rounds: int, batch: int = 32) -> dict:
    """Documents/s through encode_documents in batches of ``batch``, kernel and SDPA alternating by batch."""
    torch.set_num_threads(threads)
    spent = {"kernel": 0.0, "sdpa": 0.0}
    for on in (True, False):  # warm up both paths
        switch(encoder, on)
        encoder.encode_documents(docs[:batch], batch_size=batch)
    for r in range(rounds):
        for i in range(0, len(docs), batch):
            order = (True, False) if (i // batch + r) % 2 == 0 else (False, True)
            for on in order:
                switch(encoder, on)
                start = time.perf_counter()
                encoder.encode_documents(docs[i:i + batch], batch_size=batch)
                spent["kernel" if on else "sdpa"] += time.perf_counter() - start
    switch(encoder, True)
    rate = {k: round(rounds * len(docs) / v, 2) for k, v in spent.items()}
    return {"threads": threads, "batch": batch, "docs": len(docs), "rounds": rounds, "docs_per_s": rate,
            "kernel_over_sdpa_docs_per_s": round(rate["kernel"] / rate["sdpa"], 3)}


def fidelity(encoder, reference, texts: list[str], docs: list[str]) -> dict:
    torch.set_num_threads(2)
    out = {}
    for name, items, encode in (("queries", texts, "encode_queries"), ("documents", docs, "encode_documents")):
        got = {}
        for on in (True, False):
            switch(encoder, on)
            if FUSION["what"] == "linear" and name == "queries":  # one query a call: the rows the tiles take
                got[on] = np.stack([np.asarray(getattr(encoder, encode)([t])[0]) for t in items])
                continue
            vecs = getattr(encoder, encode)(items)
            got[on] = np.asarray(vecs[0] if isinstance(vecs, tuple) else vecs)
        ref = getattr(reference, encode)(items)
        ref = np.asarray(ref[0] if isinstance(ref, tuple) else ref)
        out[name] = {"kernel_vs_sdpa": cosines(got[False], got[True]), "kernel_vs_reference": cosines(ref, got[True]),
                     "sdpa_vs_reference": cosines(ref, got[False])}
    switch(encoder, True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scifact")
    ap.add_argument("--checkpoint", help="a trained ColBERT folder (default: minilm as an untrained ColBERT)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--calls", type=int, default=3000, help="calls of each path in the layer timing")
    ap.add_argument("--doc-threads", type=int, default=2, help="threads for the documents/s part")
    ap.add_argument("--doc-rounds", type=int, default=1)
    ap.add_argument("--fusion", choices=["attention", "gelu", "stack", "amx", "norm", "linear"], default="attention",
                    help="the A/B: the attention kernel against SDPA (default), the feed-forward's GELU fused "
                         "into its product (PackedBf16GeluLinear) against the separate GELU, or the twin as one "
                         "stack of calls (Bf16Stack) against its modules, the kernel on AMX tiles against its AVX-512 "
                         "path, the one-pass residual LayerNorm against torch's three passes, or a query's products on "
                         "AMX tiles against oneDNN's; `kernel` / `sdpa` in the result are then fused / separate, stack "
                         "/ modules, amx / avx512, one pass / torch or tiles / oneDNN, "
                         "and the layer part is skipped (amx: layer_paths instead; norm: norm_layer)")
    ap.add_argument("--out", help="result file (default: bench/results/<machine kind>/bf16_attention.json, or "
                                  "bf16_gelu_fusion.json / bf16_stack.json / bf16_attention_amx.json / bf16_norm.json / "
                                  "bf16_linear.json with --fusion gelu / stack / amx / norm / linear)")
    args = ap.parse_args()
    FUSION["what"] = args.fusion
    if not bf16_attention.available():
        sys.exit("the attention kernel is not built or this CPU lacks AVX512_BF16: nothing to compare")
    if args.fusion == "amx" and not bf16_attention.amx_available():
        sys.exit("this CPU has no AMX-BF16 tiles: the kernel has only its AVX-512 path here")
    if args.fusion == "linear" and not bf16_linear.available():
        sys.exit("this CPU has no AMX-BF16 tiles (or the kernel is not built): oneDNN's products only")
    scifact = find_scifact(args.scifact)
    _, texts, _ = queries_of(scifact, "test")
    docs = corpus_texts(scifact, args.docs)
    settings = dict(kind="colbert", doc_max_length=180)
    if args.checkpoint:
        settings["name_or_path"] = args.checkpoint
    encoder = load_encoder(ModelConfig(**settings, encoder_backend="bf16"), device="cpu")
    reference = load_encoder(ModelConfig(**settings, encoder_backend="reference"), device="cpu")
    result = {"model": args.checkpoint or "minilm as an untrained ColBERT", "fusion": args.fusion,
              "layer": layer(args.calls) if args.fusion == "attention" else None,
              "layer_paths": layer_paths(args.calls) if args.fusion == "amx" else None,
              "norm_layer": norm_layer(args.calls) if args.fusion == "norm" else None,
              "queries": queries(encoder, texts, [int(t) for t in args.threads.split(",")], args.rounds),
              "documents": documents(encoder, docs, args.doc_threads, args.doc_rounds),
              "fidelity": fidelity(encoder, reference, texts, docs)}
    print(json.dumps(result, indent=1))
    names = {"attention": "bf16_attention", "gelu": "bf16_gelu_fusion", "stack": "bf16_stack",
             "amx": "bf16_attention_amx", "norm": "bf16_norm", "linear": "bf16_linear"}
    write_result(names[args.fusion], result, args.out)


if __name__ == "__main__":
    main()
