"""Turn bench/results/*.json into PNG plots in bench/results/ (matplotlib). Missing results are skipped.

    python bench/plots.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _bars(ax, labels, values, colors=None, fmt="{:.3f}"):
    bars = ax.bar(range(len(values)), values, color=colors)
    ax.set_xticks(range(len(values)), labels, rotation=20, ha="right", fontsize=8)
    for b, v in zip(bars, values, strict=True):
        ax.text(b.get_x() + b.get_width() / 2, b.get_height(), fmt.format(v), ha="center", va="bottom", fontsize=8)


def quality(dense, train, plaid, peers) -> list[tuple[str, float, str]]:
    rows: list[tuple[str, float, str]] = []
    if dense:
        rows.append(("dense zero-shot\n(embedctl)", dense["metrics"]["nDCG@10"], "#4c72b0"))
    if train:
        for key, label in (("zero_shot", "zero-shot (train bench)"), ("embedctl", "fine-tuned embedctl\nin-batch"),
                           ("embedctl_hard_negatives", "fine-tuned embedctl\n+ hard negatives"),
                           ("sentence_transformers_mnrl", "fine-tuned ST MNRL")):
            if isinstance(train.get(key), dict) and "nDCG@10" in train[key]:
                rows.append((label, train[key]["nDCG@10"], "#55a868" if "embedctl" in key else "#8172b2"))
    if plaid:
        runs = plaid["search"]["runs"]
        rows.append(("ColBERT exhaustive\n(embedctl)", plaid["search"]["exhaustive"]["nDCG@10"], "#c44e52"))
        rows.append(("ColBERT PLAID k=10\n(embedctl)", runs["threads1_k10"]["nDCG@10"], "#dd8452"))
    if peers and "results" in peers:
        res = peers["results"]
        if "colbertai_search" in res:
            rows.append(("ColBERT PLAID k=10\n(colbert-ai)", res["colbertai_search"]["runs"]["threads1_k10"]["ndcg@10"], "#937860"))
        if "dense_minilm" in res:
            rows.append(("dense zero-shot\n(sentence-transformers)", res["dense_minilm"]["ndcg@10"], "#8c8c8c"))
    return rows


def latency_vs_quality(ax, plaid, peers) -> None:
    if plaid:
        for key, run in plaid["search"]["runs"].items():
            if "nDCG@10" not in run:
                continue
            x = run["retrieval"]["p50_ms"]
            ax.scatter(x, run["nDCG@10"], color="#dd8452")
            ax.annotate(f"embedctl {key.replace('threads', 't')}", (x, run["nDCG@10"]), fontsize=7)
    if peers and "colbertai_search" in peers.get("results", {}):
        for key, run in peers["results"]["colbertai_search"]["runs"].items():
            if "latency_end_to_end" not in run:
                continue
            enc = peers["results"]["colbertai_search"]["runs"].get(key.split("_")[0] + "_query_encode", {})
            x = run["latency_end_to_end"]["median_ms"] - enc.get("median_ms", 0.0)
            ax.scatter(x, run["ndcg@10"], color="#937860", marker="s")
            ax.annotate(f"colbert-ai {key.replace('threads', 't')}", (x, run["ndcg@10"]), fontsize=7)
    ax.set_xlabel("retrieval p50 per query, ms (after query encoding)")
    ax.set_ylabel("nDCG@10")
    ax.set_title("PLAID: latency vs quality (SciFact test)")


def throughput(ax, pretok, plaid, train, peers, speed=None) -> None:
    labels, ours, base = [], [], []
    if pretok:
        labels.append("pretokenize\n(tokens/s, x1e5)")
        ours.append(pretok["embedctl_pretokenize"]["tokens_per_s"] / 1e5)
        base.append(pretok["raw_tokenizers"]["tokens_per_s"] / 1e5)
    if plaid and peers and "colbertai_index" in peers.get("results", {}):
        labels.append("PLAID index\n(docs/s, wall)")
        ours.append(plaid["index"]["num_docs"] / plaid["index"]["wall_s"])
        base.append(plaid["index"]["num_docs"] / peers["results"]["colbertai_index"]["indexing_wall_s"])
    if speed and speed.get("median"):  # the speed-only runs: steady state on both sides, median of alternating runs
        labels.append("train\n(query-positive pairs/s)")
        ours.append(speed["median"]["embedctl_pairs_per_s"])
        base.append(speed["median"]["st_pairs_per_s"])
    elif train and isinstance(train.get("embedctl"), dict) and isinstance(train.get("sentence_transformers_mnrl"), dict):
        labels.append("train\n(query-positive pairs/s)")
        ours.append(train["embedctl"].get("pairs_per_s", train["embedctl"]["examples_per_s"]))
        base.append(train["sentence_transformers_mnrl"]["examples_per_s"])
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], ours, width=0.4, label="embedctl", color="#55a868")
    ax.bar([x + 0.2 for x in xs], base, width=0.4, label="baseline (raw tokenizers / colbert-ai / ST)", color="#8c8c8c")
    ax.set_xticks(list(xs), labels, fontsize=8)
    ax.legend(fontsize=7)
    ax.set_title("throughput vs baselines")


def memory(ax, plaid, peers) -> None:
    if not plaid:
        return
    points = [(r["num_docs"], r["peak_rss_mb"]) for r in plaid.get("index_rss_by_size", [])]
    points.append((plaid["index"]["num_docs"], plaid["index"]["peak_rss_mb"]))
    points.sort()
    ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label="embedctl PLAID index", color="#dd8452")
    if peers and "colbertai_index" in peers.get("results", {}):
        rss = peers.get("steps", {}).get("colbertai_index", {}).get("peak_rss_mb")
        if rss:
            ax.scatter([plaid["index"]["num_docs"]], [rss], marker="s", color="#937860", label="colbert-ai")
    ax.set_xlabel("documents indexed")
    ax.set_ylabel("peak RSS, MB")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    ax.set_title("indexing memory vs collection size")


def main() -> None:
    dense, train, plaid, peers, pretok = (load(n) for n in ("dense", "train", "plaid", "peers", "pretokenize"))
    speed = load("train_speed")
    rows = quality(dense, train, plaid, peers)
    if rows:
        fig, ax = plt.subplots(figsize=(10, 4), dpi=110)
        _bars(ax, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
        ax.set_ylabel("nDCG@10 (SciFact test)")
        ax.set_title("quality")
        fig.savefig(RESULTS / "quality.png", bbox_inches="tight")
    for name, draw in (("latency_vs_quality", lambda ax: latency_vs_quality(ax, plaid, peers)),
                       ("throughput", lambda ax: throughput(ax, pretok, plaid, train, peers, speed)),
                       ("memory", lambda ax: memory(ax, plaid, peers))):
        fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
        draw(ax)
        fig.savefig(RESULTS / f"{name}.png", bbox_inches="tight")
        plt.close(fig)
    print(f"plots written to {RESULTS}")


if __name__ == "__main__":
    main()
