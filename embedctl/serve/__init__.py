"""`embedctl serve`: an HTTP search service over one index (FastAPI on uvicorn; docs/serving.md).

- :mod:`embedctl.serve.versions`: the version readers search (one :class:`embedctl.Index` per committed
  version, never changed once opened) and the swap to a newer one (own commits, or another process's).
- :mod:`embedctl.serve.batcher`: concurrent searches grouped into one encoder call (a bounded window).
- :mod:`embedctl.serve.writer`: one writer thread; writes arriving together are grouped into one commit and
  acknowledged once it is on disk.
- :mod:`embedctl.serve.app`: the endpoints, keys, limits, request ids and errors; :mod:`embedctl.serve.metrics`
  the Prometheus metrics; :mod:`embedctl.serve.run` binds the socket and runs uvicorn.

Example::

    from embedctl.serve.app import create_app
    app = create_app(loaded, Path("indexes/scifact"))   # an ASGI app; run_server(...) serves it
"""
