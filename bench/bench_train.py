"""Training benchmark: `embedctl train` vs sentence-transformers' MultipleNegativesRankingLoss on SciFact.

    python bench/bench_train.py                 # full: 100 steps x 32 queries, 256-token documents
    python bench/bench_train.py --tiny          # smoke test: 3 steps x 4 queries on a slice of the test set
    python bench/bench_train.py --speed-only 3  # speed alone: 3 alternating runs of each side, no evaluation

Both sides start from all-MiniLM-L6-v2 (the bundled `minilm`) and use the same steps, batch size (queries
per step = pairs per step), learning rate, linear warmup/decay, weight decay 0.01 (none on biases/norms),
gradient clipping 1.0, max length and temperature (MNRL scale = 1 / temperature), fp32.

Runs, all on SciFact *train* qrels, all evaluated by the same code (embedctl.train.evaluation: exact
search, pytrec_eval) on SciFact *test*:
- zero-shot: the untouched model;
- `embedctl`: `embedctl pretokenize` + `embedctl prebatch` (in-batch negatives, each query with all its
  positives) + `embedctl train` -- the same information MNRL gets; its speed is the speed figure;
- `embedctl_hard_negatives` (``--negatives N``, default 4): the same with N mined hard negatives per query
  from `embedctl prebatch` (the issue's quality setting);
- `sentence_transformers_mnrl`: (query, positive) pairs, NoDuplicatesDataLoader, MultipleNegativesRankingLoss,
  trained through `SentenceTransformer.old_fit` (its Trainer needs the `datasets` package, absent here).
If `embedctl prebatch` fails, a built-in writer makes the in-batch batches (noted in the JSON).

Speed: (query, positive) pairs per second of wall time in the training loop (data, forward, backward,
optimizer; model loading and evaluation excluded), first step excluded on the embedctl side. A pair is what
sentence-transformers counts as an example; an embedctl batch holds each query once with all its positives
(SciFact train: 809 queries, 919 pairs), so pairs/s is the common unit and one epoch is 919 pairs for both.
queries/s and the time of one epoch are reported beside it.
Writes --out (default bench/results/<machine-kind>/train.json, or train_speed.json with --speed-only;
--tiny: bench/work/train_tiny.json) and every run under bench/work/runs/.
Targets: nDCG@10 above MNRL's and >= 0.70; speed >= 1.2x.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from benchdata import find_scifact
from resultfiles import write_result

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scifact")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=32, help="queries (pairs) per step")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--max-length", type=int, default=256, help="document max length (ST max_seq_length)")
    p.add_argument("--query-length", type=int, default=64)
    p.add_argument("--eval-max-length", type=int, default=None,
                   help="document max length for evaluation (default: --max-length); lets a short, cheap training "
                   "run be evaluated at the model's usual 256 tokens")
    p.add_argument("--temperature", type=float, default=0.05, help="MNRL scale = 1/temperature (ST default 20)")
    p.add_argument("--negatives", type=int, default=4, help="mined hard negatives per query for a second embedctl "
                   "run (embedctl prebatch); 0 skips it")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--device", default="auto")
    p.add_argument("--workdir", default=str(REPO / "runs" / "bench_train"))
    p.add_argument("--tiny", action="store_true", help="smoke test: 3 steps x 4, short texts, test slice")
    p.add_argument("--skip-st", action="store_true", help="only embedctl (no sentence-transformers run)")
    p.add_argument("--speed-only", type=int, default=0, metavar="REPEATS",
                   help="speed only: REPEATS alternating runs of embedctl (in-batch) and sentence-transformers, no "
                   "evaluation; writes the train_speed result")
    p.add_argument("--out", default=None, help="result file (default: the latest train / train_speed result for this "
                   "machine kind; --tiny: bench/work/train_tiny.json)")
    args = p.parse_args()
    if args.tiny:
        args.steps, args.batch, args.max_length, args.query_length, args.warmup = 3, 4, 32, 16, 1
    return args


# ---------------------------------------------------------------- data ---------------------------------
def train_pairs(scifact: Path) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    from embedctl.data.sources import iter_texts, join_title, read_queries
    from embedctl.util.qrels import read_qrels

    qrels = read_qrels(str(scifact / "qrels" / "train.tsv"))
    queries = read_queries(str(scifact / "queries.jsonl"))
    docs = {r.id: join_title(r) for r in iter_texts(str(scifact / "corpus.jsonl"))}
    qrels = {q: {d: r for d, r in ds.items() if r > 0 and d in docs} for q, ds in qrels.items() if q in queries}
    return queries, docs, {q: ds for q, ds in qrels.items() if ds}


def prebatch_with_cli(args, source: Path, work: Path, negatives: int) -> Path | None:
    """`embedctl pretokenize` + `embedctl prebatch` on ``source`` (a BEIR folder, train qrels); None on failure."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    common = [f"model.query_max_length={args.query_length}", f"model.doc_max_length={args.max_length}"]
    tokens, out = work / "tokens", work / f"batches_neg{negatives}"
    steps = [["pretokenize", f"pretokenize.input={source}", f"pretokenize.output={tokens}",
              "pretokenize.overwrite=true"],
             ["prebatch", f"prebatch.input={tokens}", f"prebatch.qrels={source / 'qrels' / 'train.tsv'}",
              f"prebatch.output={out}", f"prebatch.queries_per_batch={args.batch}",
              f"prebatch.negatives_per_query={negatives}", f"prebatch.seed={args.seed}", "prebatch.overwrite=true"]]
    if (tokens / "queries").exists():
        steps = steps[1:]
    for cmd in steps:
        res = subprocess.run([sys.executable, "-m", "embedctl", *cmd, *common], env=env, capture_output=True, text=True)
        if res.returncode != 0:
            print(f"embedctl {cmd[0]} failed ({res.stderr.strip().splitlines()[-1:]}); "
                  "using the built-in batch writer", file=sys.stderr)
            return None
    return out


