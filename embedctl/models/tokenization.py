"""Text -> token ids exactly as the encoder expects them (prefixes, ColBERT markers, special tokens, truncation).

One :class:`TextTokenizer` serves pretokenize, prebatch, training, indexing and search, so ids written to a
token cache are the ids the model sees at query time. Example::

    tok = TextTokenizer(ModelConfig(kind="colbert"))
    ids = tok.encode_queries(["what is a cell?"])   # [[101, 1, 2054, 2003, 1037, 3526, 1029, 102]]
    input_ids, attention_mask = tok.pad(ids, "query")   # [1, 32]: padded with [MASK], attention 1 on them
"""

from __future__ import annotations

import dataclasses
import string
from typing import Any

import numpy as np

from embedctl.config.sections.model import ModelConfig
from embedctl.errors import EmbedctlError
from embedctl.models.hub import resolve_model_path
from embedctl.models.layout import effective_config, transformer_dir
from embedctl.models.text_prefix import prefix_safe, truncated_ids
from embedctl.models.tokenizer_cache import TOKENIZER_FILES, load_hf_tokenizer, tokenizer_spec

FINGERPRINT_FORMAT = 1
SIDES = ("query", "document")
__all__ = ["TextTokenizer", "token_id_dtype", "fingerprint_differences", "load_hf_tokenizer", "TOKENIZER_FILES"]


def token_id_dtype(vocab_size: int) -> str:
    """Smallest unsigned dtype holding every id: ``"uint16"`` for vocab_size <= 65536, else ``"uint32"``.

    Example: ``token_id_dtype(30522) == "uint16"`` (BERT), ``token_id_dtype(250002) == "uint32"`` (XLM-R).
    """
    if vocab_size <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}")
    return "uint16" if vocab_size <= np.iinfo(np.uint16).max + 1 else "uint32"


def _token_id(backend, unk_id: int | None, token: str, key: str) -> int:
    """The single id of ``token``; an error naming ``key`` when the vocabulary lacks it."""
    token_id = backend.token_to_id(token)
    if token_id is None or (token_id == unk_id and backend.id_to_token(unk_id) != token):
        raise EmbedctlError(
            f"`{key}` = {token!r} is not a single token in this model's vocabulary",
            hint="use a token the vocabulary has (BERT: [unused0] / [unused1]) or add it to the tokenizer",
        )
    return int(token_id)


def _truncating_backend(backend_json: str, budget: int | None):
    """The Rust tokenizer of ``backend_json``, truncating to ``budget`` ids (None: never) and never padding."""
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(backend_json)
    backend.no_padding()
    if budget is None:
        backend.no_truncation()
    else:
        backend.enable_truncation(max_length=budget, strategy="longest_first", direction="right")
    return backend


