"""The identity of a model folder's weights: a sha256 over every weight and config file, cached per file.

An index records it when built (``model.weights`` of embedctl_index.json); `embedctl index add` refuses a
model whose identity differs and `embedctl search` warns. Every byte counts: a checkpoint changed in
part, keeping its size, is another model. Hashing the bundled MiniLM (~90 MB) costs ~0.1 s at sha256's
~1.6 GB/s, so each file's sha256 is cached in ``$EMBEDCTL_CACHE_DIR/weights-sha256.json`` (default
``~/.cache/embedctl``), keyed by its resolved path, size, mtime_ns, ctime_ns and inode: any write to the
file changes its ctime (which no user call can set back), so a changed file is always hashed again. An
unwritable cache is skipped (every open hashes).

Identities are ``sha256:<hex>``; an index built before them records the older signature (names, sizes and
the first/last 64 KiB of each file), which :func:`weights_match` still compares the old way.

Example::

    ident = weights_identity("models/my-colbert")        # "sha256:5f0c..."
    weights_match(ident, "models/my-colbert")             # True
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from embedctl.errors import EmbedctlError
from embedctl.util.atomic import write_json
from embedctl.util.io import read_json

PREFIX = "sha256:"
SUFFIXES = (".safetensors", ".bin", ".pt", ".json")
CACHE_FILE = "weights-sha256.json"
CACHE_LIMIT = 4096  # entries kept (the newest written); a cache, not a record


def weight_files(model_dir: str | Path) -> list[Path]:
    """The files that make a model what it is (weights, configs, tokenizer JSON), sorted."""
    folder = Path(model_dir)
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in SUFFIXES)


def cache_path() -> Path:
    return Path(os.environ.get("EMBEDCTL_CACHE_DIR") or Path.home() / ".cache" / "embedctl") / CACHE_FILE


def _key(path: Path) -> tuple[str, str]:
    st = path.stat()
    return str(path.resolve()), f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_cache() -> dict:
    try:
        obj = read_json(cache_path(), what="weights cache")
        return obj if isinstance(obj, dict) else {}
    except (FileNotFoundError, EmbedctlError, OSError):
        return {}


def file_hashes(files: list[Path], use_cache: bool = True) -> dict[Path, str]:
    """sha256 of each file, from the cache where its key still matches."""
    cache = _read_cache() if use_cache else {}
    out, changed = {}, False
    for path in files:
        name, stamp = _key(path)
        hit = cache.get(name)
        if isinstance(hit, dict) and hit.get("stamp") == stamp and isinstance(hit.get("sha256"), str):
            out[path] = hit["sha256"]
            continue
        out[path] = _sha256(path)
        if _key(path)[1] == stamp:  # unchanged while we read it: safe to remember
            cache.pop(name, None)
            cache[name] = {"stamp": stamp, "sha256": out[path]}
            changed = True
    if use_cache and changed:
        keep = dict(list(cache.items())[-CACHE_LIMIT:])
        try:
            write_json(cache_path(), keep)
        except OSError:
            pass  # an unwritable cache only costs the hashing next time
    return out


def weights_identity(model_dir: str | Path, use_cache: bool = True) -> str:
    """``sha256:<hex>`` over the relative name, size and sha256 of every file of :func:`weight_files`."""
    folder = Path(model_dir)
    files = weight_files(folder)
    hashes = file_hashes(files, use_cache=use_cache)
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.relative_to(folder).as_posix()}:{path.stat().st_size}:{hashes[path]}\n".encode())
    return PREFIX + digest.hexdigest()


def legacy_signature(model_dir: str | Path) -> str:
    """The signature indexes recorded before :func:`weights_identity`: names, sizes and the first/last
    64 KiB of each file (misses a change in the middle of a file; only compared, never written now)."""
    digest = hashlib.sha256()
    folder = Path(model_dir)
    for path in weight_files(folder):
        size = path.stat().st_size
        digest.update(f"{path.relative_to(folder)}:{size}".encode())
        with open(path, "rb") as fh:
            digest.update(fh.read(65536))
            if size > 65536:
                fh.seek(max(size - 65536, 65536))
                digest.update(fh.read(65536))
    return digest.hexdigest()[:32]


def weights_match(recorded: str, model_dir: str | Path) -> bool:
    """Whether the weights in ``model_dir`` are those ``recorded`` (an identity, or an older signature)."""
    if recorded.startswith(PREFIX):
        return weights_identity(model_dir) == recorded
    return legacy_signature(model_dir) == recorded
