"""Provenance written beside every output: resolved config, raw overrides, versions.

The one run-info writer of every command (pretokenize, prebatch, train, index): a local folder gets each
file under a temporary name then renamed; an fsspec URL (s3://, memory://) one PUT per file.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from embedctl.util.atomic import json_bytes
from embedctl.util.fs import url_to_fs, write_file


def versions() -> dict[str, Any]:
    out: dict[str, Any] = {"python": sys.version.split()[0]}
    for dist in ("embedctl", "torch", "transformers", "deepspeed", "tokenizers", "faiss-cpu", "pyarrow"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    out["git_commit"] = git_commit()
    return out


def git_commit() -> str | None:
    root = Path(__file__).resolve().parents[1]
    try:
        res = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None


def run_info(loaded: Any, command: str) -> dict[str, bytes]:
    """The content of the three run-info files, by file name."""
    raw = {
        "command": command,
        "config": loaded.config_path,
        "layers": loaded.files,
        "overrides": loaded.overrides,
        "flags": loaded.flags,
        "argv": sys.argv[1:],
    }
    return {
        "resolved_config.yaml": loaded.to_yaml().encode("utf-8"),
        "overrides.yaml": yaml.safe_dump(raw, sort_keys=False).encode("utf-8"),
        "versions.json": json_bytes(versions()),
    }


def write_run_info(out: str | Path, loaded: Any, command: str) -> None:
    """Write resolved_config.yaml, overrides.yaml and versions.json into ``out`` (a local folder or fsspec URL)."""
    fs, path = url_to_fs(str(out))
    for name, data in run_info(loaded, command).items():
        write_file(fs, f"{path.rstrip('/')}/{name}", data)
