"""Where bench results live, and the provenance every result carries (shared by every bench script).

    bench/results/<machine-kind>/<benchmark>.json      the latest result of a benchmark on a machine kind (in git)
    bench/work/runs/<machine-kind>/<benchmark>/<UTC stamp>.json   every run, raw (git-ignored)

A script writes each run twice: the raw copy under bench/work/runs/ and its ``--out`` (default: the latest
file above). ``bench/promote.py`` puts another raw run in place; ``bench/summarize.py`` turns the latest
files into bench/RESULTS.md. Each result starts with a ``provenance`` block: benchmark, machine kind (and
the machine), the command, git commit (and whether the tree had changes) and the UTC date.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from machine import describe, machine_kind

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
RAW = BENCH / "work" / "runs"
sys.path.insert(0, str(REPO))

from embedctl.util import atomic  # noqa: E402

# every benchmark with a latest file, in the order bench/RESULTS.md shows them: name -> what it measures
BENCHMARKS = {
    "pretokenize": "tokens/s of `embedctl pretokenize` vs raw `tokenizers` (bench_pretokenize.py)",
    "dense": "dense index + search with the embedded model on SciFact test (bench_dense.py)",
    "plaid": "PLAID index and search on SciFact (bench_plaid.py)",
    "plaid_index_runs": "several PLAID index runs in one session, summed up (promote.py index-runs)",
    "plaid_stages": "PLAID search time per stage, 1 thread (plaid_stages.py)",
    "plaid_search_floor": "PLAID search only, 1 thread (and each query on 2: --threads 1,2), p50 at k=10/100 against a baseline tree, interleaved (plaid_search_floor.py)",
    "plaid_build_rest": "PLAID build on SciFact: the stages besides encoding against a baseline tree, builds alternating (plaid_build_rest.py)",
    "plaid_backends": "each PLAID backend's computations vs the reference: time and agreement (plaid_backends.py)",
    "plaid_seeds": "PLAID quality over index seeds (plaid_seeds.py)",
    "search_vs_colbertai": "PLAID search latency vs colbert-ai, rounds taken back to back (compare_search.py)",
    "peers": "colbert-ai, PyLate, sentence-transformers on the same machine (bench_peers.py)",
    "train": "fine-tuning vs sentence-transformers MNRL: quality and pairs/s (bench_train.py)",
    "train_speed": "training speed alone, alternating runs (bench_train.py --speed-only N)",
    "colbert": "the ColBERT track: our trained ColBERT vs our dense model and PyLate, same batches (bench_colbert.py)",
    "lifecycle": "indexes that live: add / delete / compact vs fresh builds on SciFact (bench_lifecycle.py)",
    "lifecycle_delete_seeds": "the delete comparison over k-means seeds (bench_lifecycle.py --delete-seeds)",
    "lifecycle_colbertai": "colbert-ai's IndexUpdater on the same add / delete sequence (bench_lifecycle_colbertai.py)",
    "grow_vs_fresh": "a PLAID index of 480 SciFact documents grown by `add` of 480 vs a fresh build of the 960, over k-means seeds, before and after the re-clustering rule (grow_vs_fresh.py)",
    "grow_vs_fresh_full": "the same on full SciFact, 50% built + 50% added (grow_vs_fresh.py --full)",
    "scale": "PLAID on 1 vs 2 ranks and the engine on synthetic vectors (bench_scale.py)",
    "scale_ranks": "1 vs 2 ranks on a quiet host (bench_scale.py --sizes '')",
    "assign_pruning": "how much a two-level bound would skip of exact centroid assignment (plaid_assign_pruning.py)",
    "plaid_kmeans_hints": "k-means steps on real SciFact vectors without and with the previous assignment as hints (plaid_kmeans_hints.py)",
    "scale_fixed": "the engine on synthetic vectors at a fixed centroid count (bench_scale.py --num-partitions)",
    "cold_start": "`embedctl search QUERY` as a whole process, PLAID and dense, and where its imports go (bench_cold_start.py)",
    "api": "the Python API over the engine: one query, 100 at once, nDCG@10 (bench_api.py)",
    "read_checks": "the cost of checking files against their sha256 on the paths users run: prebatch, index open, resume (bench_read_checks.py)",
    "trust_matrix": "the hostile matrix of issue 33: every subcommand's bad inputs, each case GOOD/POOR/BAD by rules (trust_matrix.py)",
    "encoder": "encode backends beside today's path: query p50, docs/s, fidelity, PLAID build wall (bench_encoder.py)",
    "bf16_attention": "the bf16 backend's attention kernel against SDPA: one layer, a query's encoding, fidelity (bf16_attention.py)",
    "bf16_gelu_fusion": "the bf16 twin's feed-forward GELU fused into its product (oneDNN post-op) against the separate GELU: a query's encoding, documents/s, fidelity (bf16_attention.py --fusion gelu)",
    "bf16_stack": "the bf16 twin run as one stack of torch calls (encode_backends.Bf16Stack) against its modules under autocast (the same bits): a query's encoding, documents/s, fidelity (bf16_attention.py --fusion stack)",
    "bf16_attention_amx": "the bf16 backend's attention kernel on AMX tiles against its AVX-512 path: a query layer and a batch of documents, a query's encoding, documents/s, fidelity (bf16_attention.py --fusion amx)",
    "bf16_norm": "the bf16 twin's residual LayerNorms and casts in one pass (embedctl.models.bf16_norm) against torch's add, layer_norm and cast: one LayerNorm, a query's encoding, documents/s, fidelity (bf16_attention.py --fusion norm)",
    "bf16_linear": "a query's products (but the GELU one) on AMX tiles (embedctl.models.bf16_linear, oneDNN's bits) against oneDNN's packed products: a query's encoding, documents/s (unchanged: more rows keep oneDNN), fidelity (bf16_attention.py --fusion linear)",
    "search_precision": "PLAID's final MaxSim at search.precision fp32 and fp16 (its table rounded to float16), one thread, interleaved per query: p50 at k=10/100, same rankings as fp32, nDCG@10 (search_precision.py)",
}


def latest_path(benchmark: str, kind: str | None = None) -> Path:
    return RESULTS / (kind or machine_kind()) / f"{benchmark}.json"


def raw_dir(benchmark: str, kind: str | None = None) -> Path:
    return RAW / (kind or machine_kind()) / benchmark


def git_state() -> tuple[str | None, bool | None]:
    """(HEAD commit, whether tracked files differ from it); (None, None) outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None, None
    if head.returncode:
        return None, None
    return head.stdout.strip(), bool(dirty.stdout.strip()) if dirty.returncode == 0 else None


