"""`embedctl pretokenize` engine: text -> token cache (see embedctl.data.token_cache for the layout).

Deterministic: chunk ``c`` is rows ``[c*R, (c+1)*R)`` (R = ``pretokenize.rows_per_chunk``) and its bytes
depend only on those rows, so ``--workers`` 1/2/4 and any number of shards give identical files.
Resumable: every chunk is written under a temporary name and renamed, then recorded in this shard's
ledger; a rerun skips the chunks the ledger lists and rewrites the rest.
Workers only tokenize and serialise; the main process reads the input and writes every file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from embedctl.data.formats import (
    TOKEN_CACHE_FORMAT,
    TOKEN_CACHE_VERSION,
    bytes_record,
    hash_id,
    join,
    parquet_bytes,
    read_json_file,
    token_dtype_name,
    token_list_array,
)
from embedctl.data.sources import beir_paths, detect_format, is_beir_folder, iter_texts, join_title
from embedctl.data.token_cache import (
    LEDGER,
    chunk_name,
    damaged_chunks,
    fingerprint_diff,
    merge_ledgers,
    shard_ledger_name,
    shard_ledgers,
)
from embedctl.errors import EmbedctlError, InputError
from embedctl.models.tokenization import TextTokenizer
from embedctl.runinfo import write_run_info
from embedctl.util.atomic import json_bytes
from embedctl.util.background import background
from embedctl.util.console import stderr_console
from embedctl.util.fs import local_path, refuse_output_in_inputs, url_to_fs, write_file, writer_lock
from embedctl.util.lines import Skipped
from embedctl.util.outputs import TOKEN_CACHE, other_output
from embedctl.util.progress import Progress

_TOKENIZER = None  # per worker process


@dataclass
class Job:
    """One side to tokenize: ``side`` in documents|queries, ``url`` the input file, ``out`` the side folder."""

    side: str
    url: str
    out: str
    fmt: str


def shard_defaults(num_shards: int | None, shard_index: int | None) -> tuple[int, int]:
    """(num_shards, shard_index) from the config, else WORLD_SIZE/RANK (torchrun), SLURM_NTASKS/SLURM_PROCID, else (1, 0)."""
    env = os.environ
    size_var, rank_var = ("WORLD_SIZE", "RANK") if env.get("WORLD_SIZE") else ("SLURM_NTASKS", "SLURM_PROCID")
    if num_shards is None:
        num_shards = int(env.get(size_var) or 1)
    if shard_index is None:
        shard_index = int(env.get(rank_var) or 0) if num_shards > 1 else 0
    if num_shards < 1 or not 0 <= shard_index < num_shards:
        raise EmbedctlError(f"`pretokenize.shard_index` = {shard_index} is not in [0, {num_shards})",
                            hint="use --num-shards N --shard-index I with 0 <= I < N", exit_code=2)
    return num_shards, shard_index


def plan_jobs(input_url: str, output: str, fmt: str, side: str) -> list[Job]:
    """A BEIR folder gives two jobs (documents, queries); a single file gives one."""
    if fmt == "beir" or (fmt == "auto" and is_beir_folder(input_url)):
        corpus, queries, _ = beir_paths(input_url)
        return [Job("documents", corpus, join(output, "documents"), "jsonl" if fmt == "beir" else "auto"),
                Job("queries", queries, join(output, "queries"), "jsonl" if fmt == "beir" else "auto")]
    side = "documents" if side == "auto" else side
    return [Job(side, input_url, join(output, side), fmt)]


def input_fingerprint(url: str) -> dict:
    """Name, size and mtime (local) or ETag (object stores) of an input file."""
    fs, path = url_to_fs(url)
    try:
        info = fs.info(path)
    except FileNotFoundError as exc:
        raise InputError("no such file", path=url, hint="check the path or URL") from exc
    except EmbedctlError:
        raise
    except Exception as exc:
        raise InputError(f"cannot read: {type(exc).__name__}: {exc}", path=url) from exc
    mtime = info.get("mtime") or info.get("LastModified") or info.get("created")
    etag = info.get("ETag") or info.get("etag")
    return {"name": path.rsplit("/", 1)[-1], "size": info.get("size"),
            "mtime": None if etag else (str(mtime) if mtime is not None else None), "etag": etag}


def make_tokenizer(model_cfg):
    return TextTokenizer(model_cfg)


def _init_worker(model_cfg) -> None:
    global _TOKENIZER
    if _TOKENIZER is None:  # forked workers inherit the parent's tokenizer
        _TOKENIZER = make_tokenizer(model_cfg)


def worker_pool(workers: int, model_cfg, tokenizer):
    """A process pool of tokenizers: forked where the OS can (instant start), else spawned.

    Forked children of a process that already used the Rust tokenizer's thread pool run single-threaded
    (the `tokenizers` fork guard); with several workers that is the intended parallelism anyway.
    """
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    global _TOKENIZER
    method = os.environ.get("EMBEDCTL_MP_START") or ("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    if method == "fork":
        _TOKENIZER = tokenizer
    return ProcessPoolExecutor(workers, mp_context=mp.get_context(method), initializer=_init_worker,
                               initargs=(model_cfg,))


def tokenize_texts(tok, side: str, texts: list[str]) -> list[list[int]]:
    return tok.encode_queries(texts) if side == "queries" else tok.encode_documents(texts)


def chunk_payload(ids: list[str], lists: list, dtype: str) -> tuple[bytes, bytes, dict]:
    """(chunk parquet bytes, id map parquet bytes, stats) for token lists of one chunk."""
    import numpy as np
    import pyarrow as pa

    int_ids = pa.array(np.fromiter((hash_id(i) for i in ids), dtype=np.uint64, count=len(ids)), pa.uint64())
    arr = token_list_array(lists, dtype)
    lengths = np.diff(arr.offsets.to_numpy())
    chunk = pa.table({"ID": int_ids, "TOKEN_ID_LIST": arr})
    idmap = pa.table({"ID": int_ids, "STRING_ID": pa.array(ids, pa.string())})
    stats = {"rows": len(ids), "tokens": int(lengths.sum()), "max_length": int(lengths.max(initial=0)),
             "min_length": int(lengths.min()) if len(lengths) else 0}
    return parquet_bytes(chunk), parquet_bytes(idmap), stats


def encode_chunk(side: str, ids: list[str], texts: list[str], dtype: str, tokenizer=None) -> tuple[bytes, bytes, dict]:
    """Tokenize one chunk -> (chunk parquet bytes, id map parquet bytes, stats)."""
    tok = tokenizer if tokenizer is not None else _TOKENIZER
    return chunk_payload(ids, tokenize_texts(tok, side, texts), dtype)


def _encode_task(args):
    return args[0], encode_chunk(*args[1:])


class SideWriter:
    """Writes one side of the cache for one shard, resuming from its ledger."""

    def __init__(self, job: Job, loaded, tokenizer, num_shards: int, shard_index: int, console):
        self.job, self.loaded, self.tok, self.console = job, loaded, tokenizer, console
        self.p = loaded.cfg.pretokenize
        self.n, self.i = num_shards, shard_index
        self.fs, self.path = url_to_fs(job.out)
        self.dtype = token_dtype_name(tokenizer.vocab_size)
        self.fingerprint = self._fingerprint()
        self.ledger_path = join(self.path, "shards", shard_ledger_name(self.i, self.n))
        self.skipped: list[Skipped] = []

    def _fingerprint(self) -> dict:
        p = self.p
        return {
            "format_version": TOKEN_CACHE_VERSION, "side": self.job.side, "tokenizer": self.tok.fingerprint(),
            "input": input_fingerprint(self.job.url), "input_format": detect_format(self.job.url, self.job.fmt),
            "rows_per_chunk": p.rows_per_chunk, "use_title": p.use_title, "title_join": p.title_join,
            "on_error": p.on_error, "num_shards": self.n, "token_dtype": self.dtype,
        }

    def _new_ledger(self) -> dict:
        m = self.tok.model_cfg
        return {"format": TOKEN_CACHE_FORMAT, "format_version": TOKEN_CACHE_VERSION, "side": self.job.side,
                "fingerprint": self.fingerprint, "num_shards": self.n, "shard_index": self.i, "chunks": {},
                "num_chunks": None, "num_rows": None, "skipped": 0, "finished": False, "token_dtype": self.dtype,
                "vocab_size": self.tok.vocab_size, "input": self.job.url, "model": dataclasses.asdict(m)}

    def check_existing(self) -> dict:
        """Return this shard's ledger to resume from (fresh when none); fail on any mismatch."""
        existing = shard_ledgers(self.fs, self.path)
        merged = read_json_file(self.fs, join(self.path, LEDGER)) if self.fs.exists(join(self.path, LEDGER)) else None
        others = list(existing.values()) + ([merged] if merged else [])
        mine = shard_ledger_name(self.i, self.n)
        bad = [led for name, led in [*existing.items(), ("", merged)] if led and led.get("fingerprint") != self.fingerprint
               and not (name == mine and not led.get("chunks"))]  # my own empty claim: nothing was written
        if bad and not self.p.overwrite:
            diff = fingerprint_diff(bad[0].get("fingerprint", {}), self.fingerprint)
            raise EmbedctlError(
                f"the token cache at {self.job.out} was built with other settings; it differs in:\n    "
                + "\n    ".join(diff[:12]),
                hint="pass --overwrite (pretokenize.overwrite=true) to rebuild it, or choose another --output",
            )
        if self.p.overwrite and others:
            self._clear(merged is not None)
            return self._new_ledger()
        own = existing.get(mine)
        return own if own is not None and own.get("fingerprint") == self.fingerprint else self._new_ledger()

    def _clear(self, has_merged: bool) -> None:
        if self.n == 1:
            for sub in ("chunks", "ids", "shards"):
                if self.fs.exists(join(self.path, sub)):
                    self.fs.rm(join(self.path, sub), recursive=True)
        elif self.fs.exists(self.ledger_path):
            self.fs.rm(self.ledger_path)
        if has_merged:
            self.fs.rm(join(self.path, LEDGER))

    def rows(self) -> Iterator[tuple[str, str]]:
        """(id, text) of every kept row in input order; duplicate ids and hash collisions are checked."""
        seen: dict[int, tuple[str, int]] = {}
        for rec in iter_texts(self.job.url, self.job.fmt, on_error=self.p.on_error, on_skip=self.skipped.append,
                              skip_flag="--on-error skip",
                              check_duplicates=False):
            h = hash_id(rec.id)
            prev = seen.get(h)
            if prev is not None:
                reason = (f"duplicate id {rec.id!r} (first seen on line {prev[1]})" if prev[0] == rec.id
                          else f"id {rec.id!r} hashes to the same uint64 as {prev[0]!r} (line {prev[1]})")
                if self.p.on_error != "skip":
                    raise InputError(reason, path=self.job.url, line=rec.line, hint="ids must be unique; or pass --on-error skip")
                self.skipped.append(Skipped(self.job.url, rec.line, reason))
                continue
            seen[h] = (rec.id, rec.line)
            yield rec.id, join_title(rec, self.p.use_title, self.p.title_join)

    def pieces(self, piece_rows: int = 1024) -> Iterator[tuple[int, list[str], list[str], bool]]:
        """(chunk index, ids, texts, last piece of the chunk?) in input order, in pieces of <= piece_rows rows.

        Sets ``num_rows`` and ``num_chunks`` once exhausted.
        """
        size = self.p.rows_per_chunk
        piece = min(size, piece_rows)
        ids: list[str] = []
        texts: list[str] = []
        c, in_chunk = 0, 0
        self.num_rows = 0
        for rid, text in self.rows():
            ids.append(rid)
            texts.append(text)
            self.num_rows += 1
            in_chunk += 1
            if in_chunk == size:
                yield c, ids, texts, True
                ids, texts, c, in_chunk = [], [], c + 1, 0
            elif len(ids) == piece:
                yield c, ids, texts, False
                ids, texts = [], []
        if in_chunk:
            yield c, ids, texts, True
            c += 1
        self.num_chunks = c

    def chunks(self) -> Iterator[tuple[int, list[str], list[str]]]:
        """(chunk index, ids, texts) of every chunk, read on a background thread."""
        ids: list[str] = []
        texts: list[str] = []
        for c, piece_ids, piece_texts, last in background(self.pieces(), name="embedctl-pretokenize-reader"):
            ids += piece_ids
            texts += piece_texts
            if last:
                yield c, ids, texts
                ids, texts = [], []

    def run(self, workers: int, pool=None) -> dict:
        ledger = self.check_existing()
        # a rerun over a finished cache re-reads every local chunk against its sha256 (~1.6 GB/s with SHA-NI:
        # seconds next to the tokenizing) and rebuilds what changed; a remote cache checks sizes only (reading
        # it back would cost a download), and its readers check each chunk's sha256 as they read it
        full = local_path(self.job.out) is not None
        if ledger.get("finished") and not self._drop_damaged(ledger, full=full):
            self.console.print(f"{self.job.side}: shard {self.i}/{self.n} already finished at {self.job.out}", markup=False)
            self._maybe_merge()
            return ledger
        resumed = bool(ledger["chunks"])
        if resumed and not ledger.get("finished"):
            self._drop_damaged(ledger, full=True)  # after a crash: every sha256, not only the sizes
        self._remove_stale_temps()
        write_file(self.fs, self.ledger_path, json_bytes(ledger))  # claim the folder before tokenizing (see _recheck)
        try:
            return self._write(ledger, workers, pool, resumed)
        except BaseException:
            if not ledger["chunks"] and self.fs.exists(self.ledger_path):
                self.fs.rm(self.ledger_path)  # nothing written: leave no claim behind
            raise

    def _write(self, ledger: dict, workers: int, pool, resumed: bool) -> dict:
        done = set(ledger["chunks"])

        def wanted(c: int) -> bool:
            return c % self.n == self.i and f"{c:06d}" not in done

        with Progress(None, f"pretokenize {self.job.side}", unit="rows") as bar:
            def record(c: int, result) -> None:
                chunk_bytes, ids_bytes, stats = result
                write_file(self.fs, join(self.path, "ids", chunk_name(c)), ids_bytes)
                write_file(self.fs, join(self.path, "chunks", chunk_name(c)), chunk_bytes)
                stats["files"] = {f"ids/{chunk_name(c)}": bytes_record(ids_bytes),
                                  f"chunks/{chunk_name(c)}": bytes_record(chunk_bytes)}
                ledger["chunks"][f"{c:06d}"] = stats
                write_file(self.fs, self.ledger_path, json_bytes(ledger))
                bar.advance(stats["rows"], info=f"{len(ledger['chunks'])} chunk(s)")

            if pool is None:
                self._run_here(wanted, record)
            else:
                self._run_pool(pool, workers, ((c, i, t) for c, i, t in self.chunks() if wanted(c)), record)
        ledger.update(num_chunks=self.num_chunks, num_rows=self.num_rows, skipped=len(self.skipped), finished=True)
        self._recheck(ledger, full=resumed)
        self._write_skipped()
        write_file(self.fs, self.ledger_path, json_bytes(ledger))
        self._maybe_merge()
        return ledger

    def _drop_damaged(self, ledger: dict, full: bool) -> bool:
        """Forget the chunks whose files are missing or differ from their records (they are rebuilt);
        True when anything is left to do. ``full`` checks every sha256 (a resume after a crash)."""
        damaged = damaged_chunks(self.fs, self.path, ledger, full=full)
        if not damaged and ledger.get("finished"):
            return False
        for key, problems in sorted(damaged.items()):
            self.console.print(f"{self.job.side}: rebuilding chunk {key}: {problems[0]}", markup=False)
            del ledger["chunks"][key]
        if damaged:
            ledger["finished"] = False
            merged = join(self.path, LEDGER)
            if self.fs.exists(merged):  # first, so no reader takes the cache as finished meanwhile
                self.fs.rm(merged)
        return True

    def _recheck(self, ledger: dict, full: bool) -> None:
        """At commit: no other run wrote this side with other settings meanwhile (its shard ledger, written
        when it started, would show) and every chunk file recorded is there with its recorded size (its
        sha256 too after a resume). Otherwise this shard is not marked finished."""
        others = [led for name, led in shard_ledgers(self.fs, self.path).items()
                  if name != shard_ledger_name(self.i, self.n)]
        if self.fs.exists(join(self.path, LEDGER)):
            others.append(read_json_file(self.fs, join(self.path, LEDGER)))
        bad = [led for led in others if led.get("fingerprint") != self.fingerprint]
        if bad:
            diff = fingerprint_diff(self.fingerprint, bad[0].get("fingerprint", {}))
            raise EmbedctlError(
                f"another `embedctl pretokenize` wrote {self.job.out} with other settings while this run was writing "
                "it (differs in: " + "; ".join(diff[:6]) + "); the cache now mixes both and is not marked finished",
                hint="run one pretokenize per --output at a time; rebuild it with --overwrite (or choose another --output)")
        on_disk = read_json_file(self.fs, self.ledger_path) if self.fs.exists(self.ledger_path) else {}
        if on_disk.get("fingerprint") != self.fingerprint:
            raise EmbedctlError(f"this shard's ledger {self.ledger_path} was replaced by another run while this one wrote "
                                "the cache; it is not marked finished", hint="rerun the command (one writer at a time)")
        damaged = damaged_chunks(self.fs, self.path, ledger, full=full)
        if damaged:
            raise EmbedctlError(f"{self.job.side}: chunk files changed while this run wrote them: "
                                + "; ".join(p for ps in damaged.values() for p in ps[:1]),
                                hint="rerun the same command: it rebuilds what is missing or damaged")

    def _run_here(self, wanted, record) -> None:
        """Tokenize in this process, piece by piece, while a thread reads the next piece."""
        ids: list[str] = []
        lists: list = []
        for c, piece_ids, piece_texts, last in background(self.pieces(), name="embedctl-pretokenize-reader"):
            if not wanted(c):
                continue
            ids += piece_ids
            lists += tokenize_texts(self.tok, self.job.side, piece_texts)
            if last:
                record(c, chunk_payload(ids, lists, self.dtype))
                ids, lists = [], []

    def _run_pool(self, pool, workers: int, todo, record) -> None:
        from concurrent.futures import FIRST_COMPLETED, wait

        pending = set()
        for c, ids, texts in todo:
            pending.add(pool.submit(_encode_task, (c, self.job.side, ids, texts, self.dtype)))
            if len(pending) >= 2 * workers:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in sorted(finished, key=lambda f: f.result()[0]):
                    record(*fut.result())
        for fut in sorted(pending, key=lambda f: f.result()[0]):
            record(*fut.result())

    def _remove_stale_temps(self) -> None:
        """Delete temporary files a killed run of this shard left (never another shard's)."""
        import re

        own = re.compile(r"^\.(chunk-(\d+)\.parquet|ledger-(\d+)-of-\d+\.json)\..*\.tmp$")
        for sub in ("chunks", "ids", "shards"):
            folder = join(self.path, sub)
            if not self.fs.exists(folder):
                continue
            for entry in self.fs.ls(folder, detail=False):
                m = own.match(entry.rsplit("/", 1)[-1])
                if m and ((m.group(2) and int(m.group(2)) % self.n == self.i) or (m.group(3) and int(m.group(3)) == self.i)):
                    self.fs.rm(entry)

    def _write_skipped(self) -> None:
        import json

        path = join(self.path, "skipped.jsonl")
        if self.skipped:
            text = "".join(json.dumps(s.as_dict(), sort_keys=True) + "\n" for s in self.skipped)
            write_file(self.fs, path, text.encode("utf-8"))
            self.console.print(f"{self.job.side}: skipped {len(self.skipped)} bad row(s); report: {self.job.out}/skipped.jsonl",
                               markup=False)
        elif self.fs.exists(path):
            self.fs.rm(path)

    def _maybe_merge(self) -> None:
        mine = [led for led in shard_ledgers(self.fs, self.path).values() if led.get("fingerprint") == self.fingerprint]
        merged = merge_ledgers(mine)
        if merged is not None:
            write_file(self.fs, join(self.path, LEDGER), json_bytes(merged))
            tokens = sum(ch["tokens"] for ch in merged["chunks"].values())
            self.console.print(f"{self.job.side}: {merged['num_rows']:,} rows, {tokens:,} tokens in "
                               f"{merged['num_chunks']} chunk(s) -> {self.job.out}", markup=False)
        else:
            self.console.print(f"{self.job.side}: shard {self.i} of {self.n} finished; the cache is complete when "
                               f"every shard has run", markup=False)


