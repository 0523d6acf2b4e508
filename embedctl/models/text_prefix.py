"""Truncated token ids from a prefix of each long text: the same ids, without tokenizing what truncation drops.

A document is truncated to its budget of ids (``doc_max_length`` less the special and marker ids: 177 for a
ColBERT document at 180), but the Rust tokenizer normalises, splits and tokenizes the whole text first: a SciFact
abstract is ~335 ids of text for 177 kept, so half of a build's tokenizing (1.25 s of 5,183 documents on two
cores) produced ids that were thrown away. Here a text longer than ``CUT_CHARS_PER_ID`` characters per id of the
budget is tokenized from its start up to a space instead, and from whole when that prefix gives fewer ids than
the budget (then it holds too few to decide).

Why the ids are the same: when the tokenizer splits every text at every ASCII space before its model runs
(:func:`prefix_safe`), and its normaliser maps each character on its own, the pieces of a prefix that ends just
before a space are the first pieces of the whole text, each tokenized alike; so the prefix's ids are the first
ids of the text, and once the prefix has at least ``budget`` of them, the first ``budget`` are the text's
truncated ids. A tokenizer outside the cases named in :func:`prefix_safe` (a custom split pattern, a normaliser
that replaces strings, an added token holding a space, ...) always tokenizes whole texts.

Example (the bundled model: BertNormalizer, BertPreTokenizer)::

    safe = prefix_safe(backend_json)                       # True
    truncated_ids(backend, texts, budget=177, safe=safe)   # the ids backend.encode_batch(texts) gives
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

# characters of a text per id of the budget above which it is cut: SciFact's abstracts take ~4.5 characters an
# id (BERT's WordPiece), so at 6 0.7% of them need the whole text after all; tokenizing all of SciFact's
# documents (doc_max_length 180, two cores) took 0.87 s instead of 1.24 (4: 1.61 s, 84% tokenized twice; 8: 1.02)
CUT_CHARS_PER_ID = 6

# normalisers that map each character on its own (a prefix normalises to a prefix)
CHARACTER_NORMALIZERS = {"BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "StripAccents"}
# pre-tokenizers that split at every ASCII space, and others that only split pieces further
SPACE_SPLITTERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit", "ByteLevel", "Metaspace"}
FURTHER_SPLITTERS = {"Digits", "Punctuation", "UnicodeScripts"}


def prefix_safe(backend_json: str) -> bool:
    """Whether a tokenizer (its ``tokenizer.json`` text) gives a text's first ids from any prefix of it that ends
    before an ASCII space: its normaliser (if any) maps characters one by one, its pre-tokenizer splits at every
    space (ByteLevel with its regex, Metaspace with split on), and none of its added tokens holds whitespace."""
    spec = json.loads(backend_json)
    if not _normalizer_safe(spec.get("normalizer")) or not _splits_at_spaces(spec.get("pre_tokenizer")):
        return False
    return not any(any(ch.isspace() for ch in str(tok.get("content", ""))) for tok in spec.get("added_tokens") or [])


def _normalizer_safe(node: dict[str, Any] | None) -> bool:
    if node is None:
        return True
    if node.get("type") == "Sequence":
        return all(_normalizer_safe(child) for child in node.get("normalizers", []))
    return node.get("type") in CHARACTER_NORMALIZERS


def _splits_at_spaces(node: dict[str, Any] | None) -> bool:
    """True when ``node`` splits at every ASCII space and only splits (a Sequence: every step a known
    splitter, at least one of them at spaces)."""
    if node is None:
        return False
    if node.get("type") == "Sequence":
        steps = node.get("pretokenizers", [])
        return all(_space_splitter(s) or s.get("type") in FURTHER_SPLITTERS for s in steps) and \
            any(_space_splitter(s) for s in steps)
    return _space_splitter(node)


def _space_splitter(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    if kind == "ByteLevel":
        return bool(node.get("use_regex", True))
    if kind == "Metaspace":
        return bool(node.get("split", True))
    return kind in SPACE_SPLITTERS


def cut_before_space(text: str, limit: int) -> str | None:
    """``text`` up to the last ASCII space within its first ``limit`` characters, trailing spaces dropped;
    None when it is no longer than ``limit`` or has no such space (it is tokenized whole).

    >>> cut_before_space("one two  three four", 12)
    'one two'
    """
    if len(text) <= limit:
        return None
    cut = text.rfind(" ", 0, limit + 1)
    prefix = text[:cut].rstrip(" ") if cut > 0 else ""
    return prefix or None


def truncated_ids(backend: Any, texts: list[str], budget: int | None, safe: bool | Callable[[], bool]
                  ) -> list[list[int]]:
    """``[e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]`` for a ``tokenizers.Tokenizer``
    truncating to ``budget`` ids (None: not truncating), long texts read from a prefix when ``safe`` (the module
    docstring): the same ids. ``safe`` may be a function, asked only when some text is long enough to cut (a
    query's never is: :func:`prefix_safe` parses the tokenizer's JSON, ~9 ms for the bundled one)."""
    if budget is None or safe is False:
        return _ids(backend, texts)
    limit = CUT_CHARS_PER_ID * int(budget)
    prefixes = [cut_before_space(t, limit) for t in texts]
    if all(p is None for p in prefixes) or not (safe() if callable(safe) else safe):
        return _ids(backend, texts)
    ids = _ids(backend, [t if p is None else p for t, p in zip(texts, prefixes, strict=True)])
    short = [i for i, p in enumerate(prefixes) if p is not None and len(ids[i]) < budget]
    for i, row in zip(short, _ids(backend, [texts[i] for i in short]), strict=True):
        ids[i] = row  # the prefix held fewer ids than the budget: the whole text decides
    return ids


def _ids(backend: Any, texts: list[str]) -> list[list[int]]:
    if not texts:
        return []
    if len(texts) == 1:  # no thread pool for one text (a query)
        return [backend.encode(texts[0], add_special_tokens=False).ids]
    return [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]
