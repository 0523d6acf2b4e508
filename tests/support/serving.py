"""A real `embedctl serve` in a subprocess on 127.0.0.1 (ephemeral port, read back from --port-file), and
tiny indexes built through the public API, for tests/serve and bench/bench_serve.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from support.lifecycle import COLBERT, corpus_lines, write_tsv

KINDS = {"plaid": [*COLBERT, "index.recluster_below_docs=0"], "dense": ["index.batch_size=16"]}
WRITE_KEY = "write-key-0123456789abcdef"
READ_KEY = "read-key-0123456789abcdef0"
START_S = 120.0


def build_tiny(work: Path, kind: str, n: int = 40) -> Path:
    import embedctl

    coll = write_tsv(work / "corpus.tsv", corpus_lines(n))
    embedctl.Index.build(coll, work / kind, overrides=KINDS[kind])
    return work / kind


class Server:
    """``with Server(index, *overrides) as s: s.client.post("/search", ...)``: started, ready, stopped."""

    def __init__(self, index: Path, *overrides: str, keys: bool = False, env: dict | None = None):
        self.index, self.overrides, self.keys = Path(index), list(overrides), keys
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.client: httpx.Client | None = None
        self.log = self.index.parent / f"serve-{os.getpid()}-{time.monotonic_ns()}.log"

    def start(self, wait_ready: bool = True) -> Server:
        port_file = self.log.with_suffix(".port")
        port_file.unlink(missing_ok=True)
        args = [sys.executable, "-m", "embedctl", "serve", "--index", str(self.index), "--port", "0",
                "--port-file", str(port_file), *self.overrides]
        if self.keys:
            args += [f"serve.api_keys=[{WRITE_KEY}]", f"serve.read_only_keys=[{READ_KEY}]"]
        env = {**os.environ, **(self.env or {})}
        self._log_fh = open(self.log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, stdout=self._log_fh, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + START_S
        while not (port_file.is_file() and port_file.read_text().strip()):
            self._check_alive(deadline)
            time.sleep(0.05)
        self.port = int(port_file.read_text())
        headers = {"authorization": f"Bearer {WRITE_KEY}"} if self.keys else {}
        self.client = httpx.Client(base_url=self.url, headers=headers, timeout=60.0)
        if wait_ready:
            while True:
                self._check_alive(deadline)
                try:
                    if self.client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
        return self

    def _check_alive(self, deadline: float) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"the server exited {self.proc.returncode}:\n{self.output()}")
        if time.monotonic() > deadline:
            self.kill()
            raise AssertionError(f"the server was not ready in {START_S} s:\n{self.output()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.is_file() else ""

    def kill(self) -> None:
        """kill -9: no shutdown, no flush."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self._close()

    def stop(self) -> int:
        """SIGTERM (uvicorn's graceful shutdown); returns the exit code."""
        code = 0
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        self._close()
        return code

    def _close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if getattr(self, "_log_fh", None) is not None:
            self._log_fh.close()
            self._log_fh = None

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
