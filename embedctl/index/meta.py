"""The index folder: its metadata file, the model it was built with, and finding an index to search.

Layout of ``<index.root>/<index.name>/`` (a finished index; built in ``.<name>.building`` beside it, with
the build ledger (embedctl.index.ledger), and renamed):
    embedctl_index.json   metadata (below), written last
    docs.parquet          one row per document in pid order: id (string, as in the collection), title, text
    dense.faiss           dense: faiss index (inner product) over one vector per document
    plaid/                plaid: the PLAID arrays (docs/index-format.md); their description is the metadata's
                          ``plaid`` section
    resolved_config.yaml, overrides.yaml, versions.json   run info
``<index.root>/LATEST`` names the newest index (what `embedctl search` opens without --index).

Metadata keys: format ("embedctl-index"), format_version, kind ("dense" | "plaid"), num_docs,
collection (URL as given), model {name_or_path, path, kind, dim, config (effective ModelConfig),
tokenizer (fingerprint), weights (signature)}, request (what shaped the index, as the build ledger
recorded it), backend {name, precision}, dense {type, params..., encode_s, faiss_s} or plaid {the arrays'
description: docs/index-format.md}, timings {prepare_s, build_s, ...}, build {resumed_chunks,
encoded_docs, ...} (facts of the run that finished it), created.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from embedctl.config.sections.model import ModelConfig
from embedctl.errors import EmbedctlError
from embedctl.index.files import DOCS_FILE, LATEST_FILE, META_FILE, building_dir  # noqa: F401 - M.* names
from embedctl.models.hub import BUNDLED_ALIASES, resolve_model_path
from embedctl.models.tokenization import fingerprint_differences
from embedctl.models.weights_identity import weights_identity, weights_match
from embedctl.util import atomic
from embedctl.util.fs import folder_name_problem
from embedctl.util.io import read_json

FORMAT = "embedctl-index"
FORMAT_VERSION = 2  # 2: one metadata file (the plaid section), the build ledger
KINDS = ("dense", "plaid", "lexical")


def weights_signature(model_dir: str | Path) -> str:
    """The identity of a model folder's weights: ``sha256:<hex>`` over every byte of them
    (embedctl.models.weights_identity; each file's hash cached by path, size and times)."""
    return weights_identity(model_dir)


# model.* keys that say how a run computes, not what the index holds: the encode backend is recorded in the
# index's `backend` record (`encoder`), compared on resume like the PLAID backend, not in the model identity
RUN_TIME_MODEL_KEYS = ("encoder_backend",)


def model_settings(model_cfg: Any) -> dict[str, Any]:
    """``model_cfg`` as a dict without :data:`RUN_TIME_MODEL_KEYS` (what the model identity and request hold)."""
    values = dataclasses.asdict(model_cfg) if dataclasses.is_dataclass(model_cfg) else dict(model_cfg)
    return {k: v for k, v in values.items() if k not in RUN_TIME_MODEL_KEYS}


def encoder_backend_of(meta: dict[str, Any]) -> str:
    """The encode backend the index's documents were encoded with (indexes from before the key: reference)."""
    return str((meta.get("backend") or {}).get("encoder") or "reference")


def model_record(encoder: Any, name_or_path: str) -> dict[str, Any]:
    """What search needs to load the same encoder and to check that it is the same one."""
    path = resolve_model_path(name_or_path)
    return {
        "name_or_path": name_or_path,
        "path": path,
        "kind": encoder.kind,
        "dim": int(encoder.dim),
        "config": model_settings(encoder.model_cfg),
        "tokenizer": encoder.tokenizer.fingerprint(),
        "weights": weights_signature(path),
    }


def new_metadata(kind: str, num_docs: int, collection: str | None, model: dict[str, Any], **extra: Any
                 ) -> dict[str, Any]:
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "kind": kind, "num_docs": int(num_docs),
            "collection": collection, "model": model, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **extra}


SEAL_KEY = "metadata_sha256"


def _content_sha256(obj: dict[str, Any], key: str) -> str:
    import hashlib

    body = {k: v for k, v in obj.items() if k != key}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def seal(obj: dict[str, Any], key: str = SEAL_KEY) -> dict[str, Any]:
    """``obj`` with the sha256 of its own content under ``key``: the metadata file (and each commit file)
    holds every other file's checksum, so this is what tells an edited or damaged one (a changed num_docs, a
    changed model record) from the one embedctl wrote. Checked on every open (one small JSON)."""
    return {**obj, key: _content_sha256(obj, key)}


