"""fsspec helpers: one way to open and write local paths and URLs (file://, memory://, s3://, ...)."""

from __future__ import annotations

from typing import Any

from embedctl.errors import InputError
from embedctl.util.atomic import write_bytes


def url_to_fs(url: str, **storage_options: Any):
    """Return (filesystem, path) for a local path or any fsspec URL, with a clear error when unusable."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(url, **storage_options)
    except ImportError as exc:  # e.g. s3:// without s3fs
        raise InputError(
            f"cannot open this URL: {exc}", path=url, hint="install the matching extra, e.g. pip install 'embedctl[s3]'"
        ) from exc
    except ValueError as exc:
        raise InputError(f"not a usable path or URL: {exc}", path=url) from exc


def is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def folder_fs(url: str):
    """``(fs, path)`` when ``url`` is an existing folder (local or fsspec URL), else None (also for bad URLs)."""
    try:
        fs, path = url_to_fs(url)
        return (fs, path.rstrip("/")) if fs.isdir(path) else None
    except InputError:
        return None


def is_local_fs(fs) -> bool:
    """True for fsspec's local filesystem (where a rename is atomic)."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def write_file(fs, path: str, data: bytes) -> None:
    """Write bytes all-or-nothing: temp name + rename on local disks, a single PUT elsewhere."""
    if is_local_fs(fs):
        write_bytes(path, data)
        return
    parent = path.rsplit("/", 1)[0]
    if parent:
        fs.makedirs(parent, exist_ok=True)
    with fs.open(path, "wb") as fh:
        fh.write(data)
