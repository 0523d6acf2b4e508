"""Write to a temporary name, then rename: a crash never leaves a file that looks complete.

:func:`write_json` is embedctl's one JSON file writer (also named by :mod:`embedctl.util.io`, the JSON/.npy
IO module; it lives here, the lowest module, so everything can use it without an import cycle). A JSON file
on an fsspec URL gets the same bytes (:func:`json_bytes`) through :func:`embedctl.util.fs.write_file`
(temp name + rename on local disks, one PUT on object stores, which have no rename).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is fsynced and renamed onto ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; the file gets what open() would give it
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def current_umask() -> int:
    """The process's umask, read without changing it where Linux tells (/proc), else set and restored."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def finite(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float replaced by None: JSON has no NaN (Python's ``NaN`` token
    is refused by strict parsers, jq and JavaScript), so a figure that is not a number is written as null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def json_text(obj: Any, **kwargs: Any) -> str:
    """json.dumps of :func:`finite` ``obj``, strict (never NaN / Infinity): every JSON embedctl prints or writes."""
    return json.dumps(finite(obj), allow_nan=False, **kwargs)


def json_bytes(obj: Any, *, indent: int | None = 2) -> bytes:
    """The bytes of every JSON file embedctl writes: sorted keys (the same object always gives the same
    bytes), UTF-8, a final newline, no NaN (:func:`json_text`)."""
    return (json_text(obj, indent=indent, sort_keys=True) + "\n").encode("utf-8")


def write_json(path: str | os.PathLike, obj: Any, *, indent: int | None = 2) -> None:
    """Atomically write ``obj`` as JSON (:func:`json_bytes`): temporary name, fsync, rename."""
    write_bytes(path, json_bytes(obj, indent=indent))
