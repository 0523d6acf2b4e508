"""bench/RESULTS.md rows of the index lifecycle benchmarks (bench_lifecycle.py, grow_vs_fresh.py,
bench_lifecycle_colbertai.py); summarize.py imports them."""

from __future__ import annotations

from summary_common import Row, dig, num, pair


def lifecycle_rows() -> list[Row]:
    """bench_lifecycle.py: add / delete / compact against fresh builds (targets from the lifecycle issue)."""
    def cost(r, o):
        return ", ".join(f"{c['ids']}: {1000 * c['seconds']:.1f}" for c in r.get("delete_cost", [])) or None

    return [
        ("documents; full build nDCG@10 / build s",
         lambda r, o: f"{r.get('num_docs')}; {num(dig(r, 'full_build', 'ndcg@10'), 4)} / {num(dig(r, 'full_build', 'build_s'), 1)}"),
        ("50%+50%: nDCG@10 / delta vs full build (target within 0.005)",
         lambda r, o: pair(dig(r, "add_50_50", "ndcg@10"), dig(r, "add_50_50", "delta_ndcg@10_vs_full"), 4)),
        ("90%+10%: nDCG@10 / delta vs full build",
         lambda r, o: pair(dig(r, "add_90_10", "ndcg@10"), dig(r, "add_90_10", "delta_ndcg@10_vs_full"), 4)),
        ("add docs/s / encode-bound docs/s (target within 10%)",
         lambda r, o: pair(dig(r, "add_50_50", "add", "docs_per_s"), dig(r, "add_50_50", "encode_bound_docs_per_s"), 1)),
        ("delete 20% unjudged: delta nDCG@10 vs a build without them (one seed; see lifecycle_delete_seeds)",
         lambda r, o: num(dig(r, "delete_20pct_unjudged", "delta_ndcg@10"), 4)),
        ("delete cost, ids: ms", cost),
        ("search p50 ms after 20 adds / compacted (target within 10%)",
         lambda r, o: pair(dig(r, "twenty_adds", "search_p50_ms_segments"), dig(r, "twenty_adds", "search_p50_ms_compacted"), 3)),
        ("compact s / fresh build s", lambda r, o: pair(dig(r, "twenty_adds", "compact_s"), dig(r, "twenty_adds", "fresh_build_s"))),
        ("conditions", lambda r, o: r.get("note")),
    ]


def delete_seeds_rows() -> list[Row]:
    def part(r, *keys):
        return dig(r, "delete_20pct_unjudged_over_seeds", *keys)

    return [
        ("documents deleted; index seeds", lambda r, o: f"{part(r, 'deleted')}; "
         + ", ".join(str(x["index_seed"]) for x in part(r, "runs"))),
        ("delta nDCG@10 per seed (after delete - build without)",
         lambda r, o: ", ".join(f"{x['delta_ndcg@10']:+.4f}" for x in part(r, "runs"))),
        ("mean delta nDCG@10 (target within 0.005)", lambda r, o: num(part(r, "mean_delta_ndcg@10"), 4)),
        ("spread of the fresh builds over seeds", lambda r, o: num(part(r, "spread_fresh_build_without"), 4)),
    ]


def grow_rows() -> list[Row]:
    """grow_vs_fresh.py: a grown index against a fresh build, mean over k-means seeds, per variant."""
    def row(v):
        def show(r, o):
            f = dig(r, "summary", v)
            return f and f"{num(f['mean_ndcg@10'], 4)} ({f['mean_delta_vs_fresh']:+.4f}); add {num(f['mean_add_s'], 1)} s"
        return (f"grown, {v}: mean nDCG@10 (delta vs fresh, target within 0.005); add s", show)

    return [("built + added documents; queries; index seeds", lambda r, o: f"{r['built']} + {r['added']}; "
             f"{r['queries']}; " + ", ".join(str(x["index_seed"]) for x in r["runs"])),
            ("fresh build: mean nDCG@10; build s", lambda r, o: f"{num(dig(r, 'summary', 'fresh_mean_ndcg@10'), 4)}; "
             f"{num(dig(r, 'summary', 'fresh_build_mean_s'), 1)} s"),
            *[row(v) for v in ("before", "after", "forced", "codes")], ("conditions", lambda r, o: r.get("note"))]


def lifecycle_colbertai_rows(results: list[dict]) -> list[Row]:
    """Every side-by-side row of any machine kind: ours / colbert-ai as shipped / with the IVF padding stripped."""
    labels = list(dict.fromkeys(f"{x['step']}: {x['figure']}" for r in results for x in r.get("side_by_side", [])))

    def figure(label):
        def show(r, o):
            row = next((x for x in r.get("side_by_side", []) if f"{x['step']}: {x['figure']}" == label), None)
            if row is None:
                return None
            cells = [row.get("ours"), row.get("colbert_ai")] + (
                [row["colbert_ai_workaround"]] if "colbert_ai_workaround" in row else [])
            return " / ".join("-" if c is None else str(c) for c in cells)
        return show

    return [("documents (smoke: a quick subset)", lambda r, o: f"{r.get('num_docs')}{' (smoke)' if r.get('smoke') else ''}"),
            ("cells", lambda r, o: "ours / colbert-ai as shipped [/ colbert-ai with its IVF padding stripped]"),
            *[(label, figure(label)) for label in labels]]
