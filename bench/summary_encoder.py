"""bench/RESULTS.md rows of the encode backends' benchmark (bench_encoder.py), of the attention kernel's
(bf16_attention.py) and of the search precisions' (search_precision.py); summarize.py imports them."""

from __future__ import annotations

from summary_common import Row, dig

BACKENDS = ("reference", "bf16", "onnx", "onnx-int8")


def encoder_rows() -> list[Row]:
    """Query p50 and docs/s per backend beside today's path, fidelity, PLAID build wall."""
    def query(backend: str, threads: int):
        def show(r, o):
            q = dig(r, "query_encoding", f"threads_{threads}", backend)
            return q and f"{q['p50_ms']:.1f} ms ({q['ratio_p50_vs_reference']:.2f}x)"
        return (f"query p50, 32 tokens, {threads} thread(s): {backend} (target <= 4 ms)", show)

    def docs(path: str):
        def show(r, o):
            d = dig(r, "documents", "paths", path)
            if not d:
                return None
            cos = (d.get("doc_cosine") or {}).get("min")
            return (f"{d['docs_per_s']:.2f} docs/s ({d['ratio_docs_per_s_vs_today']:.2f}x); cosine min "
                    f"{cos:.4f}; nDCG@10 {d['ndcg@10']:.4f} ({d['ndcg@10_minus_reference']:+.4f}); "
                    f"within bound: {d['within_bound']}")
        return (f"documents, {path} (target >= 2x today)", show)

    def build(r, o):
        rounds = []
        for key in sorted(k for k in r if k.startswith("plaid_build")):
            b = r[key]
            walls = "; ".join(f"{p} {v[0]['wall_s']:.0f} s ({b['ratio_wall_vs_today'][p]:.2f}x)"
                              for p, v in b["paths"].items())
            rounds.append(f"{b['docs']} docs: {walls}")
        return " / ".join(rounds) or None

    def pad(r, o):
        p = r.get("padding")
        return p and (f"{p['docs']} docs: {p['tokens_bucketed']} vs {p['tokens_today']} tokens encoded "
                      f"({100 * p['saving']:.1f}% saved; {100 * p['share_at_doc_max_length']:.0f}% of documents at "
                      "doc_max_length)")

    return [*[query(b, t) for t in (1, 2) for b in BACKENDS],
            *[docs(p) for p in ("today", *BACKENDS)],
            ("length bucketing: tokens encoded, padding included", pad),
            ("PLAID build wall vs today, per run (target <= 0.6x)", build)]


def build_rest_rows() -> list[Row]:
    """plaid_build_rest.py: the build's stages besides encoding, this tree against a baseline tree."""
    def runs(tree, fmt):
        return lambda r, o: " / ".join(fmt(run) for run in dig(r, "trees", tree, "runs") or []) or None

    def stages(run):
        t = run["timings"]
        return f"{t['kmeans_s']:.2f} + {t['codec_s']:.2f} + {t['compress_s']:.2f}"

    return [("rest / encode (target < 10%), median: this / baseline", lambda r, o: " / ".join(
                f"{100 * dig(r, 'trees', tree, 'rest_over_encode_median'):.1f}%" for tree in r["trees"])),
            ("rest s, each run: this", runs("this", lambda run: f"{run['rest_s']:.2f}")),
            ("rest s, each run: baseline", runs("baseline", lambda run: f"{run['rest_s']:.2f}")),
            ("k-means + codec + compression s: this", runs("this", stages)),
            ("k-means + codec + compression s: baseline", runs("baseline", stages)),
            ("encode s: this / baseline", lambda r, o: " | ".join(
                runs(tree, lambda run: f"{run['timings']['encode_s']:.1f}")(r, o) or "-" for tree in r["trees"])),
            ("assignment precision: this / baseline", lambda r, o: " / ".join(
                dig(r, "trees", tree, "runs")[0]["backend"]["precision"] for tree in r["trees"])),
            ("same bytes as the baseline", lambda r, o: None if "same_bytes_round0" not in r else
                "yes" if all(r["same_bytes_round0"].values()) else "no")]


