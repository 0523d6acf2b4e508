"""The one place that reads and writes JSON and .npy files (atomic writes, no pickles, errors that name the file).

Every writer goes through :mod:`embedctl.util.atomic` (temp name, fsync, rename), so a crash never leaves a
file that looks complete; ``write_json`` here is :func:`embedctl.util.atomic.write_json`, the one JSON writer. Readers raise :class:`~embedctl.errors.EmbedctlError` naming the file and saying
what to do, never a raw ``json.JSONDecodeError`` or numpy's "allow_pickle" message.

Example::

    write_json(out / "ledger.json", {"stage": "codec"})
    read_json(out / "ledger.json", what="build ledger")       # {"stage": "codec"}
    save_npy(out / "codes.npy", codes); load_npy(out / "codes.npy")   # memory-mapped, read-only
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError
from embedctl.util import atomic
from embedctl.util.atomic import write_json

__all__ = ["REBUILD_HINT", "check_files", "check_records_content", "damaged_json", "file_record", "load_npy", "read_json",
           "save_npy", "write_json"]

REBUILD_HINT = "the file is damaged or was written by something else: rebuild it (rerun the command with --overwrite)"


def read_json(path: str | os.PathLike, what: str = "file", hint: str = REBUILD_HINT) -> Any:
    """Parse a JSON file; a missing file raises FileNotFoundError (callers decide what absence means),
    an unreadable or malformed one an EmbedctlError naming it."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EmbedctlError(f"{path}: unreadable {what} ({exc})", hint=hint) from exc


def damaged_json(path: str | os.PathLike) -> str | None:
    """`PATH is damaged or incomplete (not valid JSON: ...)` for a file that does not parse as JSON; None when it
    does, or is absent or unreadable (a refusal then names the damaged file, not only its folder)."""
    path = Path(path)
    try:
        if path.is_file():
            json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        return f"{path} is damaged or incomplete (not valid JSON: {exc})"
    except OSError:
        pass
    return None


def save_npy(path: str | os.PathLike, arr: np.ndarray) -> None:
    """Atomically write one array as .npy (no pickles)."""
    with atomic.atomic_path(path) as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, np.asarray(arr), allow_pickle=False)


def load_npy(path: str | os.PathLike, mmap: bool = True, what: str = "array file",
             hint: str = REBUILD_HINT) -> np.ndarray:
    """np.load without pickles, memory-mapped (read-only) by default; every failure names the file."""
    path = Path(path)
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError as exc:
        raise EmbedctlError(f"{path}: missing {what}", hint=hint) from exc
    except (OSError, ValueError, EOFError) as exc:  # truncated, not .npy, object (pickled) arrays
        raise EmbedctlError(f"{path}: {_npy_problem(path, exc)}: not a readable {what}", hint=hint) from exc


def _npy_problem(path: Path, exc: BaseException) -> str:
    """What is wrong with a .npy file, in words (numpy's own messages suggest unsafe loading, or say nothing
    of the file)."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(6)
    except OSError:
        magic = b""
    text = str(exc)
    if magic != b"\x93NUMPY":
        return "not a .npy file (no numpy header: damaged or replaced)"
    if "pickle" in text or "Python objects" in text or "object" in text:
        return "it holds Python objects (pickled data), which embedctl never loads"
    if "mmap length" in text or "Failed to read all data" in text or isinstance(exc, EOFError):
        return "truncated (shorter than its header says)"
    return f"damaged ({type(exc).__name__}: {text})"


def file_record(path: str | os.PathLike) -> dict[str, Any]:
    """``{"bytes": size, "sha256": hex}`` of a file, read in 1 MiB blocks: what a ledger or a metadata file
    records for each array it lists, so a reader can check the size cheaply and the content on demand."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return {"bytes": Path(path).stat().st_size, "sha256": digest.hexdigest()}


def check_files(folder: str | os.PathLike, records: dict[str, dict[str, Any]], full: bool = False) -> list[str]:
    """Problems with the files ``records`` lists (name relative to ``folder`` -> ``file_record``): missing,
    another size, and with ``full`` another sha256. Empty when all is well."""
    problems = []
    for name, want in sorted(records.items()):
        path = Path(folder) / name
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.stat().st_size != want["bytes"]:
            problems.append(f"{path}: {path.stat().st_size} bytes, recorded {want['bytes']}")
        elif full and file_record(path)["sha256"] != want["sha256"]:
            problems.append(f"{path}: content differs from the recorded sha256 (damaged or replaced)")
    return problems


def check_records_content(folder: str | os.PathLike, records: dict[str, dict[str, Any]], what: str,
                          hint: str = REBUILD_HINT) -> None:
    """Raise an EmbedctlError naming every file ``records`` lists that is missing, of another size or of
    another sha256 (each read in full): the check a reader runs on open, with the same records, so a file
    has one checksum, the one `--verify` also reads. sha256 runs at ~1.6 GB/s here (SHA-NI; crc32 3.6 GB/s,
    blake2b 0.8 GB/s, bench/bench_read_checks.py), a small part of what the readers do with the bytes.

    A file this process already read against the same sha256, and that is still the same file (see
    :func:`_unchanged_key`), is not read again: a server opens every new version of an index, and each
    version lists all the (immutable) files of the versions before it."""
    with_sha = {k: v for k, v in records.items() if v.get("sha256")}
    keys = {name: _unchanged_key(Path(folder) / name, want["sha256"]) for name, want in with_sha.items()}
    unseen = {name: want for name, want in with_sha.items() if keys[name] is None or keys[name] not in _VERIFIED}
    problems = check_files(folder, unseen, full=True)
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise EmbedctlError(f"{what} is damaged: " + "; ".join(problems[:3]) + more, hint=hint)
    if len(_VERIFIED) >= _VERIFIED_MAX:
        _VERIFIED.clear()
    _VERIFIED.update(keys[name] for name in unseen if keys[name] is not None)


# (path, device, inode, size, mtime, ctime, sha256) of the files check_records_content read in full and found
# as recorded. Any write to a file changes its mtime and ctime (and a rename its inode); ctime cannot be set
# back from user space. Bounded: cleared when it grows past _VERIFIED_MAX entries.
_VERIFIED: set[tuple] = set()
_VERIFIED_MAX = 100_000
RACY_S = 2.0  # a file changed this recently may change again within one timestamp tick: always read it


def _unchanged_key(path: Path, sha256: str) -> tuple | None:
    """What identifies ``path``'s content as verified, or None when it cannot be trusted to stay so: missing,
    or modified less than RACY_S seconds ago (file timestamps advance in ticks of a few milliseconds, so a
    same-size rewrite within one tick would keep them: git's "racily clean" rule)."""
    try:
        st = path.stat()
    except OSError:
        return None
    if time.time() - max(st.st_mtime, st.st_ctime) < RACY_S:
        return None
    return (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, sha256)
