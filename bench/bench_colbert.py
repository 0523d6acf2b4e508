"""The ColBERT track measured on SciFact: our trained ColBERT (configs/colbert_scifact.yaml) through PLAID (nbits 2)
with exhaustive MaxSim beside it, against our fine-tuned dense model of the same backbone on the same triples,
distillation vs contrastive-only at equal steps, and PyLate 1.6 trained on the same triples with the same
steps, batch, lr and lengths (its Contrastive and Distillation losses) in its own venv, indexed the same way.

    python bench/bench_colbert.py [--steps 100] [--only dense,colbert,distill,both,pylate] [--train-seed N]
                                  [--work bench/work/colbert]

Steps (each an `embedctl` command on configs/colbert_scifact.yaml with overrides; figures from their outputs):
- dense: the same config as a bi-encoder (model.kind=biencoder, same lengths), prebatched with the same seed,
  batch size and minilm-mined negatives, trained the same steps; exact dense index, nDCG@10 on test.
- colbert: pretokenize + prebatch (teacher = the fine-tuned dense model, so distillation has a teacher better
  than the zero-shot model; its scores are ignored by train.loss=infonce), train (infonce), PLAID index,
  search (PLAID and exhaustive MaxSim), evaluate.
- distill: the same batches with train.loss=distill (KL to the teacher's softmax over each query's 3 documents).
- both (only when asked for: --only both): the same batches with train.loss=infonce+distill (their sum).
- pylate: the same triples (and teacher scores) exported as text, trained by PyLate's model + loss
  (Contrastive, Distillation) in a plain loop with the same AdamW, warmup/linear schedule, clipping, steps,
  batch, lr and lengths; its saved folder is indexed and searched by embedctl like ours.
Throughput: queries per second of training step wall time, first step excluded (ours from metrics.jsonl).
Writes bench/results/<machine-kind>/colbert.json (and the raw run under bench/work/runs/). Long on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CFG = "configs/colbert_scifact.yaml"
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
PEERS = Path(os.environ.get("EMBEDCTL_PEERS_WORK", Path.home() / "embedctl-peers")) / "peers-work"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def embedctl(*args: str) -> float:
    t0 = time.perf_counter()
    print("+ embedctl", " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "embedctl", *args], cwd=REPO, env=ENV, check=True)
    return round(time.perf_counter() - t0, 1)


def evaluate(run: Path) -> dict:
    from embedctl.eval.evaluate import evaluate_files

    m = evaluate_files(str(run), str(SCIFACT / "qrels" / "test.tsv"), None)
    return {k: round(float(v), 4) for k, v in m.items() if k in ("nDCG@10", "Recall@100", "MRR@10")}


def throughput(train_dir: Path) -> dict:
    rows = [json.loads(x) for x in (train_dir / "metrics.jsonl").read_text().splitlines()]
    rest = [r for r in rows if r["step"] > 1 and "step_time_s" in r]
    q = sum(r["examples"] for r in rest)
    t = sum(r["step_time_s"] for r in rest)
    return {"queries_per_s": round(q / t, 2), "steps_timed": len(rest), "first_loss": rows[0]["loss"],
            "last_loss": rows[-1]["loss"]}


def index_and_search(w: Path, name: str, model: str, kind_args: list[str], exhaustive: bool = False) -> dict:
    out: dict = {"index_s": embedctl("index", CFG, *kind_args, f"model.name_or_path={model}", f"index.name={name}",
                                     "index.overwrite=true", f"index.root={w}/indexes")}
    run = w / f"ranking-{name}.tsv"
    out["search_s"] = embedctl("search", CFG, *kind_args, "--index", f"{w}/indexes/{name}", "--output", str(run))
    out["plaid" if not kind_args else "exact"] = evaluate(run)
    if exhaustive:
        ex = w / f"ranking-{name}-exhaustive.tsv"
        out["exhaustive_search_s"] = embedctl("search", CFG, "--index", f"{w}/indexes/{name}", "--output", str(ex),
                                              "search.exhaustive=true")
        out["exhaustive_maxsim"] = evaluate(ex)
    return out


def common(args, w: Path, tag: str) -> list[str]:
    return [f"pretokenize.output={w}/{tag}-tokens", f"prebatch.input={w}/{tag}-tokens",
            f"prebatch.output={w}/{tag}-batches", f"data.path={w}/{tag}-batches",
            f"train.max_steps={args.steps}", "train.save_every=0", f"prebatch.queries_per_batch={args.batch}"]


def run_dense(args, w: Path) -> dict:
    # cosine scores in [-1, 1]: the usual bi-encoder InfoNCE temperature, not the ColBERT one
    dense = ["model.kind=biencoder", "index.kind=dense", "train.temperature=0.05"]
    c = common(args, w, "dense")
    res: dict = {}
    # a repeat under another --train-seed reuses the batches (prebatch does not depend on train.seed)
    if args.train_seed is None or not (w / "dense-batches" / "metadata.json").is_file():
        res["pretokenize_s"] = embedctl("pretokenize", CFG, *dense, *c, "--overwrite")
        res["prebatch_s"] = embedctl("prebatch", CFG, *dense, *c, "--overwrite")
    train_dir, name = w / f"dense-train{seed_suffix(args)}", f"dense{seed_suffix(args)}"
    res["train_s"] = embedctl("train", CFG, *dense, *c, f"train.seed={train_seed(args)}", f"output.dir={train_dir}",
                              "output.overwrite=true", "train.resume=never")
    res.update(throughput(train_dir))
    res.update(index_and_search(w, name, f"{train_dir}/final", dense))
    return res


def run_colbert(args, w: Path, loss: str, prebatch: bool) -> dict:
    c = common(args, w, "colbert")
    res: dict = {}
    if prebatch and not (w / "colbert-batches" / "metadata.json").is_file():
        res["pretokenize_s"] = embedctl("pretokenize", CFG, *c, "--overwrite")
        res["prebatch_s"] = embedctl("prebatch", CFG, *c, f"prebatch.teacher={w}/dense-train/final", "--overwrite")
    name = f"colbert-{loss.replace('+', '-')}{seed_suffix(args)}"
    # the teacher is a cosine bi-encoder: its scores are sharpened like InfoNCE's (T 0.05); MaxSim sums are not
    temps = ["train.teacher_temperature=0.05", "train.distill_temperature=1.0"] if loss != "infonce" else \
        [f"train.temperature={args.temperature}"]
    res["train_s"] = embedctl("train", CFG, *c, *temps, f"train.loss={loss}", f"train.seed={train_seed(args)}",
                              f"output.dir={w}/{name}",
                              "output.overwrite=true", "train.resume=never")
    res.update(throughput(w / name))
    res.update(index_and_search(w, name, f"{w}/{name}/final", [], exhaustive=loss == "infonce"))
    return res


PYLATE_TRAIN = r'''
import json, sys, time, torch
from pylate import losses, models
# argv: triples out loss steps lr warmup qlen dlen model temperature seed (argv[0] is "-c")
triples, out, loss_name, model = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[9]
steps, lr, warmup, qlen, dlen = int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
torch.manual_seed(int(sys.argv[11]))
batches = json.load(open(triples))
m = models.ColBERT(model, device="cpu", query_length=qlen, document_length=dlen)
m.train()
loss_fn = losses.Contrastive(model=m, temperature=float(sys.argv[10])) if loss_name == "contrastive" else losses.Distillation(model=m)
decay = [p for n, p in m.named_parameters() if p.requires_grad and p.ndim > 1 and "LayerNorm" not in n]
rest = [p for n, p in m.named_parameters() if p.requires_grad and not (p.ndim > 1 and "LayerNorm" not in n)]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}], lr=lr)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (steps - s) / max(1, steps - warmup)))
times, losses_seen = [], []
for step in range(steps):
    b = batches[step % len(batches)]
    t0 = time.perf_counter()
    q = m.tokenize(b["queries"], is_query=True)
    if loss_name == "contrastive":
        feats = [q] + [m.tokenize(docs, is_query=False) for docs in b["columns"]]
        loss = loss_fn(feats, labels=None)
    else:
        feats = [q, m.tokenize([d for docs in b["docs"] for d in docs], is_query=False)]
        loss = loss_fn(feats, labels=torch.tensor(b["scores"]))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step(); sched.step(); opt.zero_grad()
    times.append(time.perf_counter() - t0); losses_seen.append(float(loss))
m.save(out)
n = sum(len(b["queries"]) for b in [batches[s % len(batches)] for s in range(1, steps)])
json.dump({"queries_per_s": round(n / sum(times[1:]), 2), "first_loss": losses_seen[0], "last_loss": losses_seen[-1],
           "steps": steps}, open(out + "/bench_train.json", "w"))
'''


def seed_suffix(args) -> str:
    """'' for the config's train.seed, else '-s<seed>': the folders (and, as '_s<seed>', result keys) of a repeat."""
    return "" if args.train_seed is None else f"-s{args.train_seed}"


