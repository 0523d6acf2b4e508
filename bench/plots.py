"""Turn each machine kind's latest results (bench/results/<kind>/*.json) into PNG plots beside them
(matplotlib): quality.png, latency_vs_quality.png, throughput.png, memory.png. A plot whose results are
missing for a kind is skipped; results of different machine kinds never share a plot. The quality plot
includes the ColBERT track (colbert.json: the trained ColBERT through PLAID and exhaustive MaxSim, the dense
model fine-tuned on the same batches, PyLate); point labels are placed where they overlap no other label.

    python bench/plots.py [--kind KIND]
"""

from __future__ import annotations

import argparse

import matplotlib
from resultfiles import RESULTS, kinds, load

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _bars(ax, labels, values, colors=None, fmt="{:.3f}"):
    bars = ax.bar(range(len(values)), values, color=colors)
    ax.set_xticks(range(len(values)), labels, rotation=20, ha="right", fontsize=8)
    for b, v in zip(bars, values, strict=True):
        ax.text(b.get_x() + b.get_width() / 2, b.get_height(), fmt.format(v), ha="center", va="bottom", fontsize=8)


def place_labels(ax, points: list[tuple[float, float, str]], fontsize: int = 7) -> None:
    """Annotate each (x, y, text) at the first of a few offsets whose box overlaps no label placed before
    (greedy, in display space); the last candidate when all overlap."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    placed = []
    offsets = [(6, 4), (6, -11), (-6, 4), (-6, -11), (6, 14), (6, -21), (-6, 14), (-6, -21), (6, 24), (-6, -31)]
    for x, y, text in points:
        for dx, dy in offsets:
            note = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=fontsize,
                               ha="left" if dx > 0 else "right",
                               arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "#777777"} if abs(dy) > 11 else None)
            box = note.get_window_extent(renderer).expanded(1.05, 1.1)
            if not any(box.overlaps(other) for other in placed) or (dx, dy) == offsets[-1]:
                placed.append(box)
                break
            note.remove()


def quality(dense, train, plaid, peers, colbert=None) -> list[tuple[str, float, str]]:
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
        model = plaid.get("model", "").rstrip("/").rsplit("/", 1)[-1]  # the peers' shared model or not: comparable?
        fresh = "untrained " if model == "minilm" else ""  # minilm with a fresh 128-d head
        rows.append((f"{fresh}ColBERT exhaustive\n(embedctl, {model})", plaid["search"]["exhaustive"]["nDCG@10"], "#c44e52"))
        rows.append((f"{fresh}ColBERT PLAID k=10\n(embedctl, {model})", runs["threads1_k10"]["nDCG@10"], "#dd8452"))
    if colbert:  # the ColBERT track (bench_colbert.py): our trained ColBERT, the dense model on the same batches
        for key, metric, label, color in (
                ("dense", "exact", "dense fine-tuned\n(ColBERT track batches)", "#55a868"),
                ("colbert_infonce", "plaid", "trained ColBERT\nPLAID (embedctl)", "#c44e52"),
                ("colbert_infonce", "exhaustive_maxsim", "trained ColBERT\nexhaustive (embedctl)", "#dd8452"),
                ("pylate_contrastive", "plaid", "trained ColBERT\n(PyLate)", "#937860")):
            value = ((colbert.get(key) or {}).get(metric) or {}).get("nDCG@10")
            if value is not None:
                rows.append((label, value, color))
    if peers and "results" in peers:
        res = peers["results"]
        if "colbertai_search" in res:
            rows.append(("ColBERT PLAID k=10\n(colbert-ai)", res["colbertai_search"]["runs"]["threads1_k10"]["ndcg@10"], "#937860"))
        if "dense_minilm" in res:
            rows.append(("dense zero-shot\n(sentence-transformers)", res["dense_minilm"]["ndcg@10"], "#8c8c8c"))
    return rows


def latency_vs_quality(ax, plaid, peers) -> None:
    labels = []
    if plaid:
        for key, run in plaid["search"]["runs"].items():
            if "nDCG@10" not in run:
                continue
            x = run["retrieval"]["p50_ms"]
            ax.scatter(x, run["nDCG@10"], color="#dd8452")
            labels.append((x, run["nDCG@10"], f"embedctl {key.replace('threads', 't')}"))
    if peers and "colbertai_search" in peers.get("results", {}):
        for key, run in peers["results"]["colbertai_search"]["runs"].items():
            if "latency_end_to_end" not in run:
                continue
            enc = peers["results"]["colbertai_search"]["runs"].get(key.split("_")[0] + "_query_encode", {})
            x = run["latency_end_to_end"]["median_ms"] - enc.get("median_ms", 0.0)
            ax.scatter(x, run["ndcg@10"], color="#937860", marker="s")
            labels.append((x, run["ndcg@10"], f"colbert-ai {key.replace('threads', 't')}"))
    ax.margins(x=0.25, y=0.2)  # room for the labels
    place_labels(ax, sorted(labels))
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


def plot_kind(kind: str) -> list[str]:
    """The plots of one machine kind, beside its results; returns the names written."""
    dense, train, plaid, peers, pretok, speed, colbert = (load(n, kind) for n in (
        "dense", "train", "plaid", "peers", "pretokenize", "train_speed", "colbert"))
    out, written = RESULTS / kind, []
    rows = quality(dense, train, plaid, peers, colbert)
    if rows:
        fig, ax = plt.subplots(figsize=(10, 4), dpi=110)
        _bars(ax, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
        ax.set_ylabel("nDCG@10 (SciFact test)")
        ax.set_title(f"quality ({kind})")
        fig.savefig(out / "quality.png", bbox_inches="tight")
        plt.close(fig)
        written.append("quality.png")
    peers_results = (peers or {}).get("results", {})
    for name, wanted, draw in (
            ("latency_vs_quality", plaid or "colbertai_search" in peers_results,
             lambda ax: latency_vs_quality(ax, plaid, peers)),
            ("throughput", pretok or speed or train or (plaid and "colbertai_index" in peers_results),
             lambda ax: throughput(ax, pretok, plaid, train, peers, speed)),
            ("memory", plaid, lambda ax: memory(ax, plaid, peers))):
        if not wanted:
            continue
        fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
        draw(ax)
        ax.set_title(f"{ax.get_title()} ({kind})")
        fig.savefig(out / f"{name}.png", bbox_inches="tight")
        plt.close(fig)
        written.append(f"{name}.png")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kind", action="append", help="machine kind (default: every kind with results)")
    args = parser.parse_args()
    for kind in args.kind or kinds():
        written = plot_kind(kind)
        print(f"{RESULTS / kind}: {', '.join(written) or 'no results to plot'}")


if __name__ == "__main__":
    main()
