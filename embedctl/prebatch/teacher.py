"""Teacher scores for knowledge distillation: a model scores every (query, document) pair of each batch.

``prebatch.teacher`` names any model embedctl loads; its kind comes from the model itself
(:mod:`embedctl.prebatch.helper_models`): a bi-encoder scores by dot product of its (normalised)
vectors, a ColBERT by exact MaxSim. Every query and document of the batches is encoded once; each
batch then gets a float32 matrix ``[queries, documents]`` of raw scores, which the batch writer stores as
the ``TEACHER_SCORE`` column of relations.parquet (docs/formats.md).

Example::

    teacher = Teacher.load(loaded.cfg.model, "minilm")
    teacher.encode(q_rows, d_rows, q_tokens, d_tokens, qcache, batch_size=32)  # rows: cache positions
    scores = teacher.scores(q_rows_of_batch, d_rows_of_batch)                   # float32 [Q, D]
"""

from __future__ import annotations

import numpy as np

from embedctl.models.encoder import colbert_scores, load_encoder
from embedctl.prebatch.helper_models import helper_model_config, items_for


class Teacher:
    """A loaded teacher model and the vectors of the texts it was asked to encode."""

    def __init__(self, encoder, model_cfg):
        self.encoder, self.model_cfg = encoder, model_cfg
        self.kind = encoder.kind
        self._q: dict[int, int] = {}
        self._d: dict[int, int] = {}

    @classmethod
    def load(cls, model_cfg, name: str, texts: int = 0) -> Teacher:
        """``texts``: how many queries and documents it will encode (``model.encoder_backend=auto``)."""
        return cls(load_encoder(helper_model_config(model_cfg, name), texts=texts), model_cfg)

    def describe(self) -> dict:
        """What metadata.json records about the teacher."""
        cfg = self.encoder.model_cfg
        return {"model": cfg.name_or_path, "kind": self.kind, "dim": self.encoder.dim,
                "query_max_length": cfg.query_max_length, "doc_max_length": cfg.doc_max_length,
                "score": "MaxSim" if self.kind == "colbert" else "dot product"}

    def encode(self, q_rows: list[int], d_rows: list[int], q_tokens, d_tokens, qcache, batch_size: int) -> None:
        """Encode the queries / documents at cache positions ``q_rows`` / ``d_rows`` (each once)."""
        import torch

        q_rows, d_rows = sorted(set(q_rows)), sorted(set(d_rows))
        self._q = {r: i for i, r in enumerate(q_rows)}
        self._d = {r: i for i, r in enumerate(d_rows)}
        q_items, d_items = items_for(self.encoder, self.model_cfg, [q_tokens[r] for r in q_rows],
                                     [d_tokens[r] for r in d_rows], qcache)
        self.Q = torch.from_numpy(self.encoder.encode_queries(q_items, batch_size=batch_size))
        if self.kind == "biencoder":
            self.D = torch.from_numpy(self.encoder.encode_documents(d_items, batch_size=batch_size))
            return
        vectors, doclens = self.encoder.encode_documents(d_items, batch_size=batch_size)
        self._vectors = torch.from_numpy(vectors)
        self._offsets = np.concatenate([[0], np.cumsum(doclens)])

    def scores(self, q_rows: list[int], d_rows: list[int]) -> np.ndarray:
        """float32 [len(q_rows), len(d_rows)]: the teacher's score of every pair (cache positions)."""
        import torch

        Q = self.Q[[self._q[r] for r in q_rows]]
        docs = [self._d[r] for r in d_rows]
        with torch.inference_mode():
            if self.kind == "biencoder":
                return (Q @ self.D[docs].T).numpy().astype(np.float32)
            lens = [int(self._offsets[i + 1] - self._offsets[i]) for i in docs]
            D = torch.zeros((len(docs), max(lens, default=1) or 1, self._vectors.shape[1]))
            mask = torch.zeros(D.shape[:2], dtype=torch.bool)
            for j, (i, n) in enumerate(zip(docs, lens, strict=True)):
                D[j, :n] = self._vectors[self._offsets[i]: self._offsets[i] + n]
                mask[j, :n] = True
            return colbert_scores(Q, D, mask).numpy().astype(np.float32)
