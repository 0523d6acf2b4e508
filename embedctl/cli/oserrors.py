"""The environment failing under a command: a full disk, a read-only or forbidden folder, a missing path,
a closed pipe. One message naming the path and the fix instead of a raw OSError (or the RuntimeError /
SafetensorError that torch and safetensors wrap it in), and a quiet exit when the reader of stdout has gone
(``embedctl search ... | head -1``), as any Unix tool does."""

from __future__ import annotations

import errno
import os
import re
import sys

from embedctl.errors import EmbedctlError
from embedctl.util.console import PIPE_EXIT

_FIXES = {
    errno.ENOSPC: ("no space left on the device", "free space there (df -h shows it), or write to another disk"),
    errno.EDQUOT: ("the disk quota is exceeded", "free space within the quota, or write to another disk"),
    errno.EFBIG: ("the file grew beyond what the file system (or the process's file size limit) allows",
                  "write to another disk, or raise the limit (ulimit -f)"),
    errno.EROFS: ("the file system is read-only", "choose an output on a writable disk"),
    errno.EACCES: ("permission denied", "choose a folder you can write (or read), or fix its permissions"),
    errno.EPERM: ("operation not permitted", "choose a folder you can write, or fix its permissions"),
    errno.ENOENT: ("no such file or folder", "check the path (its parent folder must exist), or create it first"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "choose another path"),
    errno.EEXIST: ("a file of that name is in the way of a folder", "choose another path, or move that file"),
    errno.EISDIR: ("it is a folder where a file was expected", "name a file"),
    errno.EMFILE: ("too many open files", "raise the limit (ulimit -n)"),
}
# the text torch / safetensors / pyarrow put in errors that wrap an OSError
_TEXT = ((re.compile(r"no space left|os error 28|ENOSPC", re.I), errno.ENOSPC),
         (re.compile(r"read-only file system|os error 30|EROFS", re.I), errno.EROFS),
         (re.compile(r"file too large|os error 27", re.I), errno.EFBIG),
         (re.compile(r"permission denied|os error 13", re.I), errno.EACCES),
         (re.compile(r"disk quota", re.I), errno.EDQUOT))


def is_broken_pipe(err: BaseException) -> bool:
    return any(isinstance(e, BrokenPipeError) or getattr(e, "errno", None) == errno.EPIPE for e in _chain(err))


def quiet_pipe_exit() -> None:
    """The reader of stdout is gone: point stdout at /dev/null (so the interpreter's last flush cannot fail
    again with "Exception ignored ... BrokenPipeError") and exit 141 with no message."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    raise SystemExit(PIPE_EXIT)


def environment_error(err: BaseException, output: str | None = None) -> EmbedctlError | None:
    """An EmbedctlError naming the path, the cause and the fix when ``err`` (or what it wraps) is a failure
    of the environment rather than of embedctl; None otherwise. ``output``: what the command writes, named
    when the error carries no path (a write() on a full disk has none)."""
    code, path = None, None
    for e in _chain(err):
        if isinstance(e, OSError) and e.errno in _FIXES:
            code, path = e.errno, e.filename
            break
    if code is None:
        text = " ".join(str(e) for e in _chain(err))
        code = next((c for pattern, c in _TEXT if pattern.search(text)), None)
        if code is None:
            return None
        path = _path_in(text)
    what, fix = _FIXES[code]
    if path:  # a temporary name (util.atomic: `.NAME.XXXX.tmp` beside NAME) is shown as the file it becomes
        path = re.sub(r"/\.([^/]+)\.[^./]+\.tmp$", r"/\1", str(path))
    # no path and no output file of its own: what failed is stdout (`embedctl config show > /dev/full`, a
    # redirect onto a full disk), where nothing resumes
    stdout = not path and not output
    where = f"{path}: " if path else f"writing {output}: " if output else "writing standard output: "
    partial = _partial_note(err) if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) and not stdout else ""
    if stdout:
        fix = f"{fix} (stdout was redirected there: `> FILE` or a pipe's reader)"
    return EmbedctlError(f"{where}{what}.{partial}", hint=fix)


def _partial_note(err: BaseException) -> str:
    """What a stopped command kept and why: a build names its folder and size (resumed by the same command,
    or removed to give the space back); otherwise the general rule."""
    folder = next((e.partial_output for e in _chain(err) if getattr(e, "partial_output", None)), None)
    if folder is None or not os.path.isdir(folder):
        return (" What was written so far stays and the same command resumes from it once there is room (an "
                "index: its .NAME.building folder; training: its last checkpoint, train.resume=auto)")
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files
               if os.path.isfile(os.path.join(d, f)))
    return (f" What was written so far stays in {folder} ({size / 2**20:.1f} MiB): the same command resumes from "
            f"it once there is room, or remove that folder (rm -r) to give the space back")


def _chain(err: BaseException):
    seen: set[int] = set()
    stack = [err]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        stack += [e.__cause__, e.__context__]


def _path_in(text: str) -> str | None:
    """A path quoted in a wrapped error's text (torch: ``file <path>``, pyarrow: ``'path'``), if any."""
    match = re.search(r"['\"](/[^'\"]+)['\"]", text) or re.search(r"\bfile (/\S+)", text)
    return match.group(1) if match else None