def seal_broken(obj: dict[str, Any], key: str = SEAL_KEY) -> bool:
    """True when ``obj`` carries a seal that its content does not match (files from before seals have none)."""
    return key in obj and obj[key] != _content_sha256(obj, key)


def read_metadata(index_dir: Path) -> dict[str, Any]:
    """Read and check an index's metadata; raises EmbedctlError with a fix for every mismatch."""
    meta_path = index_dir / META_FILE
    if not meta_path.is_file():
        if building_dir(index_dir.parent, index_dir.name).is_dir():
            raise EmbedctlError(f"the index {index_dir} was never finished (its build was interrupted)",
                                hint="rerun the same `embedctl index` command: it resumes")
        what = "no such folder" if not index_dir.exists() else f"no {META_FILE} in it"
        raise EmbedctlError(f"no index at {index_dir}: not an embedctl index ({what})",
                            hint="build one with `embedctl index --collection FILE`, or pass --index FOLDER")
    meta = read_json(meta_path, what="index metadata", hint="rebuild the index with `embedctl index ... --overwrite`")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise EmbedctlError(f"{meta_path}: not an embedctl index (format {found!r}, expected {FORMAT!r})",
                            hint="point at a folder written by `embedctl index`, or pass --index FOLDER")
    if meta.get("format_version") != FORMAT_VERSION:
        raise EmbedctlError(
            f"{meta_path}: index format version {meta.get('format_version')!r}; "
            f"this embedctl reads {FORMAT!r} version {FORMAT_VERSION}",
            hint="rebuild the index with this embedctl: `embedctl index ... --overwrite`")
    if meta.get("kind") not in KINDS:
        raise EmbedctlError(f"{meta_path}: unknown index kind {meta.get('kind')!r} (expected {', '.join(KINDS)})")
    if seal_broken(meta):  # indexes from before the seal have none
        raise EmbedctlError(f"{meta_path}: its content differs from the sha256 it was written with (edited or "
                            "damaged after the build)", hint="rebuild the index with `embedctl index ... --overwrite`, "
                            "or restore the file from a copy")
    return meta


def model_config(meta: dict[str, Any], device: str):
    """The ModelConfig recorded in the index (absolute model path, today's device choice, the encode backend
    its documents were encoded with): what search and `embedctl index add` load to encode as the build did."""
    built = meta["model"]
    known = {f.name for f in dataclasses.fields(ModelConfig)} - set(RUN_TIME_MODEL_KEYS)
    values = {k: v for k, v in built["config"].items() if k in known}
    values["encoder_backend"] = encoder_backend_of(meta)
    if built["name_or_path"] not in BUNDLED_ALIASES:
        values["name_or_path"] = built["path"]
    values["device"] = device
    return ModelConfig(**values)


def write_latest(root: Path, name: str) -> None:
    atomic.write_text(root / LATEST_FILE, name + "\n")


def find_index(search_index: str | None, root: str, name: str | None) -> Path:
    """The index folder to search: search.index, else index.root/index.name, else LATEST, else the newest.

    ``search.index`` may be a folder or a name under index.root.
    """
    root_path = Path(root)
    if search_index:
        path = Path(search_index)
        if not path.exists() and (root_path / search_index).exists():
            path = root_path / search_index
        return path
    if name:
        return root_path / name
    latest = root_path / LATEST_FILE
    if latest.is_file():
        named = latest.read_text().strip()
        if folder_name_problem(named) is not None:  # an edited LATEST must not lead a writer out of the root
            raise EmbedctlError(f"{latest} names {named!r}, not an index folder under {root_path}",
                                hint="pass --index FOLDER, or write the name of an index under index.root into LATEST")
        return root_path / named
    found = sorted(root_path.glob(f"*/{META_FILE}"), key=lambda p: p.stat().st_mtime) if root_path.is_dir() else []
    if not found:
        raise EmbedctlError(f"no index found under {root_path.resolve()} (index.root)",
                            hint="build one with `embedctl index --collection FILE`, or pass --index FOLDER")
    return found[-1].parent


def check_model_request(meta: dict[str, Any], requested: str | None, index_dir: Path) -> None:
    """Fail when the user asks for a model other than the one the index was built with."""
    if requested is None:
        return
    built = meta["model"]
    if requested == built["name_or_path"]:
        return
    try:
        same = resolve_model_path(requested) == built["path"]
    except EmbedctlError:
        same = False
    if not same:
        raise EmbedctlError(
            f"the index {index_dir} was built with model {built['name_or_path']!r}, not {requested!r}",
            hint="search loads the index's own model: drop model.name_or_path, or build an index with that "
                 "model (`embedctl index --model ... --name ...`)")


