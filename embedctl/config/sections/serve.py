"""`embedctl serve`: the HTTP search service (embedctl.serve; docs/serving.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from embedctl.config.fields import at_least, between, default_list


@dataclass
class ServeConfig:
    """`embedctl serve`: an HTTP search service over one index, with live writes, keys, limits and metrics."""

    index: Optional[str] = None
    """Index folder to serve; default: `search.index`, else the index `embedctl search` would find."""
    host: str = "127.0.0.1"
    """Address to listen on; the default answers only this machine (0.0.0.0: every interface, put keys on)."""
    port: int = between(0, 65535, 8000)
    """TCP port; 0 picks a free one (printed as `listening on http://HOST:PORT` and written to `port_file`)."""
    port_file: Optional[str] = None
    """A file to write the bound port to once the server listens (tests and supervisors)."""
    api_keys: list[str] = default_list()
    """Bearer keys that may read and write; empty with `read_only_keys` empty: no key needed."""
    read_only_keys: list[str] = default_list()
    """Bearer keys that may search and read but not write (a write answers 403)."""
    max_body_bytes: int = between(1024, 1 << 30, 8 << 20)
    """Largest request body accepted; a larger one answers 413 naming this key."""
    max_batch: int = between(1, 100_000, 256)
    """Most queries in one /search request, and most documents or ids in one write request (422 beyond)."""
    max_k: int = between(1, 100_000, 1000)
    """Largest `k` a /search request may ask for (422 beyond)."""
    max_query_chars: int = between(1, 1_000_000, 4096)
    """Longest query text accepted, in characters (422 beyond)."""
    max_doc_chars: int = between(1, 100_000_000, 1_000_000)
    """Longest document text accepted by POST /documents, in characters (422 beyond)."""
    batch_window_ms: float = between(0, 1000, 2.0)
    """How long the first search of a micro-batch waits for others to join it (0: only those already queued)."""
    batch_window_max_ms: float = between(0, 1000, 0.0)
    """Longest wait of a micro-batch's first search while fewer requests have joined than the previous batch
    held (steady load from many clients); at or below `batch_window_ms` (the default 0): never waits past that.
    Not yet shown to help (bench/bench_serve.py --window-ab-ms, on a quiet host)."""
    search_workers: int = between(0, 1024, 0)
    """Threads ranking micro-batches side by side, each with `search.threads` CPU threads (unset: cores divided
    by workers); 0: one per core. Batches side by side keep their speed while a writer encodes beside them
    (embedctl.serve.batcher has the figures)."""
    batch_max_queries: int = between(1, 4096, 64)
    """Most queries encoded and ranked together in one micro-batch."""
    search_queue: int = between(1, 1_000_000, 1000)
    """Most search requests waiting for the encoder; beyond it a search answers 503 with `Retry-After` (try again)."""
    write_window_ms: float = between(0, 10_000, 20.0)
    """How long the first write of a group waits for others to join its commit (0: only those already queued)."""
    write_group_docs: int = between(1, 1_000_000, 1000)
    """Most documents (or ids) grouped into one commit."""
    write_queue: int = between(1, 1_000_000, 1000)
    """Most write requests waiting for the writer; beyond it a write answers 503 (try again)."""
    writer_threads: int = between(0, 1024, 1)
    """CPU threads the writer encodes added documents with (0: as many as the searches use). One leaves the
    other cores to the searches while documents are added (bench/bench_serve.py, reads during writes)."""
    lock_wait_s: float = at_least(0, 30.0)
    """How long a commit waits for the index's writer lock held by another process (`embedctl index add`)."""
    refresh_s: float = between(0.01, 3600, 0.5)
    """How often the server looks for a version committed by another process (and opens it)."""
    access_log: bool = False
    """Log every request (uvicorn's access log) on stderr."""

    def problems(self) -> list[tuple[str, str]]:
        out = []
        both = sorted(set(self.api_keys) & set(self.read_only_keys))
        if both:
            out.append(("read_only_keys", f"{len(both)} key(s) are also in serve.api_keys; list each key once"))
        for key, keys in (("api_keys", self.api_keys), ("read_only_keys", self.read_only_keys)):
            if any(len(str(k)) < 16 for k in keys):
                out.append((key, "every key must be at least 16 characters (e.g. `python -c 'import secrets; "
                                 "print(secrets.token_urlsafe(24))'`)"))
        return out
