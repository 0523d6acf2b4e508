"""A trained ColBERT of ours loads in colbert-ai (Stanford layout: ``Checkpoint``, what ``Searcher`` uses) and
in PyLate (``models.ColBERT`` on our checkpoint folder itself) with the same query and document vectors
(cosine >= 0.9999 per token vector), through the peer kit's venvs (../shared/peers/setup.sh).

    python bench/check_colbert_layouts.py [--model runs/colbert_scifact/train/final] [--work ~/embedctl-peers]

Without --model (or when it does not exist) a ColBERT made from minilm with perturbed weights (as after
training) is checked. Writes bench/results/<machine-kind>/colbert_layouts.json; a missing venv is reported,
never faked. Exit 1 when a system gives other vectors.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
DEFAULT_WORK = Path(os.environ.get("EMBEDCTL_PEERS_WORK", Path.home() / "embedctl-peers"))
QUERIES = ["does aspirin prevent heart attacks?", "what is ColBERT", "Vitamin D deficiency is linked to MS."]
DOCS = ["Aspirin reduces the risk of heart attack, in some patients.", "Short doc.",
        "ColBERT (late interaction) scores every query token against every document token; MaxSim sums the best."]

COLBERT_AI = """
import json, sys, numpy as np, torch
from colbert.infra import ColBERTConfig
from colbert.modeling.checkpoint import Checkpoint
path, out = sys.argv[1], sys.argv[2]
texts = json.load(open(out + '/texts.json'))
ckpt = Checkpoint(path, colbert_config=ColBERTConfig.load_from_checkpoint(path))
Q = ckpt.queryFromText(texts['queries']).float().numpy()
D, doclens = ckpt.docFromText(texts['docs'], bsize=8, keep_dims='flatten')
np.save(out + '/colbertai_Q.npy', Q); np.save(out + '/colbertai_D.npy', D.float().numpy())
np.save(out + '/colbertai_doclens.npy', np.asarray(doclens))
"""

PYLATE = """
import json, sys, numpy as np
from pylate import models
path, out = sys.argv[1], sys.argv[2]
texts = json.load(open(out + '/texts.json'))
m = models.ColBERT(path, device='cpu')
Q = m.encode(texts['queries'], is_query=True, convert_to_numpy=True)
D = m.encode(texts['docs'], is_query=False, convert_to_numpy=True)
np.save(out + '/pylate_Q.npy', np.stack(Q)); np.save(out + '/pylate_D.npy', np.concatenate(D))
np.save(out + '/pylate_doclens.npy', np.asarray([len(d) for d in D]))
"""


def perturbed_model(folder: Path) -> Path:
    import torch

    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.encoder import load_encoder

    enc = load_encoder(ModelConfig(kind="colbert", doc_max_length=180, query_max_length=32,
                                   attend_to_mask_tokens=False))
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in (enc.linear.weight, enc.backbone.encoder.layer[0].attention.self.query.weight):
            p.add_(torch.randn(p.shape, generator=g) / 50)
    enc.save(str(folder))
    return folder


def cosines(a: np.ndarray, b: np.ndarray) -> dict:
    a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    if a.shape != b.shape:
        return {"same_shape": False, "ours": list(a.shape), "theirs": list(b.shape)}
    keep = (np.linalg.norm(a, axis=1) > 0) & (np.linalg.norm(b, axis=1) > 0)
    cos = (a[keep] * b[keep]).sum(1) / (np.linalg.norm(a[keep], axis=1) * np.linalg.norm(b[keep], axis=1))
    return {"same_shape": True, "vectors": int(keep.sum()), "min_cosine": float(cos.min()),
            "max_abs_diff": float(np.abs(a - b).max())}


def run_peer(python: Path | None, code: str, model: Path, out: Path) -> dict:
    if python is None:
        return {"ran": False, "why": "venv missing: run ../shared/peers/setup.sh (SKIP_FASTPLAID=1 is enough)"}
    proc = subprocess.run([str(python), "-c", code, str(model), str(out)], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}, timeout=900)
    if proc.returncode:
        return {"ran": False, "why": proc.stderr[-1500:]}
    return {"ran": True}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="runs/colbert_scifact/train/final")
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    # the exported models and the peers' vectors are scratch: gone when the comparison ends
    with tempfile.TemporaryDirectory(prefix="colbert-layouts-") as tmp:
        return compare(args, Path(tmp))


def compare(args: argparse.Namespace, tmp: Path) -> int:
    """Export our model, let each peer encode the texts from it in its venv, compare vectors; 0 when all match."""
    sys.path.insert(0, str(REPO))
    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.checkpoint import save_stanford
    from embedctl.models.encoder import load_encoder

    model = Path(args.model)
    source = str(model) if model.is_dir() else "minilm + perturbed 128-d head (no trained model given)"
    if not model.is_dir():
        model = perturbed_model(tmp / "model")
    # the card decides kind, markers and attention; lengths from the Stanford/PyLate settings we export
    card = json.loads((model / "embedctl_model.json").read_text())
    enc = load_encoder(ModelConfig(name_or_path=str(model), query_max_length=card["query_max_length"],
                                   doc_max_length=card["doc_max_length"]))
    save_stanford(enc, str(tmp / "stanford"))
    (tmp / "texts.json").write_text(json.dumps({"queries": QUERIES, "docs": DOCS}))
    Q = enc.encode_queries(QUERIES)
    D, doclens = enc.encode_documents(DOCS)
    venvs = args.work / "peers-work"
    py = {n: (venvs / f"venv-{n}" / "bin" / "python") for n in ("colbert", "pylate")}
    result: dict = {"model": source, "settings": {k: card[k] for k in ("dim", "query_max_length", "doc_max_length",
                                                                      "attend_to_mask_tokens", "query_marker")},
                    "texts": {"queries": len(QUERIES), "docs": len(DOCS)}, "threshold": 0.9999}
    ok = True
    for name, code, folder, label in (("colbert", COLBERT_AI, tmp / "stanford", "colbert-ai 0.2.22 Checkpoint (Stanford export)"),
                                      ("pylate", PYLATE, model, "PyLate 1.6 models.ColBERT (our checkpoint folder)")):
        python = py[name] if py[name].exists() else None
        entry = {"system": label, **run_peer(python, code, folder, tmp)}
        if entry["ran"]:
            prefix = "colbertai" if name == "colbert" else "pylate"
            theirs_q = np.load(tmp / f"{prefix}_Q.npy")
            theirs_d = np.load(tmp / f"{prefix}_D.npy")
            entry["doclens_equal"] = np.load(tmp / f"{prefix}_doclens.npy").tolist() == doclens.tolist()
            entry["queries"] = cosines(Q, theirs_q)
            entry["documents"] = cosines(D, theirs_d)
            entry["same_vectors"] = bool(entry["doclens_equal"] and all(
                e.get("same_shape") and e["min_cosine"] >= 0.9999 for e in (entry["queries"], entry["documents"])))
            ok &= entry["same_vectors"]
        result[name] = entry
        print(json.dumps(entry, indent=1)[:1500], flush=True)
    write_result("colbert_layouts", result, args.out)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
