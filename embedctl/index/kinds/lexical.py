"""The lexical kind (``index.kind: lexical``): the BM25 side alone, no vectors (embedctl.index.lexical).

The build driver writes the lexical side of every index built from text (``index.lexical``); this kind
encodes nothing and writes no arrays of its own, so the index is documents, fields and BM25 only,
searched with ``search.mode=lexical``. Add, delete and compact go through the same paths as for every
kind (the lexical side is written per segment there); nothing is ever encoded. The model of the config
is recorded (loaded once at build, never used).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embedctl.index.generations import Generation, Segment
from embedctl.index.kinds.base import BuildJob, Failpoint, IndexKind
from embedctl.index.ledger import BuildLedger

LEXICAL_BACKEND = {"name": "bm25s", "precision": "fp32"}


@dataclass(frozen=True)
class LexicalPlan:
    backend_record: dict[str, str]


class LexicalKind(IndexKind):
    name = "lexical"
    model_kind = "none"  # indexes no model's output: index_kind picks it only when asked by name
    model_label = "no"
    encodes = False

    def plan(self, icfg: Any, encoder: Any, num_docs: int, engine: dict[str, Any]) -> LexicalPlan:
        return LexicalPlan(dict(LEXICAL_BACKEND))

    def already_built(self, ledger: BuildLedger, folder: Path) -> bool:
        return False

    def build(self, job: BuildJob, plan: Any) -> tuple[dict[str, Any], dict[str, float], dict[str, Any]]:
        job.bar.advance(job.num_docs)  # nothing to encode: the driver writes the lexical side itself
        return {"engine": "bm25s"}, {}, {"encoded_docs": 0, "resumed": False}

    def follow(self, job: BuildJob) -> None:
        return None  # other ranks have nothing to encode

    def write_segment(self, gen: Generation, seg: Segment, encoded: Any, dim: int, opts: Any, failpoint: Failpoint
                      ) -> tuple[None, list[str]]:
        return None, []  # the add path writes the segment's lexical side (index.lexical)

    def merge_segments(self, gen: Generation, seg: Segment, masks: list[np.ndarray], failpoint: Failpoint
                       ) -> list[str]:
        return []  # compact writes the merged segment's lexical side
