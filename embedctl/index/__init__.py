"""Indexes: build them (PLAID for ColBERT models, dense faiss for bi-encoders), then change them in place.

The Python API (the CLI's ``embedctl index [add|delete|compact|info]`` calls the same functions)::

    from embedctl.index import add_documents, delete_documents, compact_index, index_info
    add_documents("indexes/scifact", "new.jsonl")              # or [("id-1", "text"), ...]
    delete_documents("indexes/scifact", ["id-7"])
    compact_index("indexes/scifact")
    index_info("indexes/scifact", verify_files=True)["documents"]

``build_index(loaded)`` builds from a loaded config (embedctl.config.load_config). Every change writes a
new generation (embedctl.index.generations; the format: docs/index-format.md).
"""

from embedctl.index.build import build_index
from embedctl.index.maintain import compact_index, index_info
from embedctl.index.update import UpdateOptions, add_documents, delete_documents

__all__ = ["UpdateOptions", "add_documents", "build_index", "compact_index", "delete_documents", "index_info"]
