"""The hostile matrix, the classes after `places` (bench/trust_matrix_cases.py holds the Case type and helpers)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from trust_matrix_cases import (
    OK,
    Case,
    R,
    chain,
    copy,
    flip,
    remove,
    truncate,
    write,
)

TRAIN = ["model.query_max_length=12", "model.doc_max_length=24"]


def resume() -> list[Case]:
    c = "resume"
    run = ["train", *TRAIN, "data.path={batches}", "output.dir={my_train}", "train.resume=auto"]
    mk = copy("train")
    out = [R(f"resume/changed-{key}", c, [*run, "train.max_steps=3", f"{key}={val}"], [key], prep=mk, codes=(2,),
             timeout=600)
           for key, val in [("optim.lr", "5e-4"), ("model.kind", "colbert")]]
    out += [
        R("resume/path-into-new-folder-changed-lr", c, ["train", *TRAIN, "data.path={batches}",
                                                        "output.dir={ws}/new", "train.max_steps=3",
                                                        "train.resume={train}/checkpoints/step_00000001",
                                                        "optim.lr=5e-4"], ["optim.lr"], codes=(2,), timeout=600),
    ]
    return out


def corruption() -> list[Case]:
    c = "corrupt"
    out: list[Case] = []
    # the token cache: a chunk changed in place (same size), then the commands that read it
    for part in ("documents/chunks/chunk-000000.parquet", "documents/ids/chunk-000000.parquet",
                 "queries/chunks/chunk-000000.parquet"):
        short = part.split("/")[0][:3] + "-" + part.split("/")[1]
        out.append(R(f"corrupt/cache-{short}-flip-prebatch", c, ["prebatch", "--input", "{my_cache}", "--qrels",
                                                                 "{qrels_beir}", "--output", "{ws}/b"],
                     [part.split("/")[-1]], prep=copy("cache", then=flip(f"cache/{part}", 0.5)), bad_if_ok=True))
    out += [
        R("corrupt/cache-chunk-flip-index", c, ["index", "--collection", "{my_cache}", "--root", "{ws}/ix",
                                                "--kind", "dense", "model.query_max_length=12",
                                                "model.doc_max_length=32"], ["chunk-000000.parquet"],
          prep=copy("cache", then=flip("cache/documents/chunks/chunk-000000.parquet", 0.5)), bad_if_ok=True),
        R("corrupt/cache-chunk-truncated-prebatch", c, ["prebatch", "--input", "{my_cache}", "--qrels",
                                                        "{qrels_beir}", "--output", "{ws}/b"],
          ["chunk-000000.parquet"], prep=copy("cache", then=truncate("cache/documents/chunks/chunk-000000.parquet")),
          bad_if_ok=True),
        R("corrupt/cache-chunk-missing-prebatch", c, ["prebatch", "--input", "{my_cache}", "--qrels",
                                                      "{qrels_beir}", "--output", "{ws}/b"], ["chunk-000000.parquet"],
          prep=copy("cache", then=remove("cache/documents/chunks/chunk-000000.parquet")), bad_if_ok=True),
        R("corrupt/cache-ledger-edited-prebatch", c, ["prebatch", "--input", "{my_cache}", "--qrels",
                                                      "{qrels_beir}", "--output", "{ws}/b"], ["ledger"],
          prep=copy("cache", then=_ledger_sha_edited), bad_if_ok=True),
        Case("corrupt/cache-chunk-flip-pretokenize-resume", c, ["pretokenize", "--input", "{beir}", "--output",
                                                             "{my_cache}", "model.query_max_length=12",
                                                             "model.doc_max_length=32"],
             expect="either", names=("chunk-000000.parquet",),
             prep=copy("cache", then=flip("cache/documents/chunks/chunk-000000.parquet", 0.5)), check=_chunk_redone),
        R("corrupt/cache-chunk-flip-data-inspect", c, ["data", "inspect", "{my_cache}/documents"],
          ["chunk-000000.parquet"], prep=copy("cache", then=flip("cache/documents/chunks/chunk-000000.parquet", 0.5)),
          bad_if_ok=True),
    ]
    # a training checkpoint changed in place, then the resume
    for rel, what in [("model/model.safetensors", "weights"), ("optimizer.pt", "optimizer")]:
        out.append(R(f"corrupt/checkpoint-{what}-flip-resume", c,
                     ["train", *TRAIN, "data.path={batches}", "output.dir={my_train}", "train.resume=auto",
                      "train.max_steps=3"], [rel.split("/")[-1]],
                     prep=chain(copy("train"), remove("train_run/final"), remove("train_run/checkpoints/step_00000002"),
                                flip(f"train_run/checkpoints/step_00000001/{rel}", 0.95)), bad_if_ok=True,
                     timeout=600))
    # index arrays changed in place (same size), then the normal commands
    arrays = {"dense": ["dense.faiss", "ids.npy", "docs.parquet", "lexical/data.npy"],
              "plaid": ["plaid/0.codes.npy", "plaid/0.residuals.npy", "plaid/centroids.npy", "plaid/ivf.npy",
                        "plaid/doclens.0.npy", "plaid/bucket_weights.npy", "ids.npy"]}
    for kind, rels in arrays.items():
        for rel in rels:
            tag = f"{kind}-{rel.replace('/', '-')}"
            mode = ["--mode", "lexical"] if rel.startswith("lexical") else []
            out.append(R(f"corrupt/{tag}-flip-search", c, ["search", "--index", "{ws}/" + kind, "-q", "{queries}",
                                                           "-o", "{ws}/run.tsv", *mode], [rel.split("/")[-1]],
                         prep=copy(kind, then=flip(f"{kind}/{rel}", 0.97)), bad_if_ok=True))
            out.append(R(f"corrupt/{tag}-flip-verify", c, ["index", "info", "--verify", "--index", "{ws}/" + kind],
                         [rel.split("/")[-1]], prep=copy(kind, then=flip(f"{kind}/{rel}", 0.97)), bad_if_ok=True))
    out += [
        R("corrupt/dense-faiss-flip-add", c, ["index", "add", "--index", "{ws}/dense", "--collection", "{extra}"],
          ["dense.faiss"], prep=copy("dense", then=flip("dense/dense.faiss", 0.97)), bad_if_ok=True),
        R("corrupt/plaid-codes-flip-add", c, ["index", "add", "--index", "{ws}/plaid", "--collection", "{extra}"],
          ["0.codes.npy"], prep=copy("plaid", then=flip("plaid/plaid/0.codes.npy", 0.97)), bad_if_ok=True),
        R("corrupt/dense-ids-flip-delete", c, ["index", "delete", "--index", "{ws}/dense", "--id", "4983"],
          ["ids.npy"], prep=copy("dense", then=flip("dense/ids.npy", 0.97)), bad_if_ok=True),
        R("corrupt/plaid-residuals-flip-compact", c, ["index", "compact", "--index", "{ws}/plaid"],
          ["0.residuals.npy"], prep=copy("plaid", then=flip("plaid/plaid/0.residuals.npy", 0.97)), bad_if_ok=True),
        R("corrupt/dense-ids-truncated-search", c, ["search", "--index", "{ws}/dense", "scurvy"], ["ids.npy"],
          prep=copy("dense", then=truncate("dense/ids.npy", 0.6)), bad_if_ok=True),
        R("corrupt/dense-ids-pickled-search", c, ["search", "--index", "{ws}/dense", "scurvy"], ["ids.npy"],
          prep=copy("dense", then=write("dense/ids.npy", b"\x93NUMPY\x01\x00v\x00{'descr': '|O', 'fortran_order':"
                                        b" False, 'shape': (32,), }" + b" " * 53 + b"\n" + b"\x80\x04N." * 100)),
          bad_if_ok=True),
        R("corrupt/manifest-missing-search", c, ["search", "--index", "{ws}/dense", "scurvy"], ["{ws}/dense"],
          prep=copy("dense", then=remove("dense/embedctl_index.json"))),
        R("corrupt/manifest-num-docs-edited-search", c, ["search", "--index", "{ws}/dense", "scurvy"],
          ["embedctl_index.json"], prep=copy("dense", then=lambda ws, fx: _edit_json(
              ws / "dense/embedctl_index.json", lambda d: d.__setitem__("num_docs", 31))), bad_if_ok=True),
        R("corrupt/grown-latest-commit-lost-search", c, ["search", "--index", "{ws}/grown", "-q", "{queries}",
                                                         "-o", "{ws}/run.tsv"], ["commit"],
          prep=copy("grown", then=remove("grown/commits/commit.2.json")), bad_if_ok=True),
        R("corrupt/grown-latest-commit-lost-verify", c, ["index", "info", "--verify", "--index", "{ws}/grown"],
          ["commit"], prep=copy("grown", then=remove("grown/commits/commit.2.json")), bad_if_ok=True),
        R("corrupt/grown-commit-rolled-back-verify", c, ["index", "info", "--verify", "--index", "{ws}/grown"],
          ["commit"], prep=copy("grown", then=_roll_back), bad_if_ok=True),
        R("corrupt/grown-commit-rolled-back-search", c, ["search", "--index", "{ws}/grown", "-q", "{queries}", "-o",
                                                         "{ws}/run.tsv"], ["commit"],
          prep=copy("grown", then=_roll_back), bad_if_ok=True),
        R("corrupt/grown-all-commits-lost-search", c, ["search", "--index", "{ws}/grown", "scurvy"], ["commit"],
          prep=copy("grown", then=remove("grown/commits")), bad_if_ok=True),
        R("corrupt/grown-commit-garbled-search", c, ["search", "--index", "{ws}/grown", "scurvy"],
          ["commit.2.json"], prep=copy("grown", then=flip("grown/commits/commit.2.json", 0.5))),
        R("corrupt/grown-tombstones-flip-search", c, ["search", "--index", "{ws}/grown", "-q", "{queries}", "-o",
                                                      "{ws}/run.tsv"], ["base.g000002.npy"],
          prep=copy("grown", then=flip("grown/deletes/base.g000002.npy", 0.97)), bad_if_ok=True),
        R("corrupt/grown-segment-flip-verify", c, ["index", "info", "--verify", "--index", "{ws}/grown"],
          ["segments/g000001"], prep=copy("grown", then=_flip_segment), bad_if_ok=True),
        R("corrupt/verify-notices-newer-file", c, ["index", "info", "--verify", "--index", "{ws}/dense"],
          ["ids.npy"], prep=copy("dense", then=_newer_same_bytes_changed), bad_if_ok=True),
        R("corrupt/verify-notices-stray-segment", c, ["index", "info", "--verify", "--index", "{ws}/grown"],
          ["g000009"], prep=copy("grown", then=write("grown/segments/g000009/ids.npy", b"stray")),
          bad_if_ok=True),
    ]
    return out


def _ledger_sha_edited(ws: Path, fx: dict) -> None:
    """The ledger's record of chunk 0 no longer matches the chunk (one hex digit of its sha256 changed)."""
    path = ws / "cache/documents/ledger.json"
    text = path.read_text()
    i = text.index('"sha256": "') + len('"sha256": "')
    path.write_text(text[:i] + ("0" if text[i] != "0" else "1") + text[i + 1:])


