"""Bind the socket, say where, and run uvicorn until SIGINT/SIGTERM (writes queued by then are committed)."""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path
from typing import Any

from embedctl.errors import EmbedctlError
from embedctl.util.atomic import write_text


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one); a clear error when it is taken."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as err:
        raise EmbedctlError(f"cannot listen on {host}:{port}: {err.strerror or err}",
                            hint="pick another port with --port (0: any free one) or stop what uses it",
                            exit_code=2) from None
    sock.set_inheritable(True)
    return sock


def run_server(loaded: Any, path: Path) -> None:
    import uvicorn

    from embedctl.serve.app import create_app

    cfg = loaded.cfg.serve
    log = logging.getLogger("embedctl.serve")  # only ours: the libraries' INFO lines (faiss's loader) stay quiet
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    app = create_app(loaded, path)
    sock = bind(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"listening on http://{shown}:{port} (index {path})", file=sys.stderr, flush=True)
    if cfg.port_file:
        write_text(cfg.port_file, f"{port}\n")
    config = uvicorn.Config(app, log_level="info" if cfg.access_log else "warning", access_log=cfg.access_log,
                            timeout_graceful_shutdown=30, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
