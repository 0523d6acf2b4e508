"""A deterministic synthetic ColBERT-like encoder for tests and profiling of the numeric core.

Not a model: each document text seeds its own generator, picks a few "topics" (shared random unit
directions) and emits ``doclen`` L2-normalised token vectors scattered around them, the way real token
vectors cluster. Same text -> same vectors, whatever the batch. Queries are drawn near a document's topics.
"""

from __future__ import annotations

import hashlib

import numpy as np


class SyntheticEncoder:
    """Stands in for ``Encoder`` (kind colbert) where the model is not the point: ``encode_documents``.

    >>> enc = SyntheticEncoder(dim=16); v, n = enc.encode_documents(["a", "b"]); v.shape[0] == n.sum()
    True
    """

    kind = "colbert"

    def __init__(self, dim: int = 128, num_topics: int = 2048, mean_len: int = 157, noise: float = 0.6, seed: int = 0):
        self.dim, self.mean_len, self.noise = dim, mean_len, noise
        rng = np.random.default_rng(seed)
        t = rng.normal(size=(num_topics, dim)).astype(np.float32)
        self.topics = t / np.linalg.norm(t, axis=1, keepdims=True)
        self.calls = 0

    def _rng(self, text: str) -> np.random.Generator:
        return np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little"))

    def doc_topics(self, text: str) -> tuple[np.random.Generator, np.ndarray]:
        rng = self._rng(text)
        return rng, rng.choice(len(self.topics), size=6, replace=False)

    def _vectors(self, rng: np.random.Generator, topics: np.ndarray, n: int) -> np.ndarray:
        base = self.topics[rng.choice(topics, size=n)]
        v = base + self.noise * rng.normal(size=(n, self.dim)).astype(np.float32) / np.sqrt(self.dim)
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    def encode_documents(self, items, batch_size: int = 32, progress: bool = False):
        """list[str] -> (float32 [sum(doclens), dim], int64 doclens [n])."""
        self.calls += 1
        vecs, lens = [], []
        for text in items:
            text = text if isinstance(text, str) else " ".join(map(str, text))
            rng, topics = self.doc_topics(text)
            n = int(np.clip(rng.normal(self.mean_len, self.mean_len * 0.4), 4, 3 * self.mean_len))
            vecs.append(self._vectors(rng, topics, n))
            lens.append(n)
        if not vecs:
            return np.zeros((0, self.dim), np.float32), np.zeros(0, np.int64)
        return np.concatenate(vecs), np.asarray(lens, dtype=np.int64)

    def query_for(self, text: str, length: int = 32, seed: int = 0) -> np.ndarray:
        """float32 [length, dim] near the topics of document ``text`` (a query it should answer)."""
        _, topics = self.doc_topics(text)
        rng = np.random.default_rng(seed)
        return self._vectors(rng, topics[: 3], length)
