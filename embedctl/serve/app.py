"""The endpoints of `embedctl serve` (FastAPI): search, add, delete, info, health, readiness, metrics.

Errors answer ``{"error", "fix", "field", "request_id"}``: the message and the fix of the
:class:`embedctl.errors.EmbedctlError` the library raises (the CLI prints the same two lines), 422 for
a bad request (a limit named by its ``serve.*`` key), 503 (with ``Retry-After``) while the index opens or
when it could not be opened, when the search queue (``serve.search_queue``) or the writer's queue
(``serve.write_queue``) is full, or when another process holds the writer lock past ``serve.lock_wait_s``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from embedctl import __version__
from embedctl.api import Index, resolve_config
from embedctl.errors import EmbedctlError, InputError, NotImplementedYet
from embedctl.index.update import read_records
from embedctl.serve.batcher import QueueFull, SearchBatcher
from embedctl.serve.guard import Guard, Keys, error_body
from embedctl.serve.metrics import Metrics
from embedctl.serve.models import AddRequest, DeleteRequest, SearchRequest, SearchResponse, WriteResponse
from embedctl.serve.versions import Snapshot, Versions
from embedctl.serve.writer import Writer
from embedctl.util.failpoints import fault

log = logging.getLogger("embedctl.serve")


class Unavailable(EmbedctlError):
    """The service cannot answer now (index still opening, a queue full): 503, try again."""


class LimitError(InputError):
    """A request over a ``serve.*`` limit (422, or 413 for the body), naming the field and the key."""

    def __init__(self, field: str, message: str, hint: str):
        self.field = field
        super().__init__(message, hint=hint)


def _status(err: EmbedctlError) -> int:
    if isinstance(err, Unavailable) or err.message.startswith("another writer holds"):
        return 503
    if isinstance(err, NotImplementedYet):
        return 501
    return 422


class Service:
    """What the endpoints share: the versions read, the search batcher, the writer, the metrics."""

    def __init__(self, loaded: Any, path: Path):
        cores = os.cpu_count() or 1
        workers = loaded.cfg.serve.search_workers or cores
        threads = loaded.cfg.search.threads or max(1, cores // workers)
        # each worker ranks its batch with `threads` threads: the encoder's and the PLAID retriever's alike
        loaded = resolve_config(loaded, flags={"search.threads": threads})
        self.loaded, self.path, self.cfg = loaded, Path(path), loaded.cfg.serve
        self.started = time.time()
        self.batcher = SearchBatcher(self.cfg.batch_window_ms, self.cfg.batch_max_queries,
                                     max_queue=self.cfg.search_queue, window_max_ms=self.cfg.batch_window_max_ms,
                                     workers=workers, threads=threads)
        self.writer: Writer | None = None
        self.metrics = Metrics(self.batcher.depth, lambda: self.writer.depth() if self.writer else 0)
        self.batcher._observe = self.metrics.search_batch.observe
        self.versions = Versions(self.path, loaded, self.cfg.refresh_s,
                                 on_swap=lambda s: self.metrics.observe_version(s.version, s.documents))
        self.ready = threading.Event()

    def start(self) -> None:
        """Open the index (model, arrays) and the writer; in a thread, so /healthz answers meanwhile."""
        self.versions.open_first()
        if self.versions.current is None:
            return
        try:
            # the commits wait serve.lock_wait_s for a writer of another process (index.lock_wait_s is the CLI's)
            writer_index = Index(self.path, resolve_config(self.loaded, flags={"index.lock_wait_s": self.cfg.lock_wait_s}))
            writer_index.session.encoder  # noqa: B018 - the writer's own copy (see embedctl.serve.writer)
            self.writer = Writer(writer_index, self.cfg.write_window_ms, self.cfg.write_group_docs,
                                 self.cfg.write_queue, after_commit=lambda v: self.versions.advance(at_least=v),
                                 observe=self.metrics.observe_commit, threads=self.cfg.writer_threads)
        except Exception as err:
            self.versions.error = f"the writer could not start: {err}"
            log.exception("the writer could not start")
            return
        self.ready.set()
        log.info("ready: %s version %s, %s documents", self.path, self.versions.current.version,
                 self.versions.current.documents)

    def stop(self) -> None:
        if self.writer is not None:
            self.writer.stop()
        self.batcher.stop()
        self.versions.stop()

    def snapshot(self) -> Snapshot:
        snap = self.versions.current
        if snap is None or not self.ready.is_set():
            raise Unavailable(self.versions.error or "the index is still opening",
                              hint="wait until GET /readyz answers 200" if not self.versions.error else
                              "fix the index named in the error and restart the server")
        return snap

    # -- limits -----------------------------------------------------------------------------------------
    def search_texts(self, body: SearchRequest) -> list[str]:
        if (body.query is None) == (body.queries is None):
            raise LimitError("queries", "give either `query` (one text) or `queries` (a list), not both or neither",
                             'e.g. {"query": "what causes scurvy?", "k": 10}')
        texts = [body.query] if body.query is not None else list(body.queries)
        if not texts:
            raise LimitError("queries", "`queries` is empty", "give at least one query")
        self._count("queries", len(texts), "queries")
        if body.k > self.cfg.max_k:
            raise LimitError("k", f"`k` = {body.k} is over serve.max_k = {self.cfg.max_k}",
                             f"ask for at most {self.cfg.max_k} hits, or raise serve.max_k")
        for i, text in enumerate(texts):
            if len(text) > self.cfg.max_query_chars:
                raise LimitError("queries" if body.queries is not None else "query",
                                 f"query {i} has {len(text)} characters, over serve.max_query_chars = "
                                 f"{self.cfg.max_query_chars}",
                                 "shorten the query (the model reads only its first tokens), or raise "
                                 "serve.max_query_chars")
        return texts

    def _count(self, field: str, n: int, what: str) -> None:
        if n > self.cfg.max_batch:
            raise LimitError(field, f"{n} {what} in one request, over serve.max_batch = {self.cfg.max_batch}",
                             f"send at most {self.cfg.max_batch} per request, or raise serve.max_batch")

    def documents(self, body: AddRequest) -> list[dict[str, Any]]:
        if not body.documents:
            raise LimitError("documents", "no documents to add", "give at least one document")
        self._count("documents", len(body.documents), "documents")
        for i, doc in enumerate(body.documents):
            if len(doc.text) > self.cfg.max_doc_chars:
                raise LimitError("documents", f"document {doc.id!r} (item {i + 1}) has {len(doc.text)} characters, "
                                 f"over serve.max_doc_chars = {self.cfg.max_doc_chars}",
                                 "split the document, or raise serve.max_doc_chars")
        docs = []
        for i, doc in enumerate(body.documents):
            row = doc.model_dump(exclude_none=True, exclude={"fields"})
            reserved = sorted(set(doc.fields or {}) & {"_id", "id", "text", "title"})
            if reserved:
                raise LimitError("documents", f"document {doc.id!r} (item {i + 1}) has fields named "
                                 f"{', '.join(reserved)}: those names are the document's own",
                                 "rename those fields (e.g. `doc_title`)")
            docs.append({**row, **(doc.fields or {})})  # extra keys are fields (embedctl.index.update.read_records)
        read_records(docs)  # the library's own checks (duplicate ids, empty texts), with its messages
        return docs

    def ids(self, body: DeleteRequest) -> list[str]:
        if not body.ids:
            raise LimitError("ids", "no ids to delete", "give at least one id")
        self._count("ids", len(body.ids), "ids")
        return list(body.ids)

    async def write(self, kind: str, items: list[Any]) -> dict[str, Any]:
        self.snapshot()  # 503 while opening
        if self.writer is None:
            raise Unavailable("the writer is not running", hint="see the server log")
        try:
            future = self.writer.submit(kind, items)
        except QueueFull:
            raise Unavailable(f"{self.writer.depth()} writes are waiting, serve.write_queue = "
                              f"{self.cfg.write_queue}", hint="retry after a moment, or raise serve.write_queue") from None
        return await asyncio.wrap_future(future)


def create_app(loaded: Any, path: Path) -> FastAPI:
    """The ASGI app serving the index at ``path`` with the ``serve.*`` settings of ``loaded``."""
    service = Service(loaded, path)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        opener = threading.Thread(target=service.start, name="embedctl-serve-open", daemon=True)
        opener.start()
        yield
        await asyncio.get_running_loop().run_in_executor(None, service.stop)

    app = FastAPI(title="embedctl", version=__version__, lifespan=lifespan,
                  description="Search and change an embedctl index (docs/serving.md).")
    app.state.service = service
    _routes(app, service)
    _errors(app)
    cfg = loaded.cfg.serve
    app.add_middleware(Guard, keys=Keys(cfg.api_keys, cfg.read_only_keys), max_body_bytes=cfg.max_body_bytes,
                       metrics=service.metrics)
    return app


def _routes(app: FastAPI, service: Service) -> None:
    @app.post("/search", response_model=SearchResponse)
    async def search(body: SearchRequest) -> Any:
        """Rank one query (`query`) or several (`queries`): one list of hits per query, best first."""
        texts = service.search_texts(body)
        fault("serve:search")
        snap = service.snapshot()
        try:
            future = service.batcher.submit(snap, texts, body.k, body.text, body.filter, body.mode)
        except QueueFull:
            raise Unavailable(f"{service.batcher.depth()} searches are waiting, serve.search_queue = "
                              f"{service.cfg.search_queue}", hint="retry after a moment, or raise serve.search_queue"
                              ) from None
        results = await asyncio.wrap_future(future)
        rows = [[{"id": h.id, "score": h.score, "text": h.text, "title": h.title, "fields": h.fields or None,
                  **({} if h.passage is None else {"passage": h.passage})} for h in hits] for hits in results]
        return JSONResponse({"results": rows, "version": snap.version})

    @app.post("/documents", response_model=WriteResponse)
    async def add(body: AddRequest) -> Any:
        """Add documents, or replace them by id; answered once the version holding them is on disk."""
        return JSONResponse(await service.write("add", service.documents(body)))

    @app.post("/documents/delete", response_model=WriteResponse)
    async def delete(body: DeleteRequest) -> Any:
        """Delete documents by id; answered once the version without them is on disk."""
        return JSONResponse(await service.write("delete", service.ids(body)))

    @app.get("/info")
    def info() -> Any:
        """What the index holds on disk now (`embedctl index info --json`), and the version searched."""
        snap = service.snapshot()
        out = snap.index.info()
        out["serving"] = {"version": snap.version, "documents": snap.documents,
                          "uptime_s": round(time.time() - service.started, 1), "embedctl": __version__,
                          "search_workers": len(service.batcher.workers), "threads_per_worker": service.batcher.threads,
                          "writer_threads": service.cfg.writer_threads,
                          "query_encoder_backend": snap.index.session.encoder.backend_name}
        return out

    @app.get("/healthz")
    def healthz() -> Any:
        """The process answers (it may still be opening the index: see /readyz)."""
        return {"status": "alive"}

    @app.get("/readyz")
    def readyz() -> Any:
        """200 once the index and the model are open and the writer runs; 503 before (or why it failed)."""
        snap = service.versions.current
        if snap is None or not service.ready.is_set():
            return JSONResponse({"status": "failed" if service.versions.error else "opening",
                                 "error": service.versions.error}, status_code=503)
        return {"status": "ready", "version": snap.version, "documents": snap.documents}

    @app.get("/metrics")
    def metrics() -> Any:
        """Prometheus text format."""
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


def _errors(app: FastAPI) -> None:
    @app.exception_handler(EmbedctlError)
    async def embedctl_error(request: Request, err: EmbedctlError) -> JSONResponse:
        rid = request.scope.get("state", {}).get("request_id", "")
        headers = {"retry-after": "1"} if _status(err) == 503 else None
        return JSONResponse(error_body(rid, err.message, err.hint, getattr(err, "field", None)),
                            status_code=_status(err), headers=headers)

    @app.exception_handler(RequestValidationError)
    async def bad_body(request: Request, err: RequestValidationError) -> JSONResponse:
        rid = request.scope.get("state", {}).get("request_id", "")
        problems, first = [], None
        for e in err.errors():
            loc = [str(p) for p in e.get("loc", ()) if p != "body"]
            name = ".".join(loc) or "body"
            first = first or name
            problems.append(f"`{name}`: {e.get('msg')}")
        return JSONResponse(error_body(rid, "; ".join(problems) or "bad request body",
                                       "see the request schema at /docs (JSON body, fields as named)", first),
                            status_code=422)
