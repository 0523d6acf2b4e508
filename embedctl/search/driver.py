"""`embedctl search` driver: open an index, load the encoder it was built with, rank queries.

Kept thin on purpose: the index metadata and the document ids are read once, the encoder and the
retriever are loaded on first use, queries are encoded in batches, and per query only the retrieval
stage runs (dense: one faiss call per batch; PLAID: ``PlaidSearcher.search`` per query).

Example::

    session = SearchSession.open(loaded)          # finds the index (search.index / index.name / LATEST)
    hits = session.search(["what causes scurvy"], k=10)[0]    # [(doc_id, score), ...] best first
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.config.sections.model import ModelConfig
from embedctl.data.sources import iter_texts
from embedctl.errors import ConfigError, EmbedctlError, InputError
from embedctl.index import meta as M
from embedctl.index.docs import SegmentedDocTable, open_doc_table
from embedctl.index.generations import open_generation
from embedctl.index.kinds import index_kind
from embedctl.index.passages import PassageSpec, best_per_document
from embedctl.models.encoder import load_encoder
from embedctl.search.filter_eval import FieldFilter
from embedctl.search.filters import as_filter
from embedctl.search.fusion import fuse
from embedctl.search.retrievers import LexicalRetriever, open_retriever
from embedctl.util.console import stderr_console

MODES = ("neural", "lexical", "hybrid")
NEURAL, LEXICAL, HYBRID = MODES


class SearchSession:
    """One opened index plus its encoder; cheap to create, loads the heavy parts on first use."""

    def __init__(self, index_dir: Path, meta: dict[str, Any], cfg: Any):
        self.index_dir, self.meta, self.cfg = index_dir, meta, cfg
        # one generation of the index (embedctl.index.generations): its documents and arrays are opened from
        # the same commit, so a concurrent `embedctl index add|delete|compact` never mixes into this session
        self.generation = open_generation(index_dir)
        self.docs = SegmentedDocTable([open_doc_table(self.generation.path(s.docs)) for s in self.generation.segments])
        self._encoder = None
        self._retriever = None
        self.encoder_backend: str | None = None
        """``model.encoder_backend`` set for this search; None: encode queries as the index's documents were."""
        self.queries = 1
        """How many queries this process will search: ``model.encoder_backend=auto`` set for the search resolves
        for that many (embedctl.models.encode_backends.AUTO; a queries file sets its length, a server
        encode_backends.LONG_LIVED)."""
        self._field_filter = None
        self._masks: dict[str, np.ndarray] = {}
        self._lexical = None
        self._empty_query: Counter | None = None  # the ids of "" as a query (check_queries), once
        self.timings = {"load_encoder_s": 0.0, "load_index_s": 0.0, "encode_s": 0.0, "retrieve_s": 0.0}

    @classmethod
    def open(cls, loaded: Any) -> SearchSession:
        """Find and check the index named by the config; fails clearly when it is missing or mismatched."""
        cfg = loaded.cfg
        index_dir = M.find_index(cfg.search.index, cfg.index.root, cfg.index.name)
        meta = M.read_metadata(index_dir)
        M.check_model_request(meta, _requested_model(loaded), index_dir)
        _warn_ignored_model_settings(loaded, meta, index_dir)
        _set_threads(cfg.search.threads)
        session = cls(index_dir, meta, cfg)
        if loaded.origin("model.encoder_backend") != "default":
            session.encoder_backend = cfg.model.encoder_backend
        return session

    @property
    def encoder(self):
        if self._encoder is None:
            started = time.perf_counter()
            model_cfg = index_model_config(self.meta, self.cfg.model.device)
            if self.encoder_backend is not None:  # the user's choice over the index's (within the fidelity bound)
                model_cfg = dataclasses.replace(model_cfg, encoder_backend=self.encoder_backend)
            try:
                self._encoder = load_encoder(model_cfg, texts=self.queries)
            except ConfigError as exc:
                if self.encoder_backend is not None or model_cfg.encoder_backend == "reference":
                    raise
                # the index's encode backend cannot run here (a GPU, no onnxruntime): the exact reference
                stderr_console().print(f"warning: {'; '.join(exc.problems)}: encoding queries with the reference "
                                       "instead", markup=False)
                self._encoder = load_encoder(dataclasses.replace(model_cfg, encoder_backend="reference"))
            M.check_model_unchanged(self.meta, self._encoder, self.index_dir)
            self.timings["load_encoder_s"] += time.perf_counter() - started
        return self._encoder

    @property
    def retriever(self):
        if self._retriever is None:
            started = time.perf_counter()
            self._retriever = open_retriever(self.generation, self.cfg.search, device=self.encoder.device.type)
            self.timings["load_index_s"] += time.perf_counter() - started
        return self._retriever

    def use_encoder(self, encoder: Any) -> None:
        """Search with ``encoder`` (already loaded elsewhere) instead of loading the index's model: refused
        unless it is that model (same files) with the settings the index pins (lengths, pooling, ...)."""
        pinned = dataclasses.asdict(index_model_config(self.meta, encoder.model_cfg.device))
        given = dataclasses.asdict(encoder.model_cfg)
        differ = sorted(k for k in pinned if k not in ("name_or_path", "device", "dim") and pinned[k] != given.get(k))
        if differ:
            raise EmbedctlError(f"the encoder differs from the one the index {self.index_dir} was built with: "
                                + ", ".join(f"model.{k}={given.get(k)!r} (index: {pinned[k]!r})" for k in differ),
                                hint="share an encoder only between indexes built with the same model settings")
        M.check_model_request(self.meta, encoder.model_cfg.name_or_path, self.index_dir)
        M.check_model_unchanged(self.meta, encoder, self.index_dir)
        self._encoder = encoder

    def adopt_encoder(self, other: SearchSession) -> None:
        """Use the encoder ``other`` already loaded (a newer version of the same index: same model record)."""
        if other.meta.get("model") == self.meta.get("model"):
            self._encoder = other._encoder

    def backend_report(self) -> dict[str, Any]:
        """``{"index": {name, precision}, "search": {name, precision}, "encoder": {index, search}[, "note"]}``:
        what built the index and what searches it, the encode backends of its documents and of the queries
        (a note when they differ)."""
        report = dict(self.retriever.backend_report())
        indexed = M.encoder_backend_of(self.meta)
        report["encoder"] = {"index": indexed, "search": self.encoder.backend_name}
        if indexed != self.encoder.backend_name:
            note = (f"queries are encoded by the {self.encoder.backend_name} encode backend, the index's documents "
                    f"were by {indexed} (model.encoder_backend set for this search)")
            report["note"] = f"{report['note']}; {note}" if "note" in report else note
        return report

    def backend_line(self) -> str:
        """One line for the summary: ``backend: native fp32 (index built by native int16)``."""
        report = self.backend_report()
        search, index = report["search"], report["index"]
        line = f"backend: {search['name']} {search['precision']}"
        if index:
            line += f" (index built by {index.get('name')} {index.get('precision')})"
        line += f"; encoder: {report['encoder']['search']}"
        return line + (f"; note: {report['note']}" if "note" in report else "")

    def check_queries(self, qids: list[str], texts: list[str], source: str | None = None,
                      lines: list[int] | None = None) -> list[list[int]]:
        """Say which queries the model can read little of; they are still ranked. Returns each query's token
        ids, what the encoder reads: give them to :meth:`search_pids` (``query_ids``) so that the queries are
        not tokenized again.

        Empty (nothing but special tokens / prefix / marker once tokenized, e.g. "" or characters the
        tokenizer drops): ranked on those tokens alone, as sentence-transformers encodes "", with a warning
        naming each (a single query typed on the command line is refused instead). Only punctuation:
        ranked, with a warning: its hits carry little meaning.
        """
        tok = self.encoder.tokenizer
        if self._empty_query is None:
            self._empty_query = Counter(tok.encode_queries([""])[0])  # the same for every call: once
        empty = self._empty_query
        punctuation = set(tok.punctuation_ids())
        blank: list[str] = []
        punct_only: list[str] = []
        encoded = tok.encode_queries(texts)
        for i, (qid, text, ids) in enumerate(zip(qids, texts, encoded, strict=True)):
            content = list((Counter(ids) - empty).elements())
            where = f"query {qid!r} ({text!r}" + (f", {source}:{lines[i]})" if source and lines else ")")
            if not content:
                if source is None:
                    raise InputError("the query has no tokens the model can read",
                                     hint="give the query some words; it is empty or made of characters the "
                                          "tokenizer drops")
                blank.append(where)
            elif all(t in punctuation for t in content):
                punct_only.append(where if source else f"the query ({text!r})")
        _warn(blank, "no tokens the model can read: ranked on the special tokens alone (as "
                     "sentence-transformers encodes an empty text), so their hits are arbitrary")
        _warn(punct_only, "only punctuation: ranked, but their hits carry little meaning")
        return encoded

    @property
    def field_filter(self) -> FieldFilter:
        """The generation's fields, ready to evaluate filters (embedctl.search.filter_eval)."""
        if self._field_filter is None:
            self._field_filter = FieldFilter(self.generation)
        return self._field_filter

    def allowed(self, spec: Any) -> np.ndarray | None:
        """bool [rows] of the live documents a filter (an expression, its JSON form or a tree) allows; None
        for no filter. Unknown fields, wrong types and bad syntax fail here (FilterError, exit code 2)."""
        node = as_filter(spec)
        if node is None:
            return None
        key = json.dumps(node.to_json(), sort_keys=True)
        mask = self._masks.get(key)
        if mask is None:  # a generation never changes: a filter's mask is kept (the last 32 filters)
            mask = self.field_filter.mask(node)
            if len(self._masks) >= 32:
                self._masks.pop(next(iter(self._masks)))
            self._masks[key] = mask
        return mask

    @property
    def lexical(self) -> LexicalRetriever:
        """The index's BM25 side (refused, with the fix, when it has none)."""
        if self._lexical is None:
            started = time.perf_counter()
            self._lexical = LexicalRetriever(self.generation)
            self.timings["load_index_s"] += time.perf_counter() - started
        return self._lexical

    def mode(self, mode: str | None = None) -> str:
        """The search mode of a call: ``mode``, else ``search.mode``; a lexical index searches lexically."""
        mode = mode or self.cfg.search.mode
        if mode not in MODES:
            raise EmbedctlError(f"unknown search mode {mode!r}; expected one of {', '.join(MODES)}", exit_code=2,
                                hint="set search.mode=neural|lexical|hybrid")
        if not index_kind(self.generation.kind).encodes and mode != LEXICAL:
            if self.cfg.search.mode == mode and mode == NEURAL:  # the default: the only mode it has
                return "lexical"
            raise EmbedctlError(f"the index {self.index_dir} is lexical only (index.kind=lexical): it has no "
                                f"vectors for search.mode={mode}", exit_code=2,
                                hint="search it with search.mode=lexical, or build an index with a model")
        return mode

    def search_pids(self, texts: list[str], k: int, allowed: np.ndarray | None = None, mode: str | None = None,
                    query_ids: list[list[int]] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """Rank ``texts`` (already checked; ``query_ids``: their ids from :meth:`check_queries`, encoded instead of
        the texts): per query (pids int64 [<=k], scores float32 [<=k]) best first;
        ``allowed`` (:meth:`allowed`): only those documents, k of them whenever k pass (lexical: those
        that share a term with the query). ``mode`` (default ``search.mode``): neural, lexical, or hybrid
        (each side's top ``search.fusion_depth`` fused: embedctl.search.fusion).

        An index of passages (index.passages: its rows are passages, embedctl.index.passages): the rows
        ranked are passages, each document kept once at its best passage (that passage's pid and score),
        k documents whenever k exist: the engine is asked for 4k passages; the queries still short of k
        documents are asked again with a mask of the live rows (PLAID then scores more than the candidates
        its probed centroids hold, as a filter makes it), then 4 times deeper while the engine returned all
        it was asked for."""
        mode = self.mode(mode)
        if not self.passages:
            return self._rank_rows(texts, k, allowed, mode, query_ids)
        gen = self.generation
        rows = max(1, gen.num_docs)
        depth, mask = min(rows, 4 * k), allowed
        out: list[Any] = [None] * len(texts)
        todo = list(range(len(texts)))
        while todo:
            ranked = self._rank_rows([texts[i] for i in todo], depth, mask, mode,
                                     None if query_ids is None else [query_ids[i] for i in todo])
            short = []
            for i, (pids, scores) in zip(todo, ranked, strict=True):
                out[i] = best_per_document(pids, scores, self.docs.ids_of(pids), k)
                if len(out[i][0]) < k and (mask is None or (len(pids) >= depth and depth < rows)):
                    short.append(i)
            if mask is None:
                mask = np.concatenate([gen.live_mask(s) for s in gen.segments])
            else:
                depth = min(rows, depth * 4)
            todo = short
        return out

    @property
    def passages(self) -> bool:
        """Whether the index's rows are passages (index.passages)."""
        return PassageSpec.of_metadata(self.meta) is not None

    def passage_numbers(self, pids: np.ndarray) -> list[int] | None:
        """Each row's passage number within its document (0: the first); None for an index of documents."""
        return self.docs.passage_numbers(pids) if self.passages else None

    def _rank_rows(self, texts: list[str], k: int, allowed: np.ndarray | None, mode: str,
                   query_ids: list[list[int]] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`search_pids` over the rows as they are (documents, or the passages of an index of passages)."""
        scfg = self.cfg.search
        if mode == LEXICAL:
            lexical = self.lexical
            started = time.perf_counter()
            out = lexical.search_texts(texts, k, allowed)
            self.timings["retrieve_s"] += time.perf_counter() - started
            return out
        depth = k if mode == NEURAL else max(k, int(scfg.fusion_depth))
        started = time.perf_counter()
        Q = self.encoder.encode_queries(texts if query_ids is None else query_ids, batch_size=scfg.batch_size)
        self.timings["encode_s"] += time.perf_counter() - started
        retriever = self.retriever
        started = time.perf_counter()
        out = retriever.search(Q, depth) if allowed is None else retriever.search(Q, depth, allowed=allowed)
        if mode == HYBRID:
            lexical = self.lexical.search_texts(texts, depth, allowed)
            out = [fuse(n, lex, scfg.fusion, float(scfg.hybrid_weight), int(scfg.rrf_k), k)
                   for n, lex in zip(out, lexical, strict=True)]
        self.timings["retrieve_s"] += time.perf_counter() - started
        return out

    def search(self, texts: list[str], k: int) -> list[list[tuple[str, float]]]:
        """Rank ``texts``: per query [(original doc id, score), ...] best first (fewer than k when fewer hits)."""
        ids = self.check_queries([str(i) for i in range(len(texts))], texts)
        return [list(zip(self.docs.ids_of(pids), map(float, scores), strict=True))
                for pids, scores in self.search_pids(texts, k, query_ids=ids)]


def _warn(queries: list[str], what: str, show: int = 5) -> None:
    if not queries:
        return
    more = f" and {len(queries) - show} more" if len(queries) > show else ""
    head = "1 query has" if len(queries) == 1 else f"{len(queries)} queries have"
    stderr_console().print(f"warning: {head} {what}: {'; '.join(queries[:show])}{more}", markup=False)


def index_model_config(meta: dict[str, Any], device: str) -> ModelConfig:
    """The ModelConfig recorded in the index (absolute model path, today's device choice)."""
    return M.model_config(meta, device)


def _warn_ignored_model_settings(loaded: Any, meta: dict[str, Any], index_dir: Path) -> None:
    """A `model.*` value set for this search (config file, override, flag) that differs from what the index
    pins is not used (the documents were encoded with the pinned one): say so, naming the fix."""
    for key, wanted, used, origin in M.ignored_model_settings(loaded, meta):
        stderr_console().print(
            f"warning: {key}={wanted!r} ({origin}) is ignored: the index {index_dir} was built with "
            f"{key.split('.', 1)[1]}={used!r} and search encodes queries the same way; to use it, rebuild the index "
            f"with it (embedctl index ... {key}={wanted!r} --overwrite)", markup=False)


def _requested_model(loaded: Any) -> str | None:
    """model.name_or_path when the user set it explicitly for this search (override, flag or config file)."""
    return M.requested_model(loaded)


def _set_threads(threads: int | None) -> None:
    """torch's threads; faiss's are set by the dense retriever when it opens (a PLAID search never imports
    faiss: ~0.06-0.1 s)."""
    if not threads:
        return
    import torch

    torch.set_num_threads(threads)


def run_batch(session: SearchSession, queries_url: str, k: int, only: set[str] | None = None,
              allowed: np.ndarray | None = None, mode: str | None = None
              ) -> tuple[list[tuple[str, list[tuple[str, float]]]], float]:
    """Search the queries of a queries file (those in ``only`` when given); returns ([(qid, hits)], seconds).
    ``allowed`` / ``mode``: as :meth:`SearchSession.search_pids`."""
    mode = session.mode(mode)
    # TSV or JSONL; bad rows and duplicate ids fail with file:line; an empty query is kept (check_queries warns)
    records = list(iter_texts(queries_url, allow_empty=True))
    if only is not None and any(r.id in only for r in records):
        records = [r for r in records if r.id in only]
    qids, texts = [r.id for r in records], [r.text for r in records]
    session.queries = max(session.queries, len(texts))
    ids = None if mode == LEXICAL else session.check_queries(qids, texts, source=queries_url,
                                                              lines=[r.line for r in records])
    started = time.perf_counter()
    rankings = []
    step = max(1, session.cfg.search.batch_size)
    for start in range(0, len(texts), step):
        results = session.search_pids(texts[start:start + step], k, allowed, mode,
                                      None if ids is None else ids[start:start + step])
        for qid, (pids, scores) in zip(qids[start:start + step], results, strict=True):
            rankings.append((qid, list(zip(session.docs.ids_of(pids), map(float, scores), strict=True))))
    return rankings, time.perf_counter() - started


def check_k(k: int) -> None:
    if k < 1:
        raise EmbedctlError(f"`search.k` = {k}: must be at least 1")
