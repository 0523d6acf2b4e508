"""colbert-ai's side of bench_lifecycle_colbertai.py: one experiment (full, add, delete or twenty) from a spec
JSON, run by the peer kit's colbert venv python (DIR/peers-work/venv-colbert), never by embedctl's.

    venv-colbert/bin/python bench/colbertai_lifecycle_worker.py SPEC.json

Results, and every failed step with its error and traceback tail, go to spec["out"] as each step ends.
A file, not `python -c`: colbert-ai's Indexer starts a spawned child that re-imports __main__."""

# ruff: noqa: B023  (each step's lambda is called at once by step()/searched(), inside its loop iteration)
import json
import os
import random
import shutil
import sys
import time
import traceback

FAILED = object()
VARIANTS = ("", "workaround_")  # colbert-ai as shipped; then with its IVF padding stripped before add


def main(spec_path):
    spec = json.load(open(spec_path))
    import torch
    from colbert import Indexer, IndexUpdater, Searcher
    from colbert.infra import ColBERTConfig, Run, RunConfig

    texts, ids = json.load(open(spec["texts"])), json.load(open(spec["ids"]))
    queries = json.load(open(spec["queries"]))
    root, ckpt = spec["root"], spec["checkpoint"]
    os.makedirs(os.path.join(root, "runs"), exist_ok=True)
    out = {"experiment": spec["experiment"], "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
           "steps": {}}

    def save():
        tmp = spec["out"] + ".tmp"
        json.dump(out, open(tmp, "w"), indent=1)
        os.replace(tmp, spec["out"])

    def config():
        return ColBERTConfig(nbits=spec["nbits"], doc_maxlen=spec["doc_maxlen"], query_maxlen=spec["query_maxlen"],
                             kmeans_niters=4, nranks=1, root=root)

    def ctx():
        return Run().context(RunConfig(nranks=1, experiment="lifecycle", root=root))

    def step(name, fn, **extra):
        """Run fn; record its wall time, or its failure (a finding: recorded, never fatal)."""
        t0 = time.perf_counter()
        try:
            value = fn()
            rec = {"ok": True, "seconds": round(time.perf_counter() - t0, 3), **extra}
        except Exception as e:
            value = FAILED
            rec = {"ok": False, "seconds": round(time.perf_counter() - t0, 3), **extra,
                   "error": f"{type(e).__name__}: {e}"[:1500], "traceback_tail": traceback.format_exc()[-2500:]}
            print(f"[worker] {name} FAILED: {rec['error'][:300]}", flush=True)
        out["steps"][name] = rec
        save()
        return value

    def skip(name, why):
        out["steps"][name] = {"ok": None, "skipped": why}
        save()

    def dir_bytes(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)

    def index_facts(path):
        meta = json.load(open(os.path.join(path, "metadata.json")))
        ivf, lengths = torch.load(os.path.join(path, "ivf.pid.pt"), map_location="cpu")
        doclens = []
        for c in range(meta["num_chunks"]):
            doclens += json.load(open(os.path.join(path, f"doclens.{c}.json")))
        return {"bytes": dir_bytes(path), "num_chunks": meta["num_chunks"], "num_partitions": meta.get("num_partitions"),
                "metadata_num_embeddings": meta.get("num_embeddings"), "sum_doclens": sum(doclens),
                "passages": len(doclens), "zero_length_passages": sum(1 for d in doclens if d == 0),
                "ivf_pids": int(ivf.numel()), "ivf_sum_lengths": int(lengths.sum()),
                "ivf_trailing_padding": int(ivf.numel() - lengths.sum())}

    def copy_index(src, name):
        dst = os.path.join(root, "lifecycle", "indexes", name)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
        return dst

    def updater(s, checkpoint, pre):
        """IndexUpdater(config, searcher, checkpoint); with the workaround, its IVF without optimize_ivf's trailing
        padding (ivf.pid.pt holds max(lengths) extra zeros; _add_pid_to_ivf asserts there are none)."""
        upd = IndexUpdater(config(), s, checkpoint)
        if pre:
            upd.curr_ivf = upd.curr_ivf[: int(upd.curr_ivf_lengths.sum())]
        return upd

    def build(name, idxs):
        tsv = os.path.join(root, f"{name}.tsv")
        with open(tsv, "w") as f:
            for pid, i in enumerate(idxs):
                f.write(f"{pid}\t{texts[i]}\n")
        with ctx():
            indexer = Indexer(checkpoint=ckpt, config=config())
            path = indexer.index(name=name, collection=tsv, overwrite=True)
        return path

    def searcher(path):
        with ctx():
            return Searcher(index=path, config=config(), verbose=1)

    def search(s, pid_map, tag, removed=()):
        """Every test query at k=100 with colbert-ai's k=100 settings; a TREC run with SciFact ids."""
        s.configure(ncells=2, centroid_score_threshold=0.45, ndocs=1024)
        for _, text in queries[:10]:  # warm-up, not timed
            s.search(text, k=100)
        removed = set(removed)
        lat, lines, unknown, removed_hits, dups = [], [], 0, 0, 0
        for qid, text in queries:
            t = time.perf_counter()
            pids, _, scores = s.search(text, k=100)
            lat.append(time.perf_counter() - t)
            seen = set()
            for p, sc in zip(pids, scores, strict=True):
                i = pid_map.get(int(p))
                if i is None:
                    unknown += 1
                    continue
                removed_hits += int(p) in removed
                if ids[i] in seen:
                    dups += 1
                    continue
                seen.add(ids[i])
                lines.append(f"{qid} Q0 {ids[i]} {len(seen)} {float(sc):.6f} colbertai\n")
        run = os.path.join(root, "runs", f"{tag}.trec")
        with open(run, "w") as f:
            f.writelines(lines)
        lat_ms = sorted(1000 * x for x in lat)
        return {"run": run, "queries": len(queries), "k": 100, "p50_ms": round(lat_ms[len(lat_ms) // 2], 2),
                "mean_ms": round(sum(lat_ms) / len(lat_ms), 2), "hits_unknown_pid": unknown,
                "hits_of_removed_pids": removed_hits, "duplicate_hits": dups}

    def self_retrieval(s, pairs, k=10):
        """Search each (pid, text) with its own text: the share found in the top k (is an added pid reachable?)."""
        s.configure(ncells=2, centroid_score_threshold=0.45, ndocs=1024)
        found = sum(int(pid in [int(p) for p in s.search(text, k=k)[0]]) for pid, text in pairs)
        return {"checked": len(pairs), "found_top10": found}

    def searched(name, fn):
        """A search step: its timing plus the search figures."""
        res = step(name, fn)
        if res is not FAILED:
            out["steps"][name].update(res)
            save()
        return res

    def reference_build(suffix, name, docs, run_tag):
        """A fresh colbert-ai build of docs, loaded and searched: what an experiment's updated index is held against."""
        path = step("build" + suffix, lambda: build(name, docs), docs=len(docs))
        if path is FAILED:
            return FAILED
        out["index_facts" + suffix] = index_facts(path)
        s = step("searcher_load" + suffix, lambda: searcher(path))
        if s is not FAILED:
            searched("search" + suffix, lambda: search(s, dict(enumerate(docs)), run_tag))
        return path

    exp = spec["experiment"]
    rng = random.Random(0)
    if exp == "full":
        path = reference_build("", "full", spec["all"], "full")
        if path is not FAILED:
            out["index"] = path

    elif exp == "add":
        base, added, tag = spec["base"], spec["added"], spec["tag"]
        built = step("build", lambda: build(tag, base), docs=len(base))
        if built is FAILED:
            return
        out["index_facts_built"] = index_facts(built)
        sample = rng.sample(range(len(added)), min(50, len(added)))
        for pre in VARIANTS:  # as shipped, then with the IVF padding stripped (a one-line workaround)
            path = copy_index(built, f"{tag}-{pre or 'shipped'}")
            s = step(pre + "searcher_load", lambda: searcher(path))
            if s is FAILED:
                continue
            upd = step(pre + "updater_init", lambda: updater(s, ckpt, pre))
            if upd is FAILED:
                continue
            pid_map = dict(enumerate(base))
            new = step(pre + "add", lambda: upd.add([texts[i] for i in added]), docs=len(added))
            pairs = []
            if new is not FAILED:
                rec = out["steps"][pre + "add"]
                rec.update({"docs_per_s": round(len(added) / max(rec["seconds"], 1e-9), 2), "new_pids": len(new),
                            "first_new_pid": new[0] if new else None,
                            "pids_appended_after_built": list(new) == list(range(len(base), len(base) + len(added)))})
                pid_map.update(zip(new, added, strict=False))
                pairs = [(new[j], texts[added[j]]) for j in sample]
                searched(pre + "search_in_memory", lambda: search(s, pid_map, f"{tag}-{pre}in-memory"))
                searched(pre + "self_retrieval_in_memory", lambda: self_retrieval(s, pairs))
            else:
                skip(pre + "search_in_memory", "add failed")
            ok = step(pre + "persist", lambda: upd.persist_to_disk())
            if ok is FAILED:
                continue
            out[pre + "index_facts_after_persist"] = index_facts(path)
            s2 = step(pre + "searcher_reload", lambda: searcher(path))
            if s2 is FAILED:
                continue
            searched(pre + "search_after_persist", lambda: search(s2, pid_map, f"{tag}-{pre}after-persist"))
            if pairs:
                searched(pre + "self_retrieval_after_persist", lambda: self_retrieval(s2, pairs))
            del s, s2, upd

    elif exp == "delete":
        full, full_idxs, gone = spec["full_index"], spec["all"], spec["gone_pids"]
        pid_map = dict(enumerate(full_idxs))

        def copy(name):
            return copy_index(full, name)

        def delete_sequence(pre):
            """remove + search in memory + persist + fresh Searcher + search; True when remove worked."""
            path = copy(f"deleted-{pre or 'shipped'}")
            s = step(pre + "searcher_load", lambda: searcher(path))
            if s is FAILED:
                return False
            upd = step(pre + "updater_init", lambda: updater(s, None, pre))
            if upd is FAILED:
                return False
            removed = step(pre + "remove", lambda: upd.remove(gone), pids=len(gone)) is not FAILED
            if removed:
                searched(pre + "search_in_memory", lambda: search(s, pid_map, f"deleted-{pre}in-memory", gone))
            ok = step(pre + "persist", lambda: upd.persist_to_disk(), pids=len(gone))
            if ok is not FAILED:
                out[pre + "index_facts_after_persist"] = index_facts(path)
                s2 = step(pre + "searcher_reload", lambda: searcher(path))
                if s2 is not FAILED:
                    searched(pre + "search_after_persist",
                             lambda: search(s2, pid_map, f"deleted-{pre}after-persist", gone))
            shutil.rmtree(path, ignore_errors=True)
            return removed

        if not delete_sequence(""):  # as shipped failed: again with the IVF padding stripped
            delete_sequence("workaround_")
        reference_build("_without", "without", spec["without"], "without")
        for count, pids, persist in spec["cost"]:
            for pre in VARIANTS:  # the workaround only when colbert-ai as shipped failed
                path = copy(f"del{count}")
                s = step(f"{pre}cost{count}_searcher_load", lambda: searcher(path))
                upd = FAILED if s is FAILED else step(f"{pre}cost{count}_updater_init", lambda: updater(s, None, pre))
                ok = FAILED if upd is FAILED else step(f"{pre}cost{count}_remove", lambda: upd.remove(pids),
                                                       pids=len(pids))
                if ok is not FAILED and persist:
                    step(f"{pre}cost{count}_persist", lambda: upd.persist_to_disk(), pids=len(pids))
                del s, upd
                shutil.rmtree(path, ignore_errors=True)
                if ok is not FAILED:
                    break

    elif exp == "twenty":
        base, parts = spec["base"], spec["parts"]
        built = step("build", lambda: build("grown", base), docs=len(base))
        for pre in VARIANTS if built is not FAILED else ():
            path = copy_index(built, f"grown-{pre or 'shipped'}")
            pid_map = dict(enumerate(base))
            s = step(pre + "searcher_load", lambda: searcher(path))
            upd = FAILED if s is FAILED else step(pre + "updater_init", lambda: updater(s, ckpt, pre))
            if upd is FAILED:
                continue
            checks = []
            for n, part in enumerate(parts):
                new = step(f"{pre}add_{n}", lambda: upd.add([texts[i] for i in part]), docs=len(part))
                if new is not FAILED:
                    pid_map.update(zip(new, part, strict=False))
                    checks.append((n, [(p, texts[i]) for p, i in rng.sample(list(zip(new, part, strict=False)), min(5, len(part)))]))
                step(f"{pre}persist_{n}", lambda: upd.persist_to_disk())
            out[pre + "index_facts_after_adds"] = index_facts(path)
            s2 = step(pre + "searcher_reload", lambda: searcher(path))
            if s2 is not FAILED:
                searched(pre + "search_after_adds", lambda: search(s2, pid_map, f"twenty-{pre}adds"))
                per = []
                for n, pairs in checks:
                    res = step(f"{pre}self_retrieval_add_{n}", lambda: self_retrieval(s2, pairs))
                    if res is not FAILED:
                        per.append({"add": n, **res})
                out[pre + "self_retrieval_per_add"] = per
                save()
            del s, s2, upd
        reference_build("_fresh", "fresh", spec["same_docs"], "twenty-fresh")
    save()


if __name__ == "__main__":
    main(sys.argv[1])
