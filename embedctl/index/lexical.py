"""The lexical side of an index: BM25 over each segment's texts, with bm25s (sparse matrices, numpy).

Every index built from text keeps one by default (``index.lexical: true``): the build writes it for the
base segment, ``index add`` for the new segment (or the re-clustered one), ``index compact`` for the
merged one, each in ``<segment>/lexical/`` (:data:`~embedctl.index.files.LEXICAL_FILES`) before the
commit, listed in it like every other segment file; deletes are the segment's tombstones. So vectors,
documents, fields and the lexical side are always one version.

What is indexed: the text the encoder reads (``title + " " + text``), tokenized by bm25s's
scikit-learn-style tokenizer with the settings of :data:`TOKENIZER` (lowercase, words of 2+ word
characters, English stopwords; no stemmer: neither PyStemmer nor snowballstemmer is installed), scored
with BM25 (Lucene's variant, k1 = 1.5, b = 0.75, as bm25s and BEIR's Elasticsearch baseline).

Stored by embedctl, not by bm25s's ``save``: the eager score matrix (CSC: ``data``, ``indices``,
``indptr``) as .npy without pickles (temp name + rename), the vocabulary and the parameters as JSON.

Statistics are per segment (document frequencies, average length): a fresh build and a compacted index
are one segment, scored exactly as bm25s scores the whole collection; after adds, each added segment's
scores use its own statistics until the next compact (a known approximation, as a search over several
bm25s indexes would have).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.errors import EmbedctlError
from embedctl.index.files import LEXICAL_DIR
from embedctl.util.io import load_npy, read_json, save_npy, write_json

TOKENIZER = {"lower": True, "token_pattern": r"(?u)\b\w\w+\b", "stopwords": "en", "stemmer": None}
BM25_PARAMS = {"method": "lucene", "k1": 1.5, "b": 0.75}
_ARRAYS = ("data", "indices", "indptr")


def tokenize(texts: Sequence[str]) -> Any:
    import bm25s

    return bm25s.tokenize(list(texts), lower=TOKENIZER["lower"], token_pattern=TOKENIZER["token_pattern"],
                          stopwords=TOKENIZER["stopwords"], stemmer=None, return_ids=True, show_progress=False)


def query_tokens(text: str) -> list[str]:
    import bm25s

    out = bm25s.tokenize([text], lower=TOKENIZER["lower"], token_pattern=TOKENIZER["token_pattern"],
                         stopwords=TOKENIZER["stopwords"], stemmer=None, return_ids=False, show_progress=False)
    return list(out[0]) if out else []


def has_lexical(gen: Any) -> bool:
    """Whether the generation keeps a lexical side (every segment then has one)."""
    return bool(gen.segments) and all(s.lexical is not None for s in gen.segments)


def segment_texts(docs_path: Path) -> list[str]:
    """What the encoder reads of every row of a documents table (title joined), in order."""
    from embedctl.index.collection import DocTexts

    texts = DocTexts(docs_path)
    return texts[0:len(texts)]


def write_segment_lexical(gen: Any, seg: Any) -> list[str]:
    """``seg``'s lexical side from its documents table (sets ``seg.lexical``); returns the files written."""
    seg.lexical, files = write_lexical(gen.index_dir, seg.dir, segment_texts(gen.path(seg.docs)))
    return files


def write_lexical(index_dir: Path, seg_dir: str, texts: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """Index ``texts`` (one per row of the segment, in order) into ``<seg_dir>/lexical/``; returns (the
    segment's ``lexical`` description, the files written relative to the index)."""
    import bm25s

    rel_dir = f"{seg_dir}/{LEXICAL_DIR}" if seg_dir else LEXICAL_DIR
    folder = Path(index_dir) / rel_dir
    retriever = bm25s.BM25(**BM25_PARAMS)
    tokens = tokenize(texts)
    if tokens.vocab:
        retriever.index(tokens, show_progress=False)
        arrays, vocab = retriever.scores, retriever.vocab_dict
    else:  # no document has a word of 2+ characters outside the stopwords (bm25s refuses an empty vocabulary)
        arrays = {"data": np.zeros(0, np.float32), "indices": np.zeros(0, np.int32), "indptr": np.zeros(1, np.int32)}
        vocab = {}
    written = []
    for name in _ARRAYS:
        save_npy(folder / f"{name}.npy", np.asarray(arrays[name]))
        written.append(f"{rel_dir}/{name}.npy")
    write_json(folder / "vocab.json", {str(k): int(v) for k, v in vocab.items()})
    params = {**BM25_PARAMS, "num_docs": len(texts), "dtype": str(retriever.dtype),
              "int_dtype": str(retriever.int_dtype), "idf_method": retriever.idf_method}
    write_json(folder / "params.json", params)
    written += [f"{rel_dir}/vocab.json", f"{rel_dir}/params.json"]
    description = {"engine": "bm25s", "tokenizer": dict(TOKENIZER), **BM25_PARAMS, "num_docs": len(texts),
                   "vocabulary": len(vocab)}
    return description, written


class LexicalSegment:
    """One segment's BM25 side, loaded into a bm25s object (no pickles: the .npy and JSON above)."""

    def __init__(self, index_dir: Path, rel_dir: str, rows: int):
        import bm25s

        folder = Path(index_dir) / rel_dir
        try:
            params = read_json(folder / "params.json", what="lexical parameters")
            vocab = read_json(folder / "vocab.json", what="lexical vocabulary")
        except FileNotFoundError as exc:
            raise EmbedctlError(f"{folder}: missing lexical index files",
                                hint="the index is damaged: rebuild it (`embedctl index ... --overwrite`)") from exc
        num_docs = int(params["num_docs"])
        if num_docs != rows:
            raise EmbedctlError(f"{folder}: the lexical index holds {num_docs} documents, the segment {rows}",
                                hint="the index is damaged: rebuild it (`embedctl index ... --overwrite`)")
        self.bm25 = bm25s.BM25(method=params["method"], k1=params["k1"], b=params["b"],
                               idf_method=params.get("idf_method"), dtype=params.get("dtype", "float32"),
                               int_dtype=params.get("int_dtype", "int32"))
        self.bm25.vocab_dict = vocab
        self.bm25.unique_token_ids_set = set(vocab.values())
        self.bm25.scores = {name: load_npy(folder / f"{name}.npy", mmap=False, what="lexical array")
                            for name in _ARRAYS}
        self.bm25.scores["num_docs"] = num_docs
        self.bm25.nonoccurrence_array = None  # lucene BM25 has none (BM25L and BM25+ would)
        self.rows = rows

    def scores(self, tokens: list[str]) -> np.ndarray:
        """BM25 score of every row (float32 [rows]; 0 where no query term occurs)."""
        ids = self.bm25.get_tokens_ids(tokens)
        if not ids:
            return np.zeros(self.rows, np.float32)
        return np.asarray(self.bm25.get_scores_from_ids(ids), dtype=np.float32)