def beir_slice(scifact: Path, work: Path, split: str, n_queries: int, extra_docs: int) -> Path:
    """A small BEIR folder: the first ``n_queries`` queries of qrels/<split>.tsv, their positives and
    ``extra_docs`` other documents (tiny mode)."""
    from embedctl.util.qrels import read_qrels

    out = work / f"{split}_slice"
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    qrels = read_qrels(str(scifact / "qrels" / f"{split}.tsv"))
    qids = list(qrels)[:n_queries]
    keep = [(q, d, grade) for q in qids for d, grade in qrels[q].items()]
    pos = {d for _, d, _ in keep}
    corpus, extra = [], 0
    for line in (scifact / "corpus.jsonl").read_text().splitlines():
        did = json.loads(line)["_id"]
        if did in pos or extra < extra_docs:
            corpus.append(line)
            extra += did not in pos
    (out / "corpus.jsonl").write_text("\n".join(corpus) + "\n")
    (out / "queries.jsonl").write_text("\n".join(ln for ln in (scifact / "queries.jsonl").read_text().splitlines()
                                                 if json.loads(ln)["_id"] in qids) + "\n")
    (out / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                                 + "".join(f"{q}\t{d}\t{grade}\n" for q, d, grade in keep))
    return out


def prebatch_builtin(args, queries, docs, qrels, work: Path) -> Path:
    """Batches of ``args.batch`` train queries (seeded order), each with all its positives; positives of other
    queries in the batch are labelled too (relevant where the qrels say so), the rest is unknown (0)."""
    import fsspec
    import numpy as np

    from embedctl.config.sections.model import ModelConfig
    from embedctl.data.batch_writer import write_batch
    from embedctl.data.batches import Batch
    from embedctl.data.formats import PREBATCH_FORMAT
    from embedctl.models.tokenization import TextTokenizer
    from embedctl.util.io import write_json

    tok = TextTokenizer(ModelConfig(query_max_length=args.query_length, doc_max_length=args.max_length))
    qids = sorted(qrels)
    random.Random(args.seed).shuffle(qids)
    root = work / "batches_builtin"
    fs, path = fsspec.core.url_to_fs(str(root))
    meta = {"format": PREBATCH_FORMAT, "format_version": 1, "batches": []}
    for b, start in enumerate(range(0, len(qids) - args.batch + 1, args.batch)):
        bq = qids[start: start + args.batch]
        bd = list(dict.fromkeys(d for q in bq for d in qrels[q]))
        rel = np.zeros((len(bq), len(bd)), dtype=np.int8)
        for i, q in enumerate(bq):
            for j, d in enumerate(bd):
                rel[i, j] = 1 if d in qrels[q] else 0
        qt = [np.asarray(t, dtype=np.uint16) for t in tok.encode_queries([queries[q] for q in bq])]
        dt = [np.asarray(t, dtype=np.uint16) for t in tok.encode_documents([docs[d] for d in bd])]
        batch = Batch(np.arange(len(bq), dtype=np.uint64), qt, np.arange(len(bd), dtype=np.uint64), dt, rel)
        meta["batches"].append({"name": f"batch_{b:08d}", **write_batch(fs, f"{path}/batch_{b:08d}", batch)})
    write_json(root / "metadata.json", meta)
    return root



