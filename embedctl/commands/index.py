"""`embedctl index [add|delete|compact|info]`: build an index, or change / describe one (``index.mode``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from embedctl.errors import ConfigError, EmbedctlError
from embedctl.index import meta as M
from embedctl.index.build import build_index
from embedctl.index.maintain import compact_index, index_info
from embedctl.index.update import UpdateOptions, add_documents, delete_documents, read_id_file
from embedctl.runinfo import write_run_info
from embedctl.util.console import stderr_console
from embedctl.util.ranks import Ranks


def run(loaded: Any, as_json: bool = False, verify: bool = False) -> dict[str, Any]:
    """Run ``index.mode`` (build by default); prints a summary (stderr) or, for info, the report (stdout)."""
    icfg = loaded.cfg.index
    console = stderr_console()
    if icfg.mode == "build":
        # torchrun / srun / PyTorchJob: every rank takes chunks
        timing = loaded.cfg.ranks  # the ranks' timeouts
        with Ranks.from_env("index", dead_s=timing.dead_s, wait_s=timing.wait_s) as ranks:
            summary = build_index(loaded, ranks)
        if not ranks.is_lead:
            console.print(f"rank {ranks.rank} of {ranks.world}: done in {summary['seconds']} s", markup=False)
            return summary
        console.print(f"built {summary['kind']} index of {summary['num_docs']} documents in {summary['seconds']} s "
                      f"with model {summary['model']}", markup=False)
        console.print(f"index: {Path(summary['index']).resolve()}", markup=False)
        return summary
    index_dir = target(icfg)
    if icfg.mode == "info":
        return _info(index_dir, as_json, verify)
    options = UpdateOptions.from_config(icfg)
    if icfg.mode == "add":
        if not icfg.collection:
            raise ConfigError(["`index.collection`: no documents to add; pass --collection FILE"])
        summary = add_documents(index_dir, icfg.collection, options=options)
        line = (f"added {summary['added']}, updated {summary['updated']}, unchanged {summary['unchanged']} "
                f"document(s) in {summary['seconds']} s")
        if summary.get("encoded_docs"):
            line += f" (encoded {summary['encoded_docs']} at {summary['docs_per_s']} docs/s)"
        drift = summary.get("drift") or {}
        if drift.get("message"):
            console.print(f"drift: {drift['message']}", markup=False)
    elif icfg.mode == "delete":
        ids = list(icfg.delete_ids) + (read_id_file(icfg.delete_ids_file) if icfg.delete_ids_file else [])
        if not ids:
            raise ConfigError(["`index.delete_ids`: no ids to delete; pass --id ID or --ids FILE"])
        summary = delete_documents(index_dir, ids, options=options)
        line = f"deleted {summary['deleted']} of {summary['requested']} id(s) in {summary['seconds']} s"
        if summary["unknown"]:
            shown = ", ".join(repr(i) for i in summary["unknown"][:10]) + (" ..." if len(summary["unknown"]) > 10 else "")
            line += f"; {len(summary['unknown'])} not in the index: {shown}"
    else:
        summary = compact_index(index_dir, options=options)
        line = (f"compacted {summary['segments_before']} segment(s) into {summary['segments']}, "
                f"removed {summary['removed_rows']} deleted row(s); {summary['bytes_before']} -> "
                f"{summary.get('bytes', summary['bytes_before'])} bytes in {summary['seconds']} s"
                if summary["changed"] else "nothing to compact: one segment, no deleted rows")
    console.print(line, markup=False)
    console.print(f"index: {index_dir.resolve()} (version {summary['generation']}: {summary['documents']} "
                  f"documents, {summary['segments']} segment(s)){'' if summary['changed'] else ', unchanged'}",
                  markup=False)
    if summary["changed"]:  # the run's record beside the index: one folder per change
        write_run_info(index_dir / "runs" / f"g{summary['generation']:06d}-{icfg.mode}", loaded, f"index {icfg.mode}")
    return summary


def target(icfg: Any) -> Path:
    """The index a change or info applies to: index.root/index.name, else LATEST under index.root."""
    path = M.find_index(None, icfg.root, icfg.name)
    if not path.exists():
        raise EmbedctlError(f"no index at {path}", hint="pass --index DIR (an index built by `embedctl index`)")
    return path


def _info(index_dir: Path, as_json: bool, verify: bool) -> dict[str, Any]:
    info = index_info(index_dir, verify_files=verify)
    if as_json:
        print(json.dumps(info, indent=2, sort_keys=True))
    else:
        console = stderr_console()
        lines = [f"index: {Path(info['index']).resolve()} ({info['kind']}, {info['format']})",
                 f"documents: {info['documents']} (deleted rows kept until compact: {info['deleted']})",
                 f"segments: {info['segments']}   version: {info['version']} (last change: {info['last_change']})",
                 f"bytes: {info['bytes']} (on disk with the previous version: {info['bytes_on_disk']})",
                 f"model: {info['model']}   backend: {info['backend']}"]
        if info.get("num_partitions") is not None:
            lines.append(f"centroids: {info['num_partitions']} (built with {info['built_partitions']})")
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
