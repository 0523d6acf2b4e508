"""Where model weights come from: the bundled alias, a local folder, the local hub cache, or (a cache miss,
online) the Hugging Face hub.

What is downloaded and when: nothing for `minilm` or a folder; a hub id not in the local cache is
downloaded once into that cache, with a note on stderr, unless ``EMBEDCTL_OFFLINE=1`` (or the hub's own
``HF_HUB_OFFLINE=1``) is set: then a cache miss is an error naming the switch.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from embedctl.config.model_files import BUNDLED_ALIASES, bundled_minilm_path
from embedctl.errors import EmbedctlError

__all__ = ["BUNDLED_ALIASES", "bundled_minilm_path", "offline", "resolve_model_path"]

_TRUE = {"1", "true", "yes", "on"}


def offline() -> bool:
    """True when downloads are switched off: EMBEDCTL_OFFLINE=1, or HF_HUB_OFFLINE=1 (the hub's own switch)."""
    return any(os.environ.get(name, "").strip().lower() in _TRUE for name in ("EMBEDCTL_OFFLINE", "HF_HUB_OFFLINE"))


def resolve_model_path(name_or_path: str, *, key: str = "model.name_or_path") -> str:
    """Return a local folder for ``name_or_path``; never downloads silently into a failure.

    `minilm` -> the bundled folder; an existing path -> itself; anything else is treated as a hub id
    that must already be in the local Hugging Face cache (this machine may have no network).
    """
    if name_or_path in BUNDLED_ALIASES:
        return str(bundled_minilm_path())
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise EmbedctlError(
                f"`{key}` = {name_or_path!r}: the folder has no config.json, so it is not a model folder",
                hint="point it at a folder saved by `embedctl train` or `save_pretrained`, or use the alias `minilm`",
            )
        return str(path.resolve())
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        raise EmbedctlError(
            f"`{key}` = {name_or_path!r}: no such folder",
            hint="check the path, or use the bundled alias `minilm`",
        )
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(name_or_path, local_files_only=True)
    except Exception as cached_exc:  # not in the cache: try the hub once (unless offline), then explain
        if offline():
            raise EmbedctlError(
                f"`{key}` = {name_or_path!r}: not a local folder and not in the local Hugging Face cache; not "
                "downloaded because EMBEDCTL_OFFLINE or HF_HUB_OFFLINE is set",
                hint="download it once where the network is reachable (unset EMBEDCTL_OFFLINE/HF_HUB_OFFLINE), copy "
                     "the folder here and pass its path, or use the bundled alias `minilm`",
            ) from cached_exc
        try:
            from huggingface_hub import snapshot_download

            print(f"note: {name_or_path} is not in the local Hugging Face cache: downloading it from the hub "
                  "(EMBEDCTL_OFFLINE=1 never downloads)", file=sys.stderr, flush=True)
            return snapshot_download(name_or_path)
        except Exception as exc:
            raise EmbedctlError(
                f"`{key}` = {name_or_path!r}: not a local folder, not in the local Hugging Face cache, "
                f"and it could not be downloaded ({type(exc).__name__})",
                hint="use the bundled alias `minilm` (all-MiniLM-L6-v2), or a folder holding the model's files",
            ) from cached_exc
