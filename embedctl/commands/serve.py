"""`embedctl serve`: check the index and the settings now (a clear error, exit 2), then serve until stopped."""

from __future__ import annotations

import ipaddress
from typing import Any

from embedctl.api import Index, resolve_config
from embedctl.serve.run import run_server
from embedctl.util.console import stderr_console


def run(loaded: Any) -> None:
    cfg = loaded.cfg
    path = cfg.serve.index or cfg.search.index
    loaded = resolve_config(loaded, flags={"search.index": path} if path else None)
    index = Index.open(config=loaded)  # a missing or foreign folder fails here, with its fix, before listening
    if not (cfg.serve.api_keys or cfg.serve.read_only_keys) and not _loopback(cfg.serve.host):
        stderr_console().print(
            f"warning: serve.host={cfg.serve.host} answers other machines and no serve.api_keys are set: anyone "
            "who reaches this port can search and change the index; set serve.api_keys (docs/serving.md)",
            markup=False)
    run_server(loaded, index.path)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