def command_line(argv: list[str] | None = None) -> str:
    """The command as typed from the repository root: `python bench/bench_x.py --flag v`."""
    argv = sys.argv if argv is None else argv
    script = Path(argv[0]).resolve()
    shown = script.relative_to(REPO) if script.is_relative_to(REPO) else script
    return shlex.join(["python", str(shown), *argv[1:]])


def provenance(benchmark: str, argv: list[str] | None = None, kind: str | None = None) -> dict:
    """``kind``: the machine kind the figures belong to, when they were measured elsewhere and only summed up
    here (compare_search.py, promote.py); the machine this ran on is then recorded as ``summarized_on``."""
    commit, dirty = git_state()
    here = describe()
    prov = {"benchmark": benchmark, "machine_kind": kind or here["kind"], "machine": here,
            "command": command_line(argv), "git_commit": commit, "git_dirty": dirty,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if kind and kind != here["kind"]:
        prov["summarized_on"] = prov.pop("machine")
    return prov


def dump(obj: dict) -> str:
    return json.dumps(obj, indent=1) + "\n"


def write_result(benchmark: str, result: dict, out: str | os.PathLike | None = None,
                 argv: list[str] | None = None, kind: str | None = None) -> Path:
    """Stamp ``result`` with its provenance, keep the raw run under bench/work/runs/ and write ``out``
    (default: the benchmark's latest file for the machine kind). Returns the path of ``out``."""
    prov = provenance(benchmark, argv, kind)
    stamped = {"provenance": prov, **{k: v for k, v in result.items() if k != "provenance"}}
    raw = raw_dir(benchmark, prov["machine_kind"]) / (prov["date"].replace(":", "") + ".json")
    n = 1
    while raw.exists():  # two runs within one second
        n += 1
        raw = raw.with_name(f"{prov['date'].replace(':', '')}_{n}.json")
    atomic.write_text(raw, dump(stamped))
    target = Path(out) if out else latest_path(benchmark, prov["machine_kind"])
    atomic.write_text(target, dump(stamped))
    print(f"wrote {target} (raw run: {raw})", flush=True)
    return target


def kinds() -> list[str]:
    """Machine kinds with at least one latest result, sorted."""
    return sorted(p.name for p in RESULTS.iterdir() if p.is_dir() and any(p.glob("*.json"))) if RESULTS.is_dir() else []


def load(benchmark: str, kind: str) -> dict | None:
    path = latest_path(benchmark, kind)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
