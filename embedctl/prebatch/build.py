"""`embedctl prebatch` engine: token cache + relevance labels -> Arctic Embed pre-batched folder.

Steps: open both sides of the token cache; read the labels (qrels, pairs or triples); check every id
(unknown ids fail with file and line, or are skipped and reported under --on-error skip); report
and skip queries without a positive; optionally mine hard negatives; compose seeded batches; write
``batch_%08d/`` folders, then ``report.json`` and finally ``metadata.json`` (its presence = complete).
"""

from __future__ import annotations

import dataclasses
import re

from embedctl.data.batch_writer import check_before_commit, with_progress, write_batch
from embedctl.data.batches import Batch
from embedctl.data.compose import assemble, compose_queries
from embedctl.data.formats import PREBATCH_FORMAT, PREBATCH_VERSION, join
from embedctl.data.pretokenize import input_fingerprint
from embedctl.data.relations import read_relations
from embedctl.data.token_cache import fingerprint_diff, open_token_cache
from embedctl.errors import EmbedctlError, InputError
from embedctl.prebatch.mining import mine_labelled_negatives
from embedctl.prebatch.teacher import Teacher
from embedctl.runinfo import write_run_info
from embedctl.util.atomic import json_bytes
from embedctl.util.console import stderr_console
from embedctl.util.fs import url_to_fs, write_file
from embedctl.util.lines import Skipped
from embedctl.util.outputs import BATCHES, other_output
from embedctl.util.ranks import Ranks


def _prepare_output(out_url: str, overwrite: bool):
    """(fs, path) of an output folder that holds no earlier prebatch output (removed with ``overwrite``)."""
    fs, path = url_to_fs(out_url)
    if fs.exists(path):
        entries = [e.rsplit("/", 1)[-1] for e in fs.ls(path, detail=False)]
        # another command's output (the file each writes last, or its ledger): prebatch would write its
        # config files over that command's and mix batches in
        other = other_output(fs, path, own=(BATCHES,))
        if other is not None:
            raise EmbedctlError(f"--output {out_url} holds {other[1]} ({other[0]}); nothing was written",
                                hint="choose a new folder for the batches, e.g. --output batches/NAME", exit_code=2)
        # only what prebatch writes (batch_%08d folders, its two JSON files): --overwrite removes nothing else
        ours = [e for e in entries if re.fullmatch(r"batch_\d{8}", e) or e in ("metadata.json", "report.json")]
        if ours and not overwrite:
            state = "a finished" if "metadata.json" in entries else "an unfinished"
            raise EmbedctlError(f"{out_url} already holds {state} pre-batched dataset",
                                hint="pass --overwrite to replace it, or choose another --output")
        if overwrite and "metadata.json" in entries:
            fs.rm(join(path, "metadata.json"))  # first, so a crash below never leaves it looking complete
        for e in ours:
            if e != "metadata.json":
                fs.rm(join(path, e), recursive=True)
    fs.makedirs(path, exist_ok=True)
    return fs, path


def _check_ids(rel, q_index: dict, d_index: dict, on_error: str, skipped: list) -> dict[str, dict[str, int]]:
    """Labels restricted to ids present in the caches; unknown ids raise (file and line) or are skipped."""
    labels: dict[str, dict[str, int]] = {}
    for qid, docs in rel.labels.items():
        for did, grade in docs.items():
            missing = "query" if qid not in q_index else "document" if did not in d_index else None
            if missing:
                line = rel.lines[(qid, did)]
                name = qid if missing == "query" else did
                msg = f"unknown {missing} id {name!r}: not in the token cache's {missing}s"
                if on_error != "skip":
                    raise InputError(msg, path=rel.path, line=line,
                                     hint="pretokenize the matching corpus/queries, or pass --on-error skip")
                skipped.append(Skipped(rel.path, line, msg))
                continue
            labels.setdefault(qid, {})[did] = grade
    return labels


def _teacher(loaded, assembled, q_index, d_index, q_tokens, d_tokens, qcache, console) -> Teacher:
    """The teacher of `prebatch.teacher`, with every query and document of the batches encoded."""
    p = loaded.cfg.prebatch
    q_rows = [q_index[q] for gq, _, _ in assembled for q in gq]
    d_rows = [d_index[d] for _, gd, _ in assembled for d in gd]
    teacher = Teacher.load(loaded.cfg.model, p.teacher, texts=len(set(q_rows)) + len(set(d_rows)))
    console.print(f"teacher {p.teacher} ({teacher.kind}) scores every (query, document) pair of each batch: "
                  f"{len(set(q_rows)):,} queries, {len(set(d_rows)):,} documents", markup=False)
    teacher.encode(q_rows, d_rows, q_tokens, d_tokens, qcache, p.mine_batch_size)
    return teacher


