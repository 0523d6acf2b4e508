"""Reading text inputs row by row, shared by the text readers (data.sources), the label readers
(data.relations) and the qrels reader (util.qrels).

A row that cannot be used becomes a :class:`RowError`; the reader turns it into an InputError naming the
file and line, or (``on_error="skip"``) into a :class:`Skipped` record handed to ``on_skip``.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from embedctl.errors import InputError
from embedctl.util.fs import url_to_fs

COMPRESSIONS = (".gz", ".zst", ".bz2", ".xz")


@dataclass
class Skipped:
    """A row left out under ``on_error="skip"``: where and why."""

    path: str
    line: int | None
    reason: str

    def as_dict(self) -> dict:
        return {"path": self.path, "line": self.line, "reason": self.reason}


OnSkip = Callable[[Skipped], None]


class RowError(Exception):
    """One unusable row: why, and how to fix it when there is more to say than "fix the row"."""

    def __init__(self, reason: str, hint: str | None = None):
        super().__init__(reason)
        self.reason, self.hint = reason, hint


def strip_compression(url: str) -> str:
    """``a/b.jsonl.gz`` -> ``a/b.jsonl``."""
    for ext in COMPRESSIONS:
        if url.endswith(ext):
            return url[: -len(ext)]
    return url


def open_url(url: str, mode: str = "rb", compression: str | None = "infer"):
    """Open a local path or fsspec URL; a missing or unreadable one raises InputError naming it."""
    fs, path = url_to_fs(url)
    try:
        if not fs.exists(path):
            raise InputError("no such file", path=url, hint="check the path or URL (and credentials for s3://)")
        if fs.isdir(path):
            raise InputError("expected a file, found a folder", path=url)
        import fsspec  # here: ~0.07 s to import, and a single-query search reads no file

        fh = fsspec.open(url, mode, compression=compression).open()
        if type(fh).__module__.startswith("zstandard"):  # its reader cannot iterate lines
            fh = io.BufferedReader(fh, buffer_size=1 << 20)
        return fh
    except InputError:
        raise
    except Exception as exc:  # permission, network, bad credentials...
        raise InputError(f"cannot read: {type(exc).__name__}: {exc}", path=url) from exc


def read_lines(url: str) -> Iterator[tuple[int, bytes]]:
    """Yield (1-based line number, raw line without newline)."""
    fh = open_url(url, "rb")
    try:
        for n, raw in enumerate(fh, start=1):
            yield n, raw.rstrip(b"\r\n")
    except (OSError, EOFError) as exc:
        raise InputError(f"cannot read (corrupt or truncated file?): {exc}", path=url) from exc
    finally:
        fh.close()


def split_fields(text: str) -> list[str]:
    """Fields of a line: split on tabs when it has any (ids and texts may hold spaces), else on whitespace."""
    return text.split("\t") if "\t" in text else text.split()


def decode_line(raw: bytes) -> str:
    """UTF-8 text of a raw line; invalid bytes are a RowError saying where in the line."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RowError(
            f"invalid UTF-8 at byte {exc.start} of the line", "re-encode the file as UTF-8 (e.g. iconv -t UTF-8)"
        ) from exc
