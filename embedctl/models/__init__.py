"""Encoders shared by training, indexing, search and hard-negative mining.

Public names (imported lazily so that `import embedctl.models.hub` stays free of torch/transformers):
``TextTokenizer``, ``token_id_dtype``, ``fingerprint_differences`` (tokenization); ``Encoder``,
``EncoderOutput``, ``load_encoder``, ``colbert_scores`` (encoder); ``save_stanford`` (checkpoint).
"""

from __future__ import annotations

import importlib

_LAZY = {
    "TextTokenizer": "embedctl.models.tokenization",
    "token_id_dtype": "embedctl.models.tokenization",
    "fingerprint_differences": "embedctl.models.tokenization",
    "Encoder": "embedctl.models.encoder",
    "EncoderOutput": "embedctl.models.encoder",
    "load_encoder": "embedctl.models.encoder",
    "colbert_scores": "embedctl.models.encoder",
    "save_stanford": "embedctl.models.checkpoint",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'embedctl.models' has no attribute {name!r}")