def train_seed(args) -> int:
    """--train-seed, or the config's train.seed when not given."""
    from embedctl.config import load_config

    return args.train_seed if args.train_seed is not None else load_config(CFG, []).cfg.train.seed


def lengths() -> tuple[int, int]:
    """The config's query and document lengths in tokens: PyLate trains with the lengths ours trains with."""
    from embedctl.config import load_config

    model = load_config(CFG, []).cfg.model
    return model.query_max_length, model.doc_max_length


def export_triples(w: Path, steps: int, seed: int, path: Path) -> Path:
    """The batches our ColBERT trained on, in our training order, as text: each query with its positive and
    its mined negatives (the 'columns' PyLate's Contrastive takes), and the teacher scores of those documents."""
    from embedctl.config import load_config
    from embedctl.data.batches import BatchStream
    from embedctl.models.tokenization import TextTokenizer

    cfg = load_config(CFG, []).cfg
    tok = TextTokenizer(cfg.model)
    stream = BatchStream(str(w / "colbert-batches"), seed=seed, prefetch=0)  # our order under train.seed
    out = []

    def text(ids, marker):
        return tok.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True).replace(marker, "").strip()

    width = 3  # a positive and negatives_per_query (2) negatives: PyLate's columns must be full
    for _, batch in zip(range(steps), stream, strict=False):
        rows = []
        for i in range(batch.num_queries):
            pos = [j for j in range(batch.num_documents) if batch.relevance[i, j] > 0][:1]
            neg = [j for j in range(batch.num_documents) if batch.relevance[i, j] < 0][:width - 1]
            # a query with fewer mined negatives gets other documents of the batch (not its positives): our
            # InfoNCE scores every query against every document of the batch, so PyLate sees the same documents
            # (a narrower row would cut every negative column of the batch, as a first version of this did);
            # (never a positive of any query: PyLate would score a duplicate of a positive as its negative)
            spare = [j for j in range(batch.num_documents) if not (batch.relevance[:, j] > 0).any() and j not in neg]
            rows.append((i, pos + neg + spare[:width - 1 - len(neg)]))
        docs = [[text(batch.document_tokens[j], "[unused1]") for j in d] for _, d in rows]
        out.append({"queries": [text(batch.query_tokens[i], "[unused0]") for i, _ in rows],
                    "columns": [list(col) for col in zip(*docs, strict=True)], "docs": docs,
                    # PyLate's Distillation takes the teacher's logits: ours divided by train.teacher_temperature
                    "scores": [[float(batch.teacher_scores[i, j]) / 0.05 for j in d] for i, d in rows]})
    path.write_text(json.dumps(out))
    return path