def check_model_unchanged(meta: dict[str, Any], encoder: Any, index_dir: Path) -> None:
    """Fail when the model files or tokenization changed since the index was built."""
    built = meta["model"]
    problems = []
    if not weights_match(str(built["weights"]), built["path"]):
        problems.append(f"the weights in {built['path']} changed since the index was built (another checkpoint, "
                        "or the files were edited)")
    changed = fingerprint_differences(built["tokenizer"], json.loads(json.dumps(encoder.tokenizer.fingerprint())))
    if changed:
        problems.append("the tokenization changed (" + "; ".join(changed) + ")")
    if problems:
        raise EmbedctlError(f"the index {index_dir} was built with another model: " + "; ".join(problems),
                            hint="rebuild the index with the current model (`embedctl index ... --overwrite`)")


# model.* keys a search or an add sets itself (the rest are pinned by the index); name_or_path:
# check_model_request; encoder_backend: the documents' one unless set (a search notes the difference)
CHOSEN_PER_RUN_KEYS = ("device", "name_or_path", "encoder_backend")


def ignored_model_settings(loaded: Any, meta: dict[str, Any]) -> list[tuple[str, Any, Any, str]]:
    """``model.*`` values set for this run (config file, override, flag; not defaults, not the model's own
    file) that differ from what the index pins: ``(key, wanted, pinned, origin)`` each. Search and
    `embedctl index add` encode with the pinned ones (the documents were), so these would not be used."""
    pinned = model_config(meta, loaded.cfg.model.device)
    out = []
    for f in dataclasses.fields(ModelConfig):
        key = f"model.{f.name}"
        origin = loaded.origin(key)
        if f.name in CHOSEN_PER_RUN_KEYS or origin == "default" or origin.startswith("model file"):
            continue
        wanted, used = getattr(loaded.cfg.model, f.name), getattr(pinned, f.name)
        if wanted != used:
            out.append((key, wanted, used, origin))
    return out


# index.* keys that shape an index but that `embedctl index add` takes from the index (collection is what to
# add, batch_size how many to encode at once: both used)
_ADD_USES = ("collection", "batch_size")


def ignored_index_settings(loaded: Any, meta: dict[str, Any]) -> list[tuple[str, Any, Any, str]]:
    """``index.*`` shaping values set for this run that differ from the ones the index was built with
    (``request.index`` of its metadata): ``(key, wanted, built, origin)`` each."""
    from embedctl.config.sections.index import IndexConfig

    built = (meta.get("request") or {}).get("index") or {}
    out = []
    for name in IndexConfig.SHAPING:
        key = f"index.{name}"
        if name in _ADD_USES or name not in built or loaded.origin(key) == "default":
            continue
        wanted = getattr(loaded.cfg.index, name, None)
        if json.loads(json.dumps(wanted, default=str)) != built[name]:
            out.append((key, wanted, built[name], loaded.origin(key)))
    return out


def requested_model(loaded: Any) -> str | None:
    """model.name_or_path when the user set it explicitly for this run (override, flag or config file)."""
    if any(item.startswith("model.name_or_path=") for item in loaded.overrides) or "model.name_or_path" in loaded.flags:
        return loaded.cfg.model.name_or_path
    return None


def refuse_ignored_settings(loaded: Any, meta: dict[str, Any], index_dir: Path, what: str) -> None:
    """`embedctl index add` (``what``): refuse settings it would not use (another model folder, other model
    settings such as lengths or kind, other index shaping keys), naming each and the fix (exit 2)."""
    check_model_request(meta, requested_model(loaded), index_dir)
    found = ignored_model_settings(loaded, meta) + ignored_index_settings(loaded, meta)
    if found:
        listed = "; ".join(f"{key}={wanted!r} ({origin}; the index has {used!r})" for key, wanted, used, origin in found)
        raise EmbedctlError(
            f"{what} uses the settings the index {index_dir} was built with, and these differ: {listed}",
            hint=f"drop {', '.join(k for k, *_ in found)} from this command (the index keeps its own), or build a "
                 "new index with them (`embedctl index ... --name NEW` or --overwrite)", exit_code=2)
