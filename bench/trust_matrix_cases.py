"""The cases of the hostile matrix (bench/trust_matrix.py), by the classes of issue 33. Arguments are templates:
``{name}`` is a fixture of bench/trust_matrix_data.py (``{corpus}``, ``{dense}``, ``{train}`` ...), ``{ws}`` the
case's own folder and ``{embedctl}`` the command in a shell pipeline. The issue's named cases come first in
each class, then variants found around them."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Case:
    id: str
    cls: str
    args: list[str] | None = None
    expect: str = "refuse"  # refuse | ok | either | pipe
    codes: tuple[int, ...] = (1, 2)
    names: tuple[str, ...] = ()  # what a refusal must name (path, key, file:line)
    names_ok: tuple[str, ...] = ()  # what an accepted run must say (a warning)
    bad_if_ok: bool = False  # exit 0 = damaged or mixed data accepted
    prep: Callable | None = None  # (ws, fixtures) -> {name: path} for the templates
    check: Callable | None = None  # (rc, out, err, ws, fixtures) -> (verdict, why) | None
    protect: tuple[str, ...] = ()  # paths under {ws} whose bytes must stay even on exit 0
    shell: str | None = None
    fs: dict | None = None  # {"size": "16k", "ro": bool, "seed": template}: run inside a tmpfs at {ws}/mnt
    serial: bool = False
    timeout: int = 300
    env: dict | None = None
    cwd: str | None = None
    special: Callable | None = None  # (ws, fixtures, env) -> (rc, out, err)
    keep: bool = False
    after: Callable | None = None  # (ws, fixtures): undo what prep did to a shared fixture (serial cases)


def R(id, cls, args, names=(), **kw) -> Case:
    return Case(id, cls, list(args), names=tuple(names), **kw)


def OK(id, cls, args, says=(), **kw) -> Case:
    return Case(id, cls, list(args), expect="ok", names_ok=tuple(says), **kw)


# ---- preparation helpers: each returns a prep function -------------------------------------------------------

def link_copy(src: Path, dst: Path) -> None:
    """A copy whose big files are hard links (a checkpoint is ~270 MB; embedctl replaces files by rename,
    so a write never reaches the fixture) and small files real copies."""
    for p in src.rglob("*"):
        q = dst / p.relative_to(src)
        if p.is_dir():
            q.mkdir(parents=True, exist_ok=True)
        else:
            q.parent.mkdir(parents=True, exist_ok=True)
            if p.stat().st_size > 1 << 20:
                os.link(p, q)
            else:
                shutil.copy2(p, q)


def copy(*names: str, then: Callable | None = None) -> Callable:
    def prep(ws: Path, fx: dict) -> dict:
        out = {}
        for name in names:
            src = fx[name]
            dst = ws / src.name
            if src.is_dir():
                link_copy(src, dst) if name == "train" else shutil.copytree(src, dst)
            else:
                shutil.copy2(src, dst)
            out[f"my_{name}"] = dst
        if then:
            out |= then(ws, fx) or {}
        return out
    return prep


def real_copy(path: Path) -> None:
    """Replace a hard link by its own bytes before changing it."""
    tmp = path.with_name(path.name + ".copying")
    shutil.copy2(path, tmp)
    os.replace(tmp, path)


def flip(rel: str, where: float = 0.9) -> Callable:
    """Change one byte of {ws}/rel in place, same size (``where``: the fraction of the file)."""
    def then(ws: Path, fx: dict) -> None:
        path = ws / rel
        real_copy(path)
        raw = bytearray(path.read_bytes())
        i = min(len(raw) - 1, max(0, int(len(raw) * where)))
        raw[i] ^= 0x5A
        path.write_bytes(bytes(raw))
    return then


def truncate(rel: str, keep: float = 0.5) -> Callable:
    def then(ws: Path, fx: dict) -> None:
        path = ws / rel
        real_copy(path)
        raw = path.read_bytes()
        path.write_bytes(raw[: int(len(raw) * keep)])
    return then


def remove(rel: str) -> Callable:
    def then(ws: Path, fx: dict) -> None:
        p = ws / rel
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    return then


def write(rel: str, text: str | bytes) -> Callable:
    def then(ws: Path, fx: dict) -> dict:
        p = ws / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.exists():
            real_copy(p)
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        return {}
    return then


def chain(*steps: Callable) -> Callable:
    def then(ws: Path, fx: dict) -> dict:
        out = {}
        for s in steps:
            out |= s(ws, fx) or {}
        return out
    return then


def files(**contents: str | bytes) -> Callable:
    """Write files into {ws}: files(bad_jsonl='...') makes {ws}/bad.jsonl, named {bad_jsonl} in templates; a key
    holding '/' or '.' is the path itself (files(**{"indexes/LATEST": ...}))."""
    def prep(ws: Path, fx: dict) -> dict:
        out = {}
        for key, text in contents.items():
            name = key if ("/" in key or "." in key) else key[::-1].replace("_", ".", 1)[::-1]
            p = ws / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(text if isinstance(text, bytes) else text.encode())
            out[key] = p
        return out
    return prep


def victim_folder(ws: Path, fx: dict) -> dict:
    v = ws / "mine"
    v.mkdir()
    (v / "notes.txt").write_text("a user's notes\n")
    return {"mine": v}


def json_no_nan(rc, out, err, ws, fx):
    if rc == 0:
        try:
            json.loads(out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError as exc:
            return "BAD" if "NaN" in str(exc) or "Infinity" in str(exc) else "POOR", f"stdout is not JSON: {exc}"
    return None


def still_there(*rels: str) -> Callable:
    def check(rc, out, err, ws, fx):
        gone = [r for r in rels if not (ws / r).exists()]
        return ("BAD", f"deleted: {gone}") if gone else None
    return check


def no_raw_escape(rc, out, err, ws, fx):
    if "\x1b]0;" in out + err or "\x1b[31m" in out + err or "\x07" in out + err:
        return "BAD", "a control sequence reached the terminal unescaped"
    return None


# ---- the classes ------------------------------------------------------------------------------------------

def places() -> list[Case]:
    c = "places"
    build = ["--collection", "{corpus}", "--kind", "dense", "model.doc_max_length=32"]
    out = [
        R("places/name-dotdot-victim-overwrite", c, ["index", *build, "--root", "{ws}/work/indexes", "--name",
                                                     "../../victim", "--overwrite"], ["index.name"],
          prep=chain(lambda ws, fx: (ws / "work" / "indexes").mkdir(parents=True), copy("victim")),
          codes=(2,), protect=("victim",)),
        R("places/name-absolute-victim", c, ["index", *build, "--root", "{ws}", "--name", "{victim}", "--overwrite"],
          ["index.name"], codes=(2,)),
        R("places/name-dotdot", c, ["index", *build, "--root", "{ws}", "--name", "..", "--overwrite"], ["index.name"],
          codes=(2,)),
        R("places/name-dot", c, ["index", *build, "--root", "{ws}", "--name", ".", "--overwrite"], ["index.name"],
          codes=(2,)),
        R("places/name-slash", c, ["index", *build, "--root", "{ws}", "--name", "a/b"], ["index.name"], codes=(2,)),
        R("places/name-hidden", c, ["index", *build, "--root", "{ws}", "--name", ".hidden"], ["index.name"],
          codes=(2,)),
        R("places/name-newline", c, ["index", *build, "--root", "{ws}", "--name", "a\nb"], ["index.name"],
          codes=(2,)),
        R("places/name-empty", c, ["index", *build, "--root", "{ws}", "--name", ""], ["index.name"], codes=(2,)),
        R("places/name-tilde-victim", c, ["index", *build, "--root", "{ws}", "--name", "~/../tmp"], ["index.name"],
          codes=(2,)),
        R("places/name-backslash-dotdot", c, ["index", *build, "--root", "{ws}", "--name", "..\\..\\x"],
          ["index.name"], codes=(2,)),
        R("places/overwrite-user-folder", c, ["index", *build, "--root", "{ws}", "--name", "mine", "--overwrite"],
          ["{ws}/mine"], prep=victim_folder, protect=("mine",)),
        R("places/overwrite-a-file", c, ["index", *build, "--root", "{ws}", "--name", "afile", "--overwrite"],
          ["afile"], prep=files(afile="x\n"), protect=("afile",)),
        R("places/overwrite-the-root-itself", c, ["index", *build, "--root", "{ws}/mine/..", "--name", "mine",
                                                  "--overwrite"], ["mine"], prep=victim_folder, protect=("mine",)),
        R("places/root-is-the-collection", c, ["index", "--collection", "{my_cache}", "--root", "{my_cache}",
                                               "--kind", "dense"], ["--collection"], prep=copy("cache"), codes=(2,)),
        R("places/name-is-the-collection", c, ["index", "--collection", "{my_cache}", "--root", "{ws}", "--name",
                                               "cache", "--overwrite", "--kind", "dense"], ["--collection"],
          prep=copy("cache"), codes=(2,)),
        R("places/latest-out-of-root-compact", c, ["index", "compact", "index.root={ws}/indexes"], ["LATEST"],
          prep=chain(copy("victim"), files(**{"indexes/LATEST": "../victim\n"}))),
        R("places/latest-out-of-root-add", c, ["index", "add", "--collection", "{extra}", "index.root={ws}/indexes"],
          ["LATEST"], prep=chain(copy("victim"), files(**{"indexes/LATEST": "../victim\n"}))),
        R("places/latest-out-of-root-delete", c, ["index", "delete", "--id", "x", "index.root={ws}/indexes"],
          ["LATEST"], prep=chain(copy("victim"), files(**{"indexes/LATEST": "../victim\n"}))),
        R("places/latest-absolute-delete", c, ["index", "delete", "--id", "x", "index.root={ws}/indexes"],
          ["LATEST"], prep=chain(copy("dense"), lambda ws, fx: files(**{"indexes/LATEST": f"{ws}/dense\n"})(ws, fx))),
        R("places/add-into-a-user-folder", c, ["index", "add", "--index", "{ws}/mine", "--collection", "{extra}"],
          ["{ws}/mine"], prep=victim_folder),
        R("places/delete-in-a-user-folder", c, ["index", "delete", "--index", "{ws}/mine", "--id", "x"],
          ["{ws}/mine"], prep=victim_folder),
        R("places/compact-a-user-folder", c, ["index", "compact", "--index", "{ws}/mine"], ["{ws}/mine"],
          prep=victim_folder),
        R("places/info-a-user-folder", c, ["index", "info", "--index", "{ws}/mine"], ["{ws}/mine"],
          prep=victim_folder),
        R("places/add-index-dotdot", c, ["index", "add", "--index", "{ws}/x/..", "--collection", "{extra}"],
          ["{ws}"], prep=lambda ws, fx: (ws / "x").mkdir()),
        R("places/search-a-user-folder", c, ["search", "--index", "{ws}/mine", "scurvy"], ["{ws}/mine"],
          prep=victim_folder),
        R("places/train-into-token-cache", c, ["train", "data.path={batches}", "output.dir={my_cache}"],
          ["output.dir"], prep=copy("cache"), codes=(2,)),
        R("places/train-inside-its-batches", c, ["train", "data.path={my_batches}",
                                                 "output.dir={my_batches}/run"], ["data.path"],
          prep=copy("batches"), codes=(2,)),
        R("places/train-overwrite-user-folder", c, ["train", "data.path={batches}", "output.dir={ws}/mine",
                                                    "output.overwrite=true"], ["{ws}/mine"],
          prep=chain(victim_folder, files(**{"mine/final/weights.bin": "mine\n"})), codes=(2,)),
        R("places/prebatch-into-its-cache", c, ["prebatch", "--input", "{my_cache}", "--qrels", "{qrels_beir}",
                                                "--output", "{my_cache}"], ["{my_cache}"], prep=copy("cache")),
        R("places/prebatch-into-an-index", c, ["prebatch", "--input", "{cache}", "--qrels", "{qrels_beir}",
                                               "--output", "{my_dense}", "--overwrite"], ["{my_dense}"],
          prep=copy("dense")),
        R("places/prebatch-into-a-train-run", c, ["prebatch", "--input", "{cache}", "--qrels", "{qrels_beir}",
                                                  "--output", "{my_beir}", "--overwrite"], ["{my_beir}"],
          prep=copy("beir")),
        Case("places/prebatch-overwrite-keeps-user-files", c, ["prebatch", "--input", "{cache}", "--qrels",
                                                               "{qrels_beir}", "--output", "{ws}/mine", "--overwrite"],
             expect="either", names=("{ws}/mine",), prep=victim_folder, check=still_there("mine/notes.txt"),
             protect=("mine/notes.txt",)),
        R("places/pretokenize-into-its-input-file", c, ["pretokenize", "--input", "{my_corpus}", "--output",
                                                        "{my_corpus}"], ["{my_corpus}"], prep=copy("corpus")),
        R("places/pretokenize-into-an-index", c, ["pretokenize", "--input", "{corpus}", "--output", "{my_dense}",
                                                  "--overwrite"], ["{my_dense}"], prep=copy("dense")),
        R("places/pretokenize-into-batches", c, ["pretokenize", "--input", "{corpus}", "--output", "{my_batches}",
                                                 "--overwrite"], ["{my_batches}"], prep=copy("batches")),
        R("places/pretokenize-into-its-beir-folder", c, ["pretokenize", "--input", "{my_beir}", "--output",
                                                         "{my_beir}", "--overwrite"], ["{my_beir}"],
          prep=copy("beir")),
        Case("places/pretokenize-overwrite-keeps-user-files", c, ["pretokenize", "--input", "{corpus}", "--output",
                                                                  "{ws}/mine", "--overwrite", "--side", "documents"],
             expect="either", names=("{ws}/mine",), prep=victim_folder, check=still_there("mine/notes.txt"),
             protect=("mine/notes.txt",)),
        R("places/search-o-corpus", c, ["search", "--index", "{dense}", "-q", "{queries}", "-o", "{my_corpus}"],
          ["{my_corpus}"], prep=copy("corpus"), codes=(2,)),
        R("places/search-o-queries-itself", c, ["search", "--index", "{dense}", "-q", "{my_queries}", "-o",
                                                "{my_queries}"], ["{my_queries}"], prep=copy("queries"), codes=(2,)),
        R("places/search-o-qrels", c, ["search", "--index", "{dense}", "-q", "{queries}", "-o", "{my_qrels}"],
          ["{my_qrels}"], prep=copy("qrels"), codes=(2,)),
        R("places/search-o-index-folder", c, ["search", "--index", "{dense}", "-q", "{queries}", "-o", "{my_dense}"],
          ["{my_dense}"], prep=copy("dense")),
        R("places/search-o-index-file", c, ["search", "--index", "{my_dense}", "-q", "{queries}", "-o",
                                            "{my_dense}/ids.npy"], ["ids.npy"], prep=copy("dense")),
        R("places/serve-port-file-over-corpus", c, ["serve", "--index", "{dense}", "--port", "0", "--port-file",
                                                    "{my_corpus}"], ["{my_corpus}"], prep=copy("corpus"),
          serial=True, timeout=120),
        OK("places/index-into-a-new-root", c, ["index", *build, "--root", "{ws}/new/root", "--name", "fine"]),
        OK("places/index-overwrite-own-index", c, ["index", *build, "--root", "{ws}", "--name", "dense",
                                                   "--overwrite"], prep=copy("dense")),
    ]
    return out
