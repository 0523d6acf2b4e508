"""`embedctl serve`: check the index and the settings now (a clear error, exit 2), then serve until stopped."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from embedctl.api import Index, resolve_config
from embedctl.errors import EmbedctlError
from embedctl.serve.run import run_server
from embedctl.util.console import stderr_console
from embedctl.util.fs import check_output_file


def run(loaded: Any) -> None:
    cfg = loaded.cfg
    path = cfg.serve.index or cfg.search.index
    if cfg.serve.port_file:
        check_port_file(cfg.serve.port_file)
    loaded = resolve_config(loaded, flags={"search.index": path} if path else None)
    index = Index.open(config=loaded)  # a missing or foreign folder fails here, with its fix, before listening
    if not (cfg.serve.api_keys or cfg.serve.read_only_keys) and not _loopback(cfg.serve.host):
        stderr_console().print(
            f"warning: serve.host={cfg.serve.host} answers other machines and no serve.api_keys are set: anyone "
            "who reaches this port can search and change the index; set serve.api_keys (docs/serving.md)",
            markup=False)
    run_server(loaded, index.path)


def check_port_file(port_file: str) -> None:
    """Before loading anything: the port file can be written, and what is there already is a port file (an
    earlier server's number), never a user's file named by a slip (a corpus would be replaced by a number)."""
    check_output_file(port_file, "--port-file")
    target = Path(port_file)
    if target.is_file() and target.stat().st_size > 0:
        with target.open("rb") as fh:
            head = fh.read(16)
        if not head.strip().isdigit():
            raise EmbedctlError(f"--port-file {port_file} exists and is not a port file (it holds more than a port "
                                "number); it is left as it is", hint="name a new file with --port-file "
                                "(serve.port_file), or move that file away first", exit_code=2)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