def _chunk_redone(rc, out, err, ws, fx):
    """A rerun of pretokenize over a damaged chunk may redo it (exit 0): then it must hold the original bytes."""
    rel = "documents/chunks/chunk-000000.parquet"
    if rc == 0 and (ws / "cache" / rel).read_bytes() != (fx["cache"] / rel).read_bytes():
        return "BAD", "exit 0 and the damaged chunk is still there"
    return None


def _edit_json(path: Path, fn) -> None:
    d = json.loads(path.read_text())
    fn(d)
    path.write_text(json.dumps(d, indent=2, sort_keys=True))


def _roll_back(ws: Path, fx: dict) -> None:
    """commit.2.json replaced by the bytes of commit.1.json (a backup restored over the newest commit)."""
    c = ws / "grown" / "commits"
    (c / "commit.2.json").write_text((c / "commit.1.json").read_text().replace('"generation": 1',
                                                                                '"generation": 2'))


def _flip_segment(ws: Path, fx: dict) -> None:
    seg = ws / "grown" / "segments" / "g000001"
    target = max((p for p in seg.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    flip(str(target.relative_to(ws)), 0.97)(ws, fx)


def _newer_same_bytes_changed(ws: Path, fx: dict) -> None:
    time.sleep(0.01)
    flip("dense/ids.npy", 0.97)(ws, fx)


def model() -> list[Case]:
    c = "model"

    def changed_model(rel: str, where: float = 0.95):
        def prep(ws: Path, fx: dict) -> dict:
            path = fx["model"] / rel
            shutil.copy2(path, ws / "backup")
            raw = bytearray(path.read_bytes())
            raw[int(len(raw) * where)] ^= 0x5A
            path.write_bytes(bytes(raw))
            return copy("trained")(ws, fx)

        def after(ws: Path, fx: dict) -> None:
            shutil.copy2(ws / "backup", fx["model"] / rel)
        return prep, after

    out = []
    for rel, tag in [("model.safetensors", "weights"), ("config.json", "config"), ("tokenizer.json", "tokenizer"),
                     ("1_Pooling/config.json", "pooling")]:
        prep, after = changed_model(rel, 0.95 if rel == "model.safetensors" else 0.5)
        out.append(R(f"model/partly-changed-{tag}-index-add", c, ["index", "add", "--index", "{my_trained}",
                                                                 "--collection", "{extra}"], ["{model}"],
                     prep=prep, after=after, serial=True, bad_if_ok=True, protect=("trained",)))
        prep, after = changed_model(rel, 0.95 if rel == "model.safetensors" else 0.5)
        out.append(Case(f"model/partly-changed-{tag}-search-notes", c, ["search", "--index", "{my_trained}",
                                                                        "scurvy"], expect="either",
                        names=("{model}",), names_ok=("model",), prep=prep, after=after, serial=True,
                        check=_notes_model_change))
    out += [
        R("model/missing-model-index", c, ["index", "--collection", "{corpus}", "--root", "{ws}", "--model",
                                           "{ws}/no_model", "--kind", "dense"], ["{ws}/no_model"]),
        R("model/cache-as-model", c, ["index", "--collection", "{corpus}", "--root", "{ws}", "--model", "{cache}",
                                      "--kind", "dense"], ["{cache}"]),
        R("model/checkpoint-without-weights", c, ["index", "--collection", "{corpus}", "--root", "{ws}", "--model",
                                                  "{ws}/m", "--kind", "dense"], ["{ws}/m"],
          prep=chain(lambda ws, fx: [shutil.copytree(fx["model"], ws / "m"), None][1], remove("m/model.safetensors"))),
        R("model/truncated-weights-index", c, ["index", "--collection", "{corpus}", "--root", "{ws}", "--model",
                                               "{ws}/m", "--kind", "dense"], ["model.safetensors"],
          prep=chain(lambda ws, fx: [shutil.copytree(fx["model"], ws / "m"), None][1],
                     truncate("m/model.safetensors", 0.5))),
        OK("model/same-model-search-ok", c, ["search", "--index", "{trained}", "scurvy"]),
    ]
    # the same class, the model's other files: each damaged file named (not only the folder), no library error
    own = ["index", "--collection", "{corpus}", "--root", "{ws}", "--model", "{ws}/m", "--kind", "dense"]
    for tag, rel, damage in [("tokenizer-json", "tokenizer.json", truncate("m/tokenizer.json", 0.5)),
                             ("config-json", "config.json", truncate("m/config.json", 0.5)),
                             ("card", "embedctl_model.json", truncate("m/embedctl_model.json", 0.5)),
                             ("vocab-empty", "vocab.txt", chain(write("m/vocab.txt", ""), remove("m/tokenizer.json")))]:
        out.append(R(f"model/damaged-{tag}-index", c, own, [rel],
                     prep=chain(lambda ws, fx: [shutil.copytree(fx["model"], ws / "m"), None][1], damage)))
    return out


def _notes_model_change(rc, out, err, ws, fx):
    if rc == 0 and "model" not in err.lower():
        return "BAD", "searched with a changed model without a word"
    return None


from trust_matrix_cases3 import environment, evaluate, outputs, ranges, serve  # noqa: E402


def others() -> list[Case]:
    return resume() + corruption() + model() + outputs() + environment() + evaluate() + ranges() + serve()

