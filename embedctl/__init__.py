"""embedctl: one command-line tool from raw text to a trained, indexed and evaluated retrieval model.

As a library (docs/python-api.md)::

    import embedctl
    idx = embedctl.Index.open("indexes/scifact")
    idx.search("what causes scurvy?", k=10)

``Index``, ``Encoder`` and ``Hit`` live in :mod:`embedctl.api`, imported on first use so that
``import embedctl`` (and ``embedctl --help``) stays free of torch.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["Encoder", "Hit", "Index", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("Encoder", "Hit", "Index"):
        from embedctl import api

        return getattr(api, name)
    raise AttributeError(f"module 'embedctl' has no attribute {name!r}")