class TextTokenizer:
    """Text -> ids for queries and documents, and padding into model inputs.

    ``TextTokenizer(model_cfg, model_path=None)`` loads only the tokenizer of ``model_cfg.name_or_path``
    (or of the already resolved folder ``model_path``). Settings fixed by the model folder (an embedctl
    checkpoint's card, a Stanford ColBERT checkpoint) are applied: see ``self.model_cfg``.
    """

    def __init__(self, model_cfg: ModelConfig, model_path: str | None = None):
        path = model_path or resolve_model_path(model_cfg.name_or_path)
        self.model_path = str(path)
        self.model_cfg = effective_config(model_cfg, path)
        self.tokenizer_dir = transformer_dir(path)
        spec, self._file_hashes, self._hf = tokenizer_spec(
            self.tokenizer_dir, trust_remote_code=self.model_cfg.trust_remote_code)
        self._spec = spec
        self.vocab_size = int(spec["vocab_size"])
        self.id_dtype = token_id_dtype(self.vocab_size)
        self.pad_id, self.mask_id, self.unk_id = spec["pad_id"], spec["mask_id"], spec["unk_id"]
        self.padding_side = spec["padding_side"]
        self.prefix_ids, self.suffix_ids = list(spec["prefix_ids"]), list(spec["suffix_ids"])
        self.colbert = self.model_cfg.kind == "colbert"
        # the Rust tokenizers, built on first use (each build parses the tokenizer JSON: ~30-40 ms; a search
        # needs only the query side's): side -> one truncating to that side's budget, None -> one never truncating
        self._backends: dict[str | None, Any] = {}
        markers = 1 if self.colbert else 0  # _markers() gives one id per side (or raises)
        self._budgets: dict[str | None, int | None] = {None: None, **{s: self._budget(s, markers) for s in SIDES}}
        self.marker_ids = self._markers()
        self._punctuation: list[int] | None = None
        self._prefix_safe: bool | None = None  # whether long texts may be tokenized from a prefix (text_prefix)

    @property
    def tokenizer(self):
        """The transformers tokenizer (loaded on first use: the fast paths never need it)."""
        if self._hf is None:
            self._hf = load_hf_tokenizer(self.tokenizer_dir, trust_remote_code=self.model_cfg.trust_remote_code)
        return self._hf

    # -- construction helpers -------------------------------------------------------------------------
    def _markers(self) -> dict[str, list[int]]:
        if not self.colbert:
            return {"query": [], "document": []}
        if self.model_cfg.query_augmentation and self.mask_id is None:
            raise EmbedctlError(
                "`model.query_augmentation` is on but this tokenizer has no [MASK] token",
                hint="set model.query_augmentation=false for this model",
            )
        vocab = self._lookup_backend()
        return {
            "query": [_token_id(vocab, self.unk_id, self.model_cfg.query_marker, "model.query_marker")],
            "document": [_token_id(vocab, self.unk_id, self.model_cfg.doc_marker, "model.doc_marker")],
        }

    def max_length(self, side: str) -> int:
        """Maximum ids per text for ``side`` ("query" | "document"), special tokens included."""
        return self.model_cfg.query_max_length if side == "query" else self.model_cfg.doc_max_length

    def _budget(self, side: str, markers: int) -> int:
        """Text ids ``side`` leaves after the special and marker ids (refused when none)."""
        fixed = len(self.prefix_ids) + markers + len(self.suffix_ids)
        budget = self.max_length(side) - fixed
        if budget < 1:
            key = "model.query_max_length" if side == "query" else "model.doc_max_length"
            raise EmbedctlError(
                f"`{key}` = {self.max_length(side)} leaves no room for text after {fixed} special/marker tokens",
                hint=f"set {key} to at least {fixed + 1} (usual: 32 for queries, 180-256 for documents)",
            )
        return budget

    def _backend(self, side: str | None):
        """The Rust tokenizer truncating to ``side``'s budget (None: never truncating), built on first use."""
        backend = self._backends.get(side)
        if backend is None:
            backend = self._backends[side] = _truncating_backend(self._spec["backend"], self._budgets[side])
        return backend

    def _lookup_backend(self):
        """A tokenizer for what truncation cannot change: vocabulary lookups, and encoding one punctuation
        symbol (a budget of 2 or more ids still tells a one-id symbol from a longer one). The query side's,
        which a search builds anyway; the never-truncating one where the query budget is a single id."""
        return self._backend("query" if self._budgets["query"] >= 2 else None)

    # -- text -> ids ----------------------------------------------------------------------------------
    def encode(self, texts: list[str], side: str) -> list[list[int]]:
        """Ids for each text of ``side``: specials + marker + (prefix + text) truncated + specials; not padded."""
        if side not in SIDES:
            raise ValueError(f"side must be 'query' or 'document', got {side!r}")
        if isinstance(texts, str):
            raise TypeError("encode_* takes a list of strings, not one string")
        prefix = self.model_cfg.query_prefix if side == "query" else self.model_cfg.doc_prefix
        if prefix:
            texts = [prefix + t for t in texts]
        ids = truncated_ids(self._backend(side), list(texts), self._budgets[side], self._prefix_is_safe)
        head = self.prefix_ids + self.marker_ids[side]
        tail = self.suffix_ids
        return [head + row + tail for row in ids]

    def _prefix_is_safe(self) -> bool:
        """Whether long texts may be tokenized from a prefix (text_prefix.prefix_safe), decided once, when a text
        first needs it."""
        if self._prefix_safe is None:
            self._prefix_safe = prefix_safe(self._spec["backend"])
        return self._prefix_safe

    def encode_queries(self, texts: list[str]) -> list[list[int]]:
        """Query ids (query_prefix, ColBERT query marker, specials), truncated to query_max_length, not padded."""
        return self.encode(texts, "query")

    def encode_documents(self, texts: list[str]) -> list[list[int]]:
        """Document ids (doc_prefix, ColBERT doc marker, specials), truncated to doc_max_length, not padded."""
        return self.encode(texts, "document")

    def text_budget(self, side: str) -> int:
        """Text ids a ``side`` input holds: its max length less the special and marker ids."""
        return int(self._budgets[side])

    def token_offsets(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        """Character ``(start, end)`` of every token of each text, never truncated, no special ids (what
        index.passages splits documents by: embedctl.index.passages)."""
        if not texts:
            return []
        return [list(enc.offsets) for enc in self._backend(None).encode_batch(list(texts), add_special_tokens=False)]

    def text_length(self, ids: list[int], side: str) -> int:
        """How many of ``ids`` are text (not specials/markers): 0 means the text tokenized to nothing."""
        return len(ids) - len(self.prefix_ids) - len(self.marker_ids[side]) - len(self.suffix_ids)

    # -- ids -> model inputs --------------------------------------------------------------------------
    def pad(self, id_lists, side: str):
        """Pad id lists (lists or 1-D arrays) into ``(input_ids, attention_mask)`` int64 tensors [B, L].

        ColBERT queries with query_augmentation: filled with [MASK] up to query_max_length, attention 1 on
        the masks (attention 0 there with ``model.attend_to_mask_tokens=false``). Otherwise padded with the pad id to the longest row, attention 0 on
        padding, on the tokenizer's padding side (left padding for decoder models).
        """
        import torch

        if side not in SIDES:
            raise ValueError(f"side must be 'query' or 'document', got {side!r}")
        rows = [np.asarray(ids, dtype=np.int64) for ids in id_lists]
        if not rows:
            raise ValueError("pad() needs at least one id list")
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        augment = self.colbert and side == "query" and self.model_cfg.query_augmentation
        width = int(lengths.max())
        if augment:
            width = max(width, self.model_cfg.query_max_length)
        fill = self.mask_id if augment else self.pad_id
        input_ids = np.full((len(rows), width), fill, dtype=np.int64)
        attend_masks = augment and self.model_cfg.attend_to_mask_tokens
        attention = np.ones((len(rows), width), dtype=np.int64) if attend_masks else np.zeros_like(input_ids)
        row_index = np.repeat(np.arange(len(rows)), lengths)
        starts = np.cumsum(lengths) - lengths
        cols = np.arange(int(lengths.sum())) - np.repeat(starts, lengths)
        if self.padding_side == "left" and not augment:
            cols += np.repeat(width - lengths, lengths)
        input_ids[row_index, cols] = np.concatenate(rows)
        attention[row_index, cols] = 1
        return torch.from_numpy(input_ids), torch.from_numpy(attention)

    def decode(self, ids) -> str:
        """Readable text of ids, special tokens and markers shown (for printing samples)."""
        return self._backend(None).decode([int(i) for i in ids], skip_special_tokens=False)

    def punctuation_ids(self) -> list[int]:
        """Ids of single-token punctuation symbols (string.punctuation), masked in ColBERT documents."""
        if self._punctuation is None:
            vocab = self._lookup_backend()
            ids: set[int] = set()
            for symbol in string.punctuation:
                token_id = vocab.token_to_id(symbol)
                if token_id is not None and token_id != self.unk_id:
                    ids.add(int(token_id))
                encoded = vocab.encode(symbol, add_special_tokens=False).ids
                if len(encoded) == 1 and encoded[0] != self.unk_id:
                    ids.add(int(encoded[0]))
            self._punctuation = sorted(ids)
        return list(self._punctuation)

    # -- identity -------------------------------------------------------------------------------------
    def fingerprint(self) -> dict:
        """JSON-able identity of the id mapping: tokenizer files' sha256 and every setting that shapes ids.

        Two tokenizers give the same ids for the same text iff their fingerprints are equal. Example keys:
        ``{"format": 1, "files": {"vocab.txt": "ab12..."}, "kind": "colbert", "query_max_length": 32, ...}``
        """
        cfg = self.model_cfg
        return {
            "format": FINGERPRINT_FORMAT,
            "files": dict(self._file_hashes),
            "vocab_size": self.vocab_size,
            "kind": cfg.kind,
            "query_max_length": cfg.query_max_length,
            "doc_max_length": cfg.doc_max_length,
            "query_prefix": cfg.query_prefix,
            "doc_prefix": cfg.doc_prefix,
            "query_marker": cfg.query_marker if self.colbert else None,
            "doc_marker": cfg.doc_marker if self.colbert else None,
            "marker_ids": self.marker_ids,
            "special_prefix_ids": self.prefix_ids,
            "special_suffix_ids": self.suffix_ids,
        }

    def with_settings(self, **changes) -> TextTokenizer:
        """A tokenizer for the same model with some settings changed (e.g. ``doc_max_length=180``)."""
        return TextTokenizer(dataclasses.replace(self.model_cfg, **changes), self.model_path)


def fingerprint_differences(expected: dict, actual: dict) -> list[str]:
    """Human-readable differences between two fingerprints (empty when they match)."""
    out = []
    for key in sorted(set(expected) | set(actual)):
        if expected.get(key) != actual.get(key):
            if key == "files":
                names = sorted(set(expected.get(key, {})) | set(actual.get(key, {})))
                changed = [n for n in names if expected.get(key, {}).get(n) != actual.get(key, {}).get(n)]
                out.append(f"tokenizer files differ: {', '.join(changed)}")
            else:
                out.append(f"{key}: {expected.get(key)!r} != {actual.get(key)!r}")
    return out
