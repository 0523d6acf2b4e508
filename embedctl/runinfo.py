"""Provenance written beside every output: resolved config, raw overrides, versions."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path
from typing import Any

from embedctl.util import atomic


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


def write_run_info(out_dir: str | Path, loaded: Any, command: str) -> None:
    """Write resolved_config.yaml, overrides.yaml and versions.json into ``out_dir`` (a local folder)."""
    import yaml

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out_dir / "resolved_config.yaml", loaded.to_yaml())
    raw = {
        "command": command,
        "config": loaded.config_path,
        "layers": loaded.files,
        "overrides": loaded.overrides,
        "flags": loaded.flags,
        "argv": sys.argv[1:],
    }
    atomic.write_text(out_dir / "overrides.yaml", yaml.safe_dump(raw, sort_keys=False))
    atomic.write_json(out_dir / "versions.json", versions())