def run_prebatch(loaded, command: str = "prebatch", ranks: Ranks | None = None) -> dict:
    """Engine behind `embedctl prebatch`; returns the metadata written. Several ``ranks`` (embedctl.util.ranks)
    share the mining's corpus chunks; rank 0 alone writes the batches (the others return ``{}``)."""
    ranks = ranks or Ranks.single()
    p = loaded.cfg.prebatch
    missing = [f"`prebatch.{k}` is not set (use --{k})" for k in ("input", "qrels", "output") if not getattr(p, k)]
    if missing:
        raise EmbedctlError("; ".join(missing), exit_code=2,
                            hint="e.g. embedctl prebatch --input runs/tokens --qrels qrels/train.tsv --output runs/batches")
    if p.queries_per_batch < 1:
        raise EmbedctlError("`prebatch.queries_per_batch` must be >= 1", exit_code=2)
    console = stderr_console()
    qcache, dcache = open_token_cache(p.input, "queries"), open_token_cache(p.input, "documents")
    if qcache.fingerprint["tokenizer"] != dcache.fingerprint["tokenizer"]:
        diff = fingerprint_diff(qcache.fingerprint["tokenizer"], dcache.fingerprint["tokenizer"])
        raise InputError("queries and documents were tokenized with different settings: " + "; ".join(diff[:5]),
                         path=p.input, hint="pretokenize both sides with the same model settings")
    skipped: list[Skipped] = []
    rel = read_relations(p.qrels, p.relations_format, on_error=p.on_error, on_skip=skipped.append)
    q_ids, q_tokens = qcache.load()
    d_ids, d_tokens = dcache.load()
    q_index = {q: i for i, q in enumerate(q_ids)}
    d_index = {d: i for i, d in enumerate(d_ids)}
    labels = _check_ids(rel, q_index, d_index, p.on_error, skipped)
    no_positive = [q for q in rel.labels if not any(r > 0 for r in labels.get(q, {}).values())]
    if no_positive:
        console.print(f"warning: {len(no_positive)} quer{'y' if len(no_positive) == 1 else 'ies'} without a positive "
                      f"label skipped (listed in report.json), e.g. {no_positive[:5]}", markup=False)
    dropped = set(no_positive)
    qids = [q for q in rel.labels if q not in dropped]
    if not qids:
        raise InputError("no query has a positive label: nothing to batch", path=p.qrels)
    mined = mine_labelled_negatives(loaded, labels, qids, q_index, d_index, q_tokens, d_tokens, qcache, console,
                                    ranks) if p.negatives_per_query > 0 else 0
    if not ranks.is_lead:  # batches are composed and written by rank 0 alone, with the seeded shuffle
        ranks.wait_for("done")
        return {}
    fs, root = _prepare_output(p.output, p.overwrite)
    dtype = dcache.token_dtype if "uint32" in (dcache.token_dtype, qcache.token_dtype) else "uint16"
    groups = compose_queries(qids, labels, p.queries_per_batch, p.seed, p.false_negatives)
    assembled = [assemble(group, labels, p.false_negatives) for group in groups]
    teacher = _teacher(loaded, assembled, q_index, d_index, q_tokens, d_tokens, qcache, console) if p.teacher else None
    entries = []
    for b, (gq, gd, relm) in enumerate(with_progress(assembled, "prebatch", unit="batches")):
        q_rows, d_rows = [q_index[q] for q in gq], [d_index[d] for d in gd]
        batch = Batch(qcache.int_ids[q_rows], [q_tokens[r] for r in q_rows],
                      dcache.int_ids[d_rows], [d_tokens[r] for r in d_rows], relm,
                      teacher_scores=teacher.scores(q_rows, d_rows) if teacher else None)
        name = f"batch_{b:08d}"
        entries.append({"name": name, **write_batch(fs, join(root, name), batch, dtype)})
    totals = {k: sum(e[k] for e in entries) for k in ("queries", "documents", "relations", "positives", "negatives")}
    report = {"queries_without_positive": no_positive, "skipped_rows": [s.as_dict() for s in skipped]}
    write_file(fs, join(root, "report.json"), json_bytes(report))
    meta = {
        "format": PREBATCH_FORMAT, "format_version": PREBATCH_VERSION, "num_batches": len(entries), "batches": entries,
        "token_dtype": dtype, "counts": {**totals, "mined_negatives": mined, "queries_without_positive": len(no_positive),
                                          "skipped_rows": len(skipped), "label_rows": rel.rows},
        "sources": {"token_cache": p.input, "queries_fingerprint": qcache.fingerprint,
                    "documents_fingerprint": dcache.fingerprint, "relations": {"url": p.qrels, "format": rel.fmt, **input_fingerprint(p.qrels)}},
        "model": qcache.model, "config": dataclasses.asdict(p),
        **({"teacher": teacher.describe()} if teacher else {}),
    }
    check_before_commit(fs, root, entries, (qcache, dcache))
    write_file(fs, join(root, "metadata.json"), json_bytes(meta))
    write_run_info(p.output, loaded, command)
    ranks.publish("done")
    console.print(f"{len(entries)} batches, {totals['queries']:,} queries, {totals['documents']:,} documents, "
                  f"{totals['positives']:,} positives, {totals['negatives']:,} negatives ({mined:,} mined) -> {p.output}",
                  markup=False)
    return meta