def run_pretokenize(loaded, command: str = "pretokenize") -> list[dict]:
    """Engine behind `embedctl pretokenize`: returns the ledger of every side written by this shard."""
    p = loaded.cfg.pretokenize
    problems = [f"`pretokenize.{k}` is not set (use --{k})" for k in ("input", "output") if not getattr(p, k)]
    if problems:
        raise EmbedctlError("; ".join(problems), hint="e.g. embedctl pretokenize --input corpus.jsonl --output runs/tokens",
                            exit_code=2)
    if p.rows_per_chunk < 1 or p.workers < 1:
        raise EmbedctlError("`pretokenize.rows_per_chunk` and `pretokenize.workers` must be >= 1", exit_code=2)
    n, i = shard_defaults(p.num_shards, p.shard_index)
    refuse_output_in_inputs(p.output, "--output", {"--input": p.input})
    _refuse_other_output(p.output)
    # one writer per output (per shard when sharded: the shards of one job write side by side)
    out_path = local_path(p.output)
    existed = out_path is not None and out_path.exists()
    try:
        with writer_lock(p.output, "token cache", f".shard-{i:05d}" if n > 1 else ""):
            return _run_locked(loaded, command, p, n, i)
    except BaseException:
        # a run refused on its first rows leaves no empty side/shards folders behind (one shard only: the
        # shards of a sharded job write side by side and may be creating folders right now)
        if out_path is not None and n == 1:
            _remove_empty_folders(out_path, keep_root=existed)
        raise