# ---------------------------------------------------------------- eval ---------------------------------
def evaluate_folder(model_dir: str, eval_dir: Path, args) -> dict[str, float]:
    from embedctl.config.sections.model import ModelConfig
    from embedctl.config.sections.train import EvalConfig
    from embedctl.models.encoder import load_encoder
    from embedctl.train.evaluation import evaluate, load_eval_set

    enc = load_encoder(ModelConfig(name_or_path=model_dir, query_max_length=args.query_length,
                                   doc_max_length=args.eval_max_length or args.max_length, device=args.device))
    data = load_eval_set(EvalConfig(path=str(eval_dir), split="test"))
    return {k.removeprefix("eval/"): v for k, v in evaluate(enc, data, batch_size=64).items()}


# ---------------------------------------------------------------- runs ---------------------------------
def run_embedctl(args, batches: Path, work: Path, name: str, steps: int) -> dict:
    out = work / name
    overrides = [f"data.path={batches}", f"output.dir={out}", "output.overwrite=true", "train.resume=never",
                 f"train.max_steps={steps}", f"optim.lr={args.lr}", f"optim.warmup_steps={args.warmup}",
                 "optim.schedule=linear", "optim.weight_decay=0.01", "train.grad_clip=1.0",
                 f"train.temperature={args.temperature}", f"train.seed={args.seed}", "train.save_every=0",
                 f"model.query_max_length={args.query_length}", f"model.doc_max_length={args.max_length}",
                 f"train.device={args.device}", f"model.device={args.device}", "train.in_batch_negatives=true"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "embedctl", "train", *overrides], env=env, check=True)
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    timed = rows[1:] or rows
    ex, secs = sum(r["examples"] for r in timed), sum(r["step_time_s"] for r in timed)
    pairs = sum(r.get("pairs", r["examples"]) for r in timed)
    return {"model_dir": str(out / "final"), "examples_per_s": ex / secs, "pairs_per_s": pairs / secs,
            "train_loop_s": sum(r["step_time_s"] for r in rows),
            "process_wall_s": wall, "final_loss": rows[-1]["loss"], "first_loss": rows[0]["loss"]}


def run_sentence_transformers(args, queries, docs, qrels, work: Path) -> dict:
    import torch
    from sentence_transformers import InputExample, SentenceTransformer, losses
    from sentence_transformers.sentence_transformer.datasets.no_duplicates_dataloader import (
        NoDuplicatesDataLoader,
    )

    from embedctl.models.hub import resolve_model_path

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = None if args.device == "auto" else args.device
    model = SentenceTransformer(resolve_model_path("minilm"), device=device)
    model.max_seq_length = args.max_length
    examples = [InputExample(texts=[queries[q], docs[d]]) for q in sorted(qrels) for d in sorted(qrels[q])]
    loader = NoDuplicatesDataLoader(examples, batch_size=args.batch)
    loss = losses.MultipleNegativesRankingLoss(model, scale=1.0 / args.temperature)
    stamps: list[float] = []  # one per loss forward = one per step: steady-state rate without the first step
    forward = loss.forward

    def timed_forward(*a, **k):
        stamps.append(time.perf_counter())
        return forward(*a, **k)

    loss.forward = timed_forward
    t0 = time.perf_counter()
    model.old_fit(train_objectives=[(loader, loss)], epochs=1, steps_per_epoch=args.steps, warmup_steps=args.warmup,
                  optimizer_params={"lr": args.lr}, weight_decay=0.01, max_grad_norm=1.0, show_progress_bar=False)
    secs = time.perf_counter() - t0
    out = work / "st_model"
    model.save(str(out))
    # steady state: from the 2nd step's start to the end of the last step (same span as embedctl's steps 2..N)
    steady = args.batch * (len(stamps) - 1) / max(t0 + secs - stamps[1], 1e-9) if len(stamps) > 2 else None
    return {"model_dir": str(out), "examples_per_s": args.steps * args.batch / secs, "train_loop_s": secs,
            "examples_per_s_after_first_step": steady, "pairs": len(examples)}


