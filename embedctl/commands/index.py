"""`embedctl index [add|delete|compact|info]`: build an index, or change / describe one, through the
Python API (embedctl.api.Index): the subcommand is the ``operation`` argument, never a config key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedctl.api import Index
from embedctl.errors import ConfigError, EmbedctlError
from embedctl.index import meta as M
from embedctl.index.files import RUNS_DIR
from embedctl.index.update import read_id_file
from embedctl.runinfo import write_run_info
from embedctl.util.atomic import json_text
from embedctl.util.console import stderr_console
from embedctl.util.ranks import Ranks
from embedctl.util.threads import set_threads

OPERATIONS = ("build", "add", "delete", "compact", "info")


def run(loaded: Any, operation: str = "build", *, ids: list[str] | None = None, ids_file: str | None = None,
        strict: bool = False, as_json: bool = False, verify: bool = False) -> dict[str, Any]:
    """Run one operation (build by default); prints a summary (stderr) or, for info, the report (stdout).
    ``ids`` / ``ids_file`` / ``strict``: delete's arguments; ``as_json`` / ``verify``: info's."""
    set_threads(loaded.cfg.index.threads)
    if operation == "build":
        return _build(loaded)
    index = Index(target(loaded.cfg.index), loaded)
    if operation == "info":
        return _info(index, as_json, verify)
    if operation == "add":
        if not loaded.cfg.index.collection:
            raise ConfigError(["`index.collection`: no documents to add; pass --collection FILE"])
        summary = index.add(loaded.cfg.index.collection, progress=True)
        line = _added_line(summary)
    elif operation == "delete":
        wanted = list(ids or []) + (read_id_file(ids_file) if ids_file else [])
        if not wanted:
            raise EmbedctlError("no ids to delete", hint="pass --id ID (repeatable) or --ids FILE", exit_code=2)
        summary = index.delete(wanted, strict=strict)
        line = _deleted_line(summary)
    elif operation == "compact":
        summary = index.compact()
        line = (f"compacted {summary['segments_before']} segment(s) into {summary['segments']}, "
                f"removed {summary['removed_rows']} deleted row(s); {summary['bytes_before']} -> "
                f"{summary.get('bytes', summary['bytes_before'])} bytes in {summary['seconds']} s"
                if summary["changed"] else "nothing to compact: one segment, no deleted rows")
    else:
        raise EmbedctlError(f"unknown index operation {operation!r}", hint=f"use one of {', '.join(OPERATIONS)}",
                            exit_code=2)
    console = stderr_console()
    console.print(line, markup=False)
    console.print(f"index: {index.path.resolve()} (version {summary['generation']}: {summary['documents']} "
                  f"documents, {summary['segments']} segment(s)){'' if summary['changed'] else ', unchanged'}",
                  markup=False)
    if summary["changed"]:  # the run's record beside the index: one folder per change
        write_run_info(index.path / RUNS_DIR / f"g{summary['generation']:06d}-{operation}", loaded, f"index {operation}")
    return summary


def _build(loaded: Any) -> dict[str, Any]:
    console = stderr_console()
    timing = loaded.cfg.ranks  # the ranks' timeouts; torchrun / srun / PyTorchJob: every rank takes chunks
    with Ranks.from_env("index", dead_s=timing.dead_s, wait_s=timing.wait_s) as ranks:
        summary = Index.build(None, config=loaded, ranks=ranks).summary or {}
    if not ranks.is_lead:
        console.print(f"rank {ranks.rank} of {ranks.world}: done in {summary['seconds']} s", markup=False)
        return summary
    console.print(f"built {summary['kind']} index of {summary['num_docs']} documents in {summary['seconds']} s "
                  f"with model {summary['model']}", markup=False)
    console.print(f"index: {Path(summary['index']).resolve()}", markup=False)
    return summary


def _added_line(summary: dict[str, Any]) -> str:
    line = (f"added {summary['added']}, updated {summary['updated']}, unchanged {summary['unchanged']} "
            f"document(s) in {summary['seconds']} s")
    if summary.get("encoded_docs"):
        line += f" (encoded {summary['encoded_docs']} at {summary['docs_per_s']} docs/s)"
    for merge in summary.get("merged") or []:  # index.merge_factor: the newest segments merged after the add
        line += f"; merged {merge['segments']} segments ({merge['documents']} documents) into one"
    recluster = summary.get("recluster")
    if recluster:
        stderr_console().print(f"re-clustered: {recluster['reason']}: {recluster['documents']} documents in one "
                               f"segment, re-encoded from their stored texts, {recluster['num_partitions']} centroids "
                               "trained on them", markup=False)
    drift = summary.get("drift") or {}
    if drift.get("message"):
        stderr_console().print(f"drift: {drift['message']}", markup=False)
    return line


def _deleted_line(summary: dict[str, Any]) -> str:
    line = f"deleted {summary['deleted']} of {summary['requested']} id(s) in {summary['seconds']} s"
    if summary["unknown"]:
        shown = ", ".join(repr(i) for i in summary["unknown"][:10]) + (" ..." if len(summary["unknown"]) > 10 else "")
        line += f"; {len(summary['unknown'])} not in the index: {shown}"
    return line


def target(icfg: Any) -> Path:
    """The index a change or info applies to: index.root/index.name, else LATEST under index.root."""
    path = M.find_index(None, icfg.root, icfg.name)
    if not path.exists():
        raise EmbedctlError(f"no index at {path}", hint="pass --index DIR (an index built by `embedctl index`)")
    return path


def _info(index: Index, as_json: bool, verify: bool) -> dict[str, Any]:
    index_dir = index.path
    info = index.info(verify=verify)
    for warning in info.get("warnings") or []:
        stderr_console().print(f"warning: {warning}; search and changes refuse this index until it is "
                               "restored (see `embedctl index info --verify`)", markup=False)
    if as_json:
        print(json_text(info, indent=2, sort_keys=True))
    else:
        console = stderr_console()
        lines = [f"index: {Path(info['index']).resolve()} ({info['kind']}, {info['format']})",
                 f"documents: {info['documents']} (deleted rows kept until compact: {info['deleted']})",
                 f"segments: {info['segments']}   version: {info['version']} (last change: {info['last_change']})",
                 f"bytes: {info['bytes']} (on disk with the previous version: {info['bytes_on_disk']})",
                 f"model: {info['model']}   backend: {info['backend']}"]
        if info.get("num_partitions") is not None:
            lines.append(f"centroids: {info['num_partitions']} (built with {info['built_partitions']})")
        lines.append(f"lexical side: {'yes (bm25s)' if info.get('lexical') else 'no'}   fields: "
                     + (", ".join(info.get("fields") or []) or "none"))
        if info.get("drift"):
            lines.append(f"last add's drift: ratio {info['drift']['ratio']}, {info['drift']['action']}")
        print("\n".join(lines))
        if verify:
            console.print("verify: every file matches its sha256" if not info["verify"] else
                          "verify: " + "; ".join(info["verify"]), markup=False)
    if verify and info["verify"]:
        raise EmbedctlError(f"{len(info['verify'])} file(s) of {index_dir} do not match the index's records: "
                            + "; ".join(info["verify"]),
                            hint="rebuild the index (`embedctl index ... --overwrite`) or restore the files")
    return info