def initial_colbert(w: Path) -> Path:
    """The ColBERT our training starts from (minilm + the config's seeded 128-d head), saved as a folder
    PyLate loads (our checkpoints are PyLate folders): both systems start from the same weights."""
    from embedctl.config import load_config
    from embedctl.models.encoder import load_encoder

    folder = w / "colbert-init"
    if not (folder / "embedctl_model.json").is_file():
        load_encoder(load_config(CFG, []).cfg.model).save(str(folder))
    return folder


def run_pylate(args, w: Path, loss: str) -> dict:
    python = PEERS / "venv-pylate" / "bin" / "python"
    if not python.exists():
        return {"ran": False, "why": f"{python} missing: run ../shared/peers/setup.sh"}
    triples = w / f"triples{seed_suffix(args)}.json"
    if not triples.exists():
        export_triples(w, args.steps, train_seed(args), triples)
    start = initial_colbert(w)
    out = w / f"pylate-{loss}{seed_suffix(args)}"
    qlen, dlen = lengths()
    t0 = time.perf_counter()
    subprocess.run([str(python), "-c", PYLATE_TRAIN, str(triples), str(out), loss, str(args.steps), str(args.lr),
                    str(args.warmup), str(qlen), str(dlen), str(start), str(args.temperature), str(train_seed(args))],
                   cwd=PEERS.parent, env=ENV, check=True)
    res = {"train_s": round(time.perf_counter() - t0, 1), **json.loads((out / "bench_train.json").read_text())}
    res.update(index_and_search(w, out.name, str(out), []))
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--temperature", type=float, default=1.0,
                   help="InfoNCE temperature on MaxSim sums, ours and PyLate's Contrastive (both default to 1.0)")
    p.add_argument("--threads", type=int, default=None,
                   help="OMP_NUM_THREADS for every step (1: run ours and PyLate side by side, one core each)")
    p.add_argument("--train-seed", type=int, default=None,
                   help="train.seed of ours (data order, dropout) and PyLate's torch seed (default: the config's); "
                        "a given seed repeats "
                        "colbert / distill / both / pylate under keys and folders ending in _s<seed> / -s<seed>")
    p.add_argument("--only", default="dense,colbert,distill,pylate", help="any of dense, colbert, distill, "
                   "both (train.loss=infonce+distill), pylate, pylate_contrastive (its Contrastive alone); `both` is not in "
                   "the default set")
    p.add_argument("--work", type=Path, default=REPO / "bench" / "work" / "colbert")
    p.add_argument("--note", default="host shared with other agents' jobs (2 cores): timings are upper bounds")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.threads:
        ENV["OMP_NUM_THREADS"] = str(args.threads)
    w = args.work.resolve()
    w.mkdir(parents=True, exist_ok=True)
    parts = args.only.split(",")
    partial = w / "partial.json"
    result = json.loads(partial.read_text()) if partial.exists() else {}
    result.update({"config": CFG, "steps": args.steps, "queries_per_batch": args.batch, "lr": args.lr,
                   "temperature": args.temperature, "negatives_per_query": 2, "note": args.note})
    result.setdefault("threads", {})
    steps = [("dense", lambda: run_dense(args, w)),
             ("colbert_infonce", lambda: run_colbert(args, w, "infonce", prebatch=True)),
             ("colbert_distill", lambda: run_colbert(args, w, "distill", prebatch=False)),
             ("colbert_infonce_distill", lambda: run_colbert(args, w, "infonce+distill", prebatch=False)),
             ("pylate_contrastive", lambda: run_pylate(args, w, "contrastive")),
             ("pylate_distillation", lambda: run_pylate(args, w, "distillation"))]
    wanted = {"dense": ["dense"], "colbert": ["colbert_infonce"], "distill": ["colbert_distill"],
              "both": ["colbert_infonce_distill"],
              "pylate": ["pylate_contrastive", "pylate_distillation"], "pylate_contrastive": ["pylate_contrastive"]}
    todo = {s for part in parts for s in wanted[part]}
    def is_step(key: str) -> bool:  # a step's result, of any seed
        return key == "threads" or any(key == n or key.startswith(n + "_s") for n, _ in steps)

    for base, fn in steps:
        if base in todo:
            name = base + seed_suffix(args).replace("-", "_")
            result[name] = fn()
            result["threads"][name] = args.threads
            # another --only run may be writing beside this one: merge into what is there now
            now = json.loads(partial.read_text()) if partial.exists() else {}
            now.setdefault("threads", {})[name] = args.threads
            now.update({k: v for k, v in result.items() if not is_step(k)} | {name: result[name]})
            partial.write_text(json.dumps(now, indent=1))
            result = now
    write_result("colbert", result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