def speed_only(args, source: Path, work: Path, queries, docs, qrels) -> None:
    """Alternate embedctl and sentence-transformers training runs (same settings) and compare steady-state rates:
    (query, positive) pairs/s, both sides without their first step."""
    import statistics

    batches = prebatch_with_cli(args, source, work, 0) or prebatch_builtin(args, queries, docs, qrels, work)
    runs = []
    for i in range(args.speed_only):
        ours = run_embedctl(args, batches, work, f"speed_embedctl_{i}", args.steps)
        st = run_sentence_transformers(args, queries, docs, qrels, work)
        runs.append({"embedctl_pairs_per_s": ours["pairs_per_s"], "embedctl_queries_per_s": ours["examples_per_s"],
                     "st_pairs_per_s": st["examples_per_s_after_first_step"],
                     "st_pairs_per_s_whole_fit": st["examples_per_s"]})
        print(json.dumps(runs[-1]), flush=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    from embedctl.runinfo import versions

    result = {"settings": {k: v for k, v in vars(args).items() if k not in ("out", "workdir")}, "runs": runs,
              "median": med, "speedup": med["embedctl_pairs_per_s"] / med["st_pairs_per_s"],
              "speedup_queries_per_s": med["embedctl_queries_per_s"] / med["st_pairs_per_s"],
              "target_speedup_at_least_1.2": med["embedctl_pairs_per_s"] / med["st_pairs_per_s"] >= 1.2,
              "versions": versions()}
    print(json.dumps({k: result[k] for k in ("median", "speedup", "speedup_queries_per_s")}, indent=2))
    write_result("train_speed", result, args.out or (REPO / "bench" / "work" / "train_speed_tiny.json" if args.tiny else None))


def main() -> None:
    args = parse_args()
    scifact = find_scifact(args.scifact)
    work = Path(args.workdir) / ("tiny" if args.tiny else "full")
    work.mkdir(parents=True, exist_ok=True)
    source = beir_slice(scifact, work, "train", 24, 60) if args.tiny else scifact
    queries, docs, qrels = train_pairs(source)
    eval_dir = beir_slice(scifact, work, "test", 10, 40) if args.tiny else scifact
    if args.speed_only:
        return speed_only(args, source, work, queries, docs, qrels)

    # data: the real pipeline (pretokenize + prebatch, mined hard negatives for the quality run)
    plain = prebatch_with_cli(args, source, work, 0)
    plain_note = "embedctl prebatch, in-batch negatives" if plain else "built-in writer, in-batch negatives"
    plain = plain or prebatch_builtin(args, queries, docs, qrels, work)
    mined = prebatch_with_cli(args, source, work, args.negatives) if args.negatives else None

    result: dict = {"settings": {k: v for k, v in vars(args).items() if k not in ("out", "workdir")},
                    "eval_set": str(eval_dir), "train_queries": len(qrels)}
    result["zero_shot"] = evaluate_folder("minilm", eval_dir, args)
    # same settings as MNRL (in-batch negatives only): quality and speed side by side
    ours = run_embedctl(args, plain, work, "embedctl_inbatch", args.steps)
    ours.update(evaluate_folder(ours["model_dir"], eval_dir, args), data=plain_note)
    result["embedctl"] = ours
    if mined is not None:
        hard = run_embedctl(args, mined, work, "embedctl_hardneg", args.steps)
        hard.update(evaluate_folder(hard["model_dir"], eval_dir, args),
                    data=f"embedctl prebatch, {args.negatives} mined hard negatives/query")
        result["embedctl_hard_negatives"] = hard
    best = max((r for r in (result["embedctl"], result.get("embedctl_hard_negatives")) if r),
               key=lambda r: r["nDCG@10"])
    if not args.skip_st:
        st = run_sentence_transformers(args, queries, docs, qrels, work)
        st.update(evaluate_folder(st["model_dir"], eval_dir, args))
        result["sentence_transformers_mnrl"] = st
        # ST's examples are (query, positive) pairs; ours hold each query once with all its positives, so the
        # same unit is pairs/s (one epoch of SciFact train = 919 pairs for both); queries/s shown beside it
        st_rate = st.get("examples_per_s_after_first_step") or st["examples_per_s"]  # both sides without step 1
        result["speedup"] = ours["pairs_per_s"] / st_rate
        result["speedup_queries_per_s"] = ours["examples_per_s"] / st_rate
        result["epoch_s"] = {"embedctl": len(qrels) / ours["examples_per_s"],
                             "sentence_transformers": sum(map(len, qrels.values())) / st["examples_per_s"]}
        result["targets"] = {"beats_mnrl": best["nDCG@10"] > st["nDCG@10"],
                             "ndcg_at_least_0.70": best["nDCG@10"] >= 0.70,
                             "speedup_at_least_1.2": result["speedup"] >= 1.2}
    from embedctl.runinfo import versions

    result["versions"] = versions()
    import torch

    result["device"] = {"cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                        "torch_threads": torch.get_num_threads()}
    print(json.dumps({k: result[k] for k in result if k not in ("versions", "settings")}, indent=2))
    # a smoke (--tiny) run never replaces the latest result unless --out says so
    write_result("train", result, args.out or (REPO / "bench" / "work" / "train_tiny.json" if args.tiny else None))

if __name__ == "__main__":
    main()
