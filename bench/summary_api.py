"""bench/RESULTS.md rows of the Python API's benchmarks (bench_api.py, bench_cold_start.py); summarize.py
imports them, keeping each file to one job."""

from __future__ import annotations

from summary_common import Row, dig


def api_rows() -> list[Row]:
    """bench_api.py: Index.search over the engine call, one query and 100 at once, per kind."""
    def single(kind: str, k: int):
        def show(r, o):
            s = dig(r, "kinds", kind, f"single_k{k}")
            return s and f"{s['api_p50_ms']:.1f} / {s['engine_p50_ms']:.1f} ms ({s['api_over_engine']:.3f}x)"
        return (f"{kind} k={k}: Index.search p50 / engine p50 (target <= 1.05x)", show)

    def batched(kind: str):
        def show(r, o):
            b = dig(r, "kinds", kind, "batched_k10")
            return b and f"{b['batched_qps']:.1f} / {b['single_qps']:.1f} q/s ({b['batched_over_single']:.2f}x)"
        return (f"{kind}: 100 queries in one call / 100 calls (target >= 2x)", show)

    return [("documents; test queries", lambda r, o: f"{r.get('docs')}; {r.get('test_queries')}"),
            *[row for kind in ("plaid", "dense") for row in (single(kind, 10), single(kind, 100), batched(kind))],
            *[(f"{kind}: nDCG@10 (the slice's)", lambda r, o, kind=kind: dig(r, "kinds", kind, "ndcg@10"))
              for kind in ("plaid", "dense")]]


def cold_start_rows() -> list[Row]:
    """bench_cold_start.py: `embedctl search` as a whole process, against the checkout given with --vs."""
    def index(name: str):
        def show(r, o):
            x = dig(r, "indexes", name)
            if not x:
                return None
            line = f"{dig(x, 'A', 'wall', 'median')} s"
            if x.get("B"):
                ratio = dig(x, "ratio_A_over_B", "wall", "median")
                line += f" vs {dig(x, 'B', 'wall', 'median')} s ({ratio}x); same hits: {x.get('same_hits_A_B')}"
            return line
        return (f"{name}: wall median (vs the --vs checkout)", show)

    return [("query; runs", lambda r, o: f"{r.get('query')!r}; {r.get('runs')}"),
            index("sf2k"), index("sf2k_dense")]