def bf16_attention_rows(fast: str = "kernel", slow: str = "SDPA") -> list[Row]:
    """bf16_attention.py: the kernel against SDPA, one layer and a query's encoding, and the cosines."""
    def queries(threads: int):
        def show(r, o):
            q = dig(r, "queries", f"threads{threads}")
            return q and f"{q['p50_ms']['kernel']:.2f} vs {q['p50_ms']['sdpa']:.2f} ms ({q['kernel_over_sdpa']:.2f}x)"
        return (f"query p50, {threads} thread(s): {fast} vs {slow}", show)

    def cosine(part: str, pair: str):
        label = pair.replace("_", " ").replace("kernel", fast).replace("sdpa", slow)
        return (f"{part}: cosine min, {label}",
                lambda r, o: (lambda c: c and f"{c['min']:.5f} (mean {c['mean']:.6f})")(dig(r, "fidelity", part, pair)))

    return [("model", lambda r, o: r.get("model")),
            (f"one layer's attention, 1 thread: {fast} vs {slow}", lambda r, o: (lambda x: x and (
                f"{x['kernel_us']:.1f} vs {x['sdpa_us']:.1f} us"))(r.get("layer"))),
            *[(f"{name.replace('_', ' ')}, 1 thread: {fast} vs {slow}", lambda r, o, name=name: (lambda x: x and (
                f"{x['amx_us']:.1f} vs {x['avx512_us']:.1f} us ({x['amx_over_avx512']:.2f}x)"))(
                dig(r, "layer_paths", name))) for name in (("query_layer", "document_batch") if fast == "AMX" else ())],
            *[(f"one residual LayerNorm, {name.replace('_', ' ')}, 1 thread: {fast} vs {slow}",
               lambda r, o, name=name: (lambda x: x and (
                   f"{x['kernel_us']:.1f} vs {x['torch_us']:.1f} us ({x['kernel_over_torch']:.2f}x)"))(
                   dig(r, "norm_layer", name))) for name in (("query", "document_batch") if fast == "one pass" else ())],
            *[queries(t) for t in (1, 2)],
            (f"documents/s (batches of 32): {fast} vs {slow}", lambda r, o: (lambda d: d and (
                f"{d['docs_per_s']['kernel']:.1f} vs {d['docs_per_s']['sdpa']:.1f} on {d['threads']} threads "
                f"({d['kernel_over_sdpa_docs_per_s']:.2f}x)"))(r.get("documents"))),
            *[cosine(part, pair) for part in ("queries", "documents")
              for pair in ("kernel_vs_sdpa", "kernel_vs_reference")]]


def search_precision_rows(results: list[dict]) -> list[Row]:
    """Per index: fp32 and fp16 p50 at k=10 / k=100, their agreement, nDCG@10 of both; bf16's p50 where it was
    measured ("-" for an index a machine kind's file lacks)."""
    names = sorted({n for r in results for n in r.get("indexes", {})})
    rows: list[Row] = []

    def measured(row, n):
        return lambda r, o: row(r, o) if n in r.get("indexes", {}) else "-"

    for n in names:
        def p50(r, o, n=n):
            return " / ".join(f"{dig(r, 'indexes', n, k, 'fp32', 'p50_ms')} -> {dig(r, 'indexes', n, k, 'fp16', 'p50_ms')}"
                              f" ({dig(r, 'indexes', n, k, 'fp16', 'p50_over_fp32')}x)" for k in ("k10", "k100"))

        def agree(r, o, n=n):
            k10, k100 = dig(r, "indexes", n, "k10", "fp16"), dig(r, "indexes", n, "k100", "fp16")
            return (f"{k10['top10_same_order']:.1%} / {k100['top10_same_order']:.1%} same top 10 in order, "
                    f"{k100['top100_same_set']:.1%} same top 100; largest score difference "
                    f"{max(k10['max_score_diff'], k100['max_score_diff']):.2g}")

        def ndcg(r, o, n=n):
            return f"{dig(r, 'indexes', n, 'k10', 'fp32', 'nDCG@10')} / {dig(r, 'indexes', n, 'k10', 'fp16', 'nDCG@10')}"

        def bf16(r, o, n=n):
            if dig(r, "indexes", n, "k10", "bf16") is None:
                return "-"
            return " / ".join(f"{dig(r, 'indexes', n, k, 'bf16', 'p50_ms')} ({dig(r, 'indexes', n, k, 'bf16', 'p50_over_fp32')}x)"
                              for k in ("k10", "k100"))

        rows += [(f"{n}: p50 fp32 -> fp16, k=10 / k=100, ms", measured(p50, n)),
                 (f"{n}: fp16 against fp32's rankings, k=10 / k=100", measured(agree, n)),
                 (f"{n}: nDCG@10 fp32 / fp16 (k=10)", measured(ndcg, n)),
                 (f"{n}: p50 bf16 (of fp32), k=10 / k=100, ms", measured(bf16, n))]
    return rows
