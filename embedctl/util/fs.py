"""fsspec helpers: one way to open and write local paths and URLs (file://, memory://, s3://, ...)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from embedctl.errors import EmbedctlError, InputError
from embedctl.util.atomic import write_bytes
from embedctl.util.lock import WriterLock


def url_to_fs(url: str, **storage_options: Any):
    """Return (filesystem, path) for a local path or any fsspec URL, with a clear error when unusable."""
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(url, **storage_options)
        return (fs, path) if is_local(url) else (NamedFS(fs, url), path)
    except ImportError as exc:  # e.g. s3:// without s3fs
        raise InputError(
            f"cannot open this URL: {exc}", path=url, hint="install the matching extra, e.g. pip install 'embedctl[s3]'"
        ) from exc
    except ValueError as exc:
        raise InputError(f"not a usable path or URL: {exc}", path=url) from exc


class NamedFS:
    """An fsspec filesystem whose failures name the URL: a call that fails for a reason other than a
    missing file (no credentials, endpoint down, access denied: botocore, aiohttp, OSError) raises an
    InputError naming ``url`` and how to fix it (:func:`remote_errors`) instead of the library's own error.
    Everything else is the wrapped filesystem's."""

    def __init__(self, fs, url: str):
        self._fs, self._url = fs, url

    def __getattr__(self, name: str):
        attr = getattr(self._fs, name)
        if not callable(attr) or name.startswith("__"):
            return attr

        def call(*args, **kwargs):
            with remote_errors(self._url):
                return attr(*args, **kwargs)

        return call


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


def local_path(url: str) -> Path | None:
    """The local path of ``url`` (a plain path or file:// URL), absolute and resolved; None for other URLs."""
    if not is_local(url):
        return None
    return Path(os.path.abspath(os.path.expanduser(url.removeprefix("file://")))).resolve()


def writer_lock(url: str, what: str, name_suffix: str = ""):
    """``WriterLock`` on a local output folder (one writer at a time, stale after kill -9); for object-store
    URLs, where no local lock can guard the bucket, a no-op (the commit-time fingerprint check still runs)."""
    path = local_path(url)
    if path is None:
        return contextlib.nullcontext()
    return WriterLock(path.with_name(path.name + name_suffix) if name_suffix else path, what=what)


def refuse_output_in_inputs(output: str, output_flag: str, inputs: dict[str, str | None], *,
                            folder: bool = True) -> None:
    """Fail (exit 2, before any work) when the output is one of the inputs or inside one, or (``folder``)
    an existing file: writing there would overwrite or mix what the command reads."""
    out = local_path(output)
    if out is None:
        return
    for flag, url in inputs.items():
        src = local_path(url) if url else None
        if src is None:
            continue
        if out == src or out.is_relative_to(src) and src.is_dir():
            where = "is" if out == src else "is inside"
            raise EmbedctlError(f"{output_flag} {output} {where} the input {flag} {url}: writing there would overwrite "
                                "or mix what this command reads; nothing was written",
                                hint=f"choose an {output_flag} outside {url}", exit_code=2)
    if folder and out.exists() and not out.is_dir():
        raise EmbedctlError(f"{output_flag} {output} is a file; it must be a folder (new or one this command wrote)",
                            hint=f"choose another {output_flag}", exit_code=2)


def folder_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a folder name under a root the user chose (None when it can): a name is one path
    component, so an index (or anything named from a flag) stays inside its root: no ``/``, no ``..``, not
    absolute, not hidden (``.x``: embedctl's own work folders beside it), no control characters."""
    if not name or name in (".", ".."):
        return f"{name!r} names no folder of its own"
    if "/" in name or "\\" in name or os.path.isabs(name):
        return f"{name!r} is a path, not a folder name: it would put the folder outside its root"
    if name.startswith("."):
        return f"{name!r} starts with '.': such names are embedctl's own work folders"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return f"{name!r} holds a control character"
    return None


def check_output_file(output: str, output_flag: str) -> None:
    """Fail (exit 2) before any work when an output *file* cannot be written: it is a folder, or its
    folder is a file."""
    out = local_path(output)
    if out is None:
        return
    if out.is_dir():
        raise EmbedctlError(f"{output_flag} {output} is a folder; it must name a file",
                            hint=f"e.g. {output_flag} {Path(output) / 'ranking.tsv'}", exit_code=2)
    parent = next((p for p in out.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise EmbedctlError(f"{output_flag} {output}: {parent} is a file, not a folder",
                            hint=f"choose another {output_flag}", exit_code=2)
    if parent is not None and not os.access(parent, os.W_OK):
        raise EmbedctlError(f"{output_flag} {output}: {parent} is not writable", hint=f"choose another {output_flag}",
                            exit_code=2)


@contextlib.contextmanager
def remote_errors(url: str, action: str = "read") -> Iterator[None]:
    """Turn an object store's failure (no credentials, endpoint down, access denied: botocore / aiohttp /
    OSError) into an InputError naming the URL, instead of the library's own message."""
    try:
        yield
    except EmbedctlError:
        raise
    except FileNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 -- which library raises depends on the protocol
        if is_local(url):
            raise
        raise InputError(f"cannot {action} this URL: {remote_reason(exc)}", path=url,
                         hint=REMOTE_HINT) from exc


REMOTE_HINT = ("check the URL, the credentials (e.g. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or ~/.aws) and "
               "the endpoint (AWS_ENDPOINT_URL or FSSPEC_S3_ENDPOINT_URL) are right and reachable")


def remote_reason(exc: BaseException) -> str:
    """A short reason for a remote failure: the exception class and its first line, causes followed."""
    names = []
    seen = exc
    while seen is not None and len(names) < 3:
        text = str(seen).strip().splitlines()[0] if str(seen).strip() else ""
        names.append(f"{type(seen).__name__}{': ' + text[:200] if text else ''}")
        seen = seen.__cause__ or seen.__context__
    lowered = " ".join(names).lower()
    if "credential" in lowered:
        return "no credentials found (" + names[0] + ")"
    if "connect" in lowered or "endpoint" in lowered:
        return "the endpoint cannot be reached (" + names[0] + ")"
    return names[0]
