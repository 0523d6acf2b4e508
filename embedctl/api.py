"""embedctl as a Python library: build, open, search and change an index, and encode texts.

The CLI's runners (``embedctl index``, ``embedctl search``) call these same methods, so a script gets the
same behaviour and the same errors (each with its fix) as the command line::

    import embedctl
    idx = embedctl.Index.build("corpus.jsonl", "indexes/sf", config="configs/colbert_scifact.yaml")
    idx = embedctl.Index.open("indexes/sf")            # model and index loaded once, on first search
    hits = idx.search("what causes scurvy?", k=10)      # [Hit(id, score, text, title, fields)], best first
    idx.search("scurvy", filter="year >= 2015 and journal in ('Nature', 'Cell')")   # docs/filters.md
    many = idx.search(["q1", "q2"], k=100)              # one list of hits per query (batched encoding)
    idx.add([{"id": "d9", "text": "..."}]); idx.delete(["d3"]); idx.compact(); idx.info()

Versions: an :class:`Index` reads one committed version of its folder. Its own writes (``add``,
``delete``, ``compact``) move it to the version they commit; a version committed by another process
(``embedctl index add`` in a shell, another :class:`Index`) is seen after :meth:`Index.refresh`.

``config`` everywhere is a YAML recipe path, an already loaded config (:func:`embedctl.config.load_config`)
or None (the defaults); ``overrides`` are ``key=value`` strings as on the command line.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Union, overload

import numpy as np

from embedctl.config import LoadedConfig, load_config
from embedctl.errors import EmbedctlError
from embedctl.index import meta as M
from embedctl.index.build import build_index
from embedctl.index.maintain import compact_index, index_info
from embedctl.index.passages import live_documents
from embedctl.index.update import UpdateOptions, add_documents, delete_documents
from embedctl.search.driver import LEXICAL, SearchSession, check_k, run_batch
from embedctl.util.ranks import Ranks

ConfigLike = Union[str, Path, LoadedConfig, None]
Document = Union[dict[str, Any], tuple[str, str], tuple[str, str, str]]

__all__ = ["Encoder", "Hit", "Index"]


class Hit(NamedTuple):
    """One ranked document: its id as in the collection, its score (MaxSim sum for PLAID, inner product for
    dense), its stored text and title (None when the search asked for no text) and its fields (metadata
    by name, embedctl.index.fields; None when the search asked for no text). In an index of passages
    (index.passages) the text is the document's best passage's, ``passage`` its number in the document
    (0: the first) and the score that passage's; None for an index of whole documents. Immutable; a named
    tuple because a frozen dataclass costs ~2 us to build, 0.2 ms of a 100-hit search (``hit._asdict()``
    gives a dict)."""

    id: str
    score: float
    text: str | None = None
    title: str | None = None
    fields: dict[str, Any] | None = None
    passage: int | None = None


def resolve_config(config: ConfigLike, overrides: Sequence[str] = (), flags: dict[str, Any] | None = None
                   ) -> LoadedConfig:
    """A loaded config from a recipe path, an already loaded config (flags applied on a copy) or None."""
    if isinstance(config, LoadedConfig):
        if overrides:
            raise EmbedctlError("overrides given with an already loaded config",
                                hint="pass the recipe's path with overrides=[...], or load it with them")
        return _with_flags(config, flags or {})
    return load_config(None if config is None else str(config), list(overrides), flags)


def _with_flags(loaded: LoadedConfig, flags: dict[str, Any]) -> LoadedConfig:
    """A copy of ``loaded`` with dotted ``flags`` set (None values skipped), their origin the command line."""
    cfg = loaded.cfg
    origins = dict(loaded.origins)
    for dotted, value in flags.items():
        if value is None:
            continue
        section, key = dotted.split(".", 1)
        cfg = dataclasses.replace(cfg, **{section: dataclasses.replace(getattr(cfg, section), **{key: value})})
        origins[dotted] = "command line"
    return dataclasses.replace(loaded, cfg=cfg, flags={**loaded.flags, **flags}, origins=origins)


class Index:
    """An index folder opened for reading and changing; see the module docstring. Create with
    :meth:`open` or :meth:`build` (the constructor takes an already loaded config)."""

    def __init__(self, path: str | Path, loaded: LoadedConfig, summary: dict[str, Any] | None = None):
        self.path = Path(path)
        self.loaded = _with_flags(loaded, {"search.index": str(self.path)})
        self.summary = summary
        """What the last build or change reported (counts, seconds, version); None after :meth:`open`."""
        self._session: SearchSession | None = None

    # -- opening --------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path | None = None, *, config: ConfigLike = None, overrides: Sequence[str] = (),
             encoder: Encoder | None = None) -> Index:
        """Open the index at ``path`` (checked now: a missing, unfinished or foreign folder fails with the
        fix); the model and the arrays load on the first search. Without ``path``: the config's
        ``search.index``, else ``index.root``/``index.name``, else LATEST under ``index.root``, as
        ``embedctl search`` finds it. ``search.*`` keys of ``config`` / ``overrides`` set the search (k is
        per call): PLAID ncells, ndocs, backend, threads... ``encoder``: an :class:`Encoder` already loaded
        (e.g. another index's ``.encoder``) to share instead of loading the index's model again; it must be
        the model and settings the index was built with (refused otherwise, naming the difference)."""
        loaded = resolve_config(config, overrides)
        if path is None:
            cfg = loaded.cfg
            path = M.find_index(cfg.search.index, cfg.index.root, cfg.index.name)
        index = cls(path, loaded)
        session = index.session  # opens and checks the index and the requested model now
        if encoder is not None:
            session.use_encoder(encoder.model)
        return index

    @classmethod
    def build(cls, collection: str | Path | None, path: str | Path | None = None, *, config: ConfigLike = None,
              overrides: Sequence[str] = (), overwrite: bool | None = None, ranks: Ranks | None = None) -> Index:
        """Encode ``collection`` (TSV, BEIR corpus.jsonl or folder, parquet, token cache; local or fsspec URL)
        and build the index at ``path`` (default: ``index.root``/``index.name`` of the config). The kind
        follows the model (``index.kind``: PLAID for ColBERT, dense for a bi-encoder). An interrupted build
        resumes when called again with the same request. ``ranks``: several processes building one index
        (embedctl.util.ranks; every rank calls this, rank 0 writes)."""
        flags: dict[str, Any] = {"index.collection": None if collection is None else str(collection),
                                 "index.overwrite": overwrite}
        if path is not None:
            folder = Path(os.path.abspath(path))  # `x/..` names a folder; its name is never `..`
            flags.update({"index.root": str(folder.parent), "index.name": folder.name})
        loaded = resolve_config(config, overrides, flags)
        summary = build_index(loaded, ranks)
        return cls(summary.get("index") or M.find_index(None, loaded.cfg.index.root, loaded.cfg.index.name),
                   loaded, summary)

    # -- reading --------------------------------------------------------------------------------------
    @property
    def session(self) -> SearchSession:
        """The search session of the version this object reads (embedctl.search.driver)."""
        if self._session is None:
            self._session = SearchSession.open(self.loaded)
        return self._session

    @property
    def encoder(self) -> Encoder:
        """The index's encoder (loaded on first use): encodes queries and documents exactly as the index does."""
        return Encoder(self.session.encoder)

    @property
    def version(self) -> int:
        """The committed version this object reads (``index info``'s version)."""
        return self.session.generation.number

    @property
    def kind(self) -> str:
        return self.session.generation.kind

    def __len__(self) -> int:
        """Live documents in the version read (an index of passages: distinct ids among its live passages)."""
        session = self.session
        return live_documents(session.generation) if session.passages else session.generation.num_docs

    @overload
    def search(self, queries: str, k: int = ..., *, text: bool = ..., filter: Any = ..., mode: str | None = ...
               ) -> list[Hit]: ...
    @overload
    def search(self, queries: Sequence[str], k: int = ..., *, text: bool = ..., filter: Any = ...,
               mode: str | None = ...) -> list[list[Hit]]: ...

    def search(self, queries: str | Sequence[str], k: int = 10, *, text: bool = True, filter: Any = None,
               mode: str | None = None):
        """Rank one query (a list of :class:`Hit`, best first) or several (one such list per query, encoded
        in batches of ``search.batch_size``). Fewer than ``k`` hits when the index has fewer documents.
        ``text=False`` skips reading the documents' text and fields (ids and scores only). ``filter``: an
        expression (``"year >= 2015 and journal in ('Nature', 'Cell')"``) or its JSON form (a dict;
        docs/filters.md): only the documents it allows are ranked, ``k`` of them whenever ``k`` pass; a bad
        filter raises embedctl.search.filters.FilterError before anything is encoded. ``mode``: ``neural``,
        ``lexical`` (the index's BM25 side) or ``hybrid`` (both fused; ``search.fusion``,
        ``search.hybrid_weight``, ``search.rrf_k`` of the config); default ``search.mode``."""
        check_k(k)
        single = isinstance(queries, str)
        texts = [queries] if single else [str(q) for q in queries]
        session = self.session
        mode = session.mode(mode)
        allowed = session.allowed(filter)
        ids = None if mode == LEXICAL else session.check_queries([str(i) for i in range(len(texts))], texts)
        results = [self._hits(pids, scores, text)
                   for pids, scores in session.search_pids(texts, k, allowed, mode, query_ids=ids)]
        return results[0] if single else results

    def rank_file(self, queries: str | Path, k: int = 100, *, only: set[str] | None = None, filter: Any = None,
                  mode: str | None = None) -> list[tuple[str, list[Hit]]]:
        """Rank every query of a queries file (TSV ``qid \\t text`` or JSONL; bad rows and duplicate ids fail
        with file:line; an empty query is ranked with a warning naming its line): ``[(qid, hits)]`` in file
        order, hits without text. ``only``: rank just these qids when the file has any of them. ``filter``,
        ``mode``: as :meth:`search`."""
        check_k(k)
        session = self.session
        rankings, _ = run_batch(session, str(queries), k, only=only, allowed=session.allowed(filter), mode=mode)
        return [(qid, [Hit(i, s) for i, s in hits]) for qid, hits in rankings]

    def _hits(self, pids: np.ndarray, scores: np.ndarray, text: bool) -> list[Hit]:
        docs = self.session.docs
        ids = docs.ids_of(pids)
        scores = np.asarray(scores).tolist()  # Python floats in one call, not one float() per hit
        numbers = self.session.passage_numbers(pids) or [None] * len(ids)
        if not text:
            return [Hit(i, s, passage=n) for i, s, n in zip(ids, scores, numbers, strict=True)]
        rows = docs.titles_and_texts(pids)
        fields = self.session.field_filter.rows_of(pids)
        return [Hit(i, s, body, title, f, n)
                for i, s, (title, body), f, n in zip(ids, scores, rows, fields, numbers, strict=True)]

    def refresh(self) -> int:
        """Move to the newest committed version (the loaded model is kept); returns it."""
        old = self._session
        self._session = None
        session = self.session
        if old is not None and old._encoder is not None:
            session.adopt_encoder(old)
        return session.generation.number

    def info(self, verify: bool = False) -> dict[str, Any]:
        """What the index holds now (``embedctl index info --json``): documents, deleted, segments, bytes,
        version, model, backend; ``verify=True`` re-reads every file against its sha256 (``verify``: the
        problems found, empty when all is well)."""
        return index_info(self.path, verify_files=verify)

    # -- changing -------------------------------------------------------------------------------------
    def add(self, documents: str | Path | Iterable[Document], *, progress: bool = False) -> dict[str, Any]:
        """Add documents, or replace them by id: a collection file, or ``{"id", "text"[, "title"]}`` dicts /
        ``(id, text)`` / ``(id, title, text)`` tuples. Only new or changed texts are encoded. Returns the
        summary (added, updated, unchanged, version) and moves this object to the new version."""
        encoder = self._session._encoder if self._session is not None else None
        summary = add_documents(self.path, documents, options=self._options(progress), encoder=encoder,
                                loaded=self.loaded)
        return self._changed(summary)

    def delete(self, ids: Iterable[str], *, strict: bool | None = None) -> dict[str, Any]:
        """Delete documents by id (unknown ids are reported in ``unknown``; ``strict=True`` refuses them and
        deletes nothing). Returns the summary and moves this object to the new version."""
        options = self._options(False)
        if strict is not None:
            options = dataclasses.replace(options, strict=strict)
        return self._changed(delete_documents(self.path, ids, options=options))

    def compact(self) -> dict[str, Any]:
        """Merge the segments and drop deleted rows (no re-encoding); moves this object to the new version."""
        return self._changed(compact_index(self.path, options=self._options(False)))

    def _options(self, progress: bool) -> UpdateOptions:
        return UpdateOptions.from_config(self.loaded.cfg.index, progress=progress)

    def _changed(self, summary: dict[str, Any]) -> dict[str, Any]:
        self.summary = summary
        if summary.get("changed") and self._session is not None:
            self.refresh()
        return summary

    def __repr__(self) -> str:
        return f"Index({str(self.path)!r})"


class Encoder:
    """Encode texts with any supported checkpoint (the one encoder of training, indexing and search)::

        enc = embedctl.Encoder.load("minilm")                 # bi-encoder: one vector per text
        enc.encode_queries(["what causes scurvy?"])           # float32 [1, 384]
        col = embedctl.Encoder.load("minilm", kind="colbert")
        col.encode_documents(["Vitamin C ..."])               # [float32 [tokens, 128]] per document
    """

    def __init__(self, encoder: Any):
        self.model = encoder
        """The underlying torch module (embedctl.models.encoder.Encoder)."""

    @classmethod
    def load(cls, name_or_path: str | None = None, *, kind: str | None = None, config: ConfigLike = None,
             overrides: Sequence[str] = ()) -> Encoder:
        """Load a model folder, a bundled alias (``minilm``) or a training run's checkpoint; ``kind``:
        ``biencoder`` or ``colbert`` (default: the config's ``model.kind``)."""
        from embedctl.models.encoder import load_encoder

        loaded = resolve_config(config, overrides, {"model.name_or_path": name_or_path, "model.kind": kind})
        return cls(load_encoder(loaded.cfg.model))

    @property
    def kind(self) -> str:
        return self.model.kind

    @property
    def dim(self) -> int:
        return int(self.model.dim)

    def encode_queries(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Bi-encoder: float32 [n, dim]; ColBERT: float32 [n, query_max_length, dim] (query augmentation)."""
        return np.asarray(self.model.encode_queries(list(texts), batch_size=batch_size))

    def encode_documents(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray | list[np.ndarray]:
        """Bi-encoder: float32 [n, dim]; ColBERT: one float32 [tokens, dim] array per document."""
        out = self.model.encode_documents(list(texts), batch_size=batch_size)
        if self.kind != "colbert":
            return np.asarray(out)
        vecs, doclens = np.asarray(out[0]), np.asarray(out[1])
        return np.split(vecs, np.cumsum(doclens)[:-1]) if len(doclens) else []
