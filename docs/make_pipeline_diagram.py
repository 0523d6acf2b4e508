"""Draw docs/img/pipeline.png: the embedctl pipeline, its commands and what each writes.

    .venv/bin/python docs/make_pipeline_diagram.py
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

STAGES = [
    ("raw text", "BEIR / TSV / JSONL / parquet\nlocal or s3://, gs://, ...", "#eeeeee"),
    ("embedctl pretokenize", "token cache\nparquet chunks + ledger\n+ fingerprint", "#cfe2f3"),
    ("embedctl prebatch", "batch_%08d/\nqueries, documents,\nrelations (+ mined negatives)", "#d9ead3"),
    ("embedctl train", "checkpoints/step_*\nfinal/ (safetensors)\nmetrics.jsonl", "#fff2cc"),
    ("embedctl index", "PLAID: centroids, codes,\nresiduals, IVF (.npy)\ndense: faiss", "#f4cccc"),
    ("embedctl search\n+ evaluate", "ranking.tsv / TREC run\nnDCG@10, MRR@10,\nRecall@10/100", "#d9d2e9"),
]


def main() -> None:
    fig, ax = plt.subplots(figsize=(15, 3.4), dpi=120)
    ax.set_xlim(0, len(STAGES) * 2.5)
    ax.set_ylim(0, 3.4)
    ax.axis("off")
    for i, (title, body, color) in enumerate(STAGES):
        x = i * 2.5 + 0.15
        ax.add_patch(FancyBboxPatch((x, 0.3), 2.1, 2.7, boxstyle="round,pad=0.05", fc=color, ec="#444444"))
        ax.text(x + 1.05, 2.55, title, ha="center", va="center", fontsize=9.5, weight="bold", family="monospace")
        ax.text(x + 1.05, 1.3, body, ha="center", va="center", fontsize=8.5)
        if i:
            ax.add_patch(FancyArrowPatch((x - 0.33, 1.65), (x - 0.02, 1.65), arrowstyle="-|>", mutation_scale=18, color="#333333"))
    ax.text(len(STAGES) * 1.25, 0.05, "one typed config (layered YAML + key=value) drives every step; "
            "resolved_config.yaml is saved beside every output", ha="center", fontsize=9, style="italic")
    out = Path(__file__).resolve().parent / "img" / "pipeline.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