def _refuse_other_output(output: str) -> None:
    """Exit 2 before any write when ``output`` holds another command's output (an index, batches, a training
    run, a collection): the cache's chunks and ledgers would mix with it, and --overwrite would not make
    that right."""
    fs, path = url_to_fs(output)
    other = other_output(fs, path, own=(TOKEN_CACHE, "documents/ledger.json", "queries/ledger.json"))
    if other is not None:
        raise EmbedctlError(f"--output {output} holds {other[1]} ({other[0]}); nothing was written",
                            hint="choose a new folder for the token cache, e.g. --output cache/NAME", exit_code=2)


def _remove_empty_folders(root: Path, keep_root: bool) -> None:
    """Remove the empty folders under ``root`` (deepest first), and ``root`` itself when empty and not kept."""
    if not root.is_dir():
        return
    for folder in sorted((d for d in root.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()  # only succeeds when empty
    if not keep_root:
        with contextlib.suppress(OSError):
            root.rmdir()


def _run_locked(loaded, command: str, p, n: int, i: int) -> list[dict]:
    """run_pretokenize under the output's writer lock."""
    jobs = plan_jobs(p.input, p.output, p.format, p.side)
    tokenizer = make_tokenizer(loaded.cfg.model)
    console = stderr_console()
    writers = [SideWriter(job, loaded, tokenizer, n, i, console) for job in jobs]
    for w in writers:  # fail on any mismatch before tokenizing anything
        w.check_existing() if not p.overwrite else None
    if p.workers > 1:
        with worker_pool(p.workers, loaded.cfg.model, tokenizer) as pool:
            ledgers = [w.run(p.workers, pool) for w in writers]
    else:
        ledgers = [w.run(1) for w in writers]
    for job in jobs:  # per side: a later `--side queries` run never replaces the documents' provenance
        write_run_info(job.out, loaded, command)
    root_fs, root = url_to_fs(p.output)
    if {job.side for job in jobs} == {"documents", "queries"} or not root_fs.exists(join(root, "resolved_config.yaml")):
        write_run_info(p.output, loaded, command)  # the root: the run that wrote both sides, or the first one
    return ledgers
