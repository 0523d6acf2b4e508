"""The models prebatch runs besides the one being trained: the hard-negative miner and the teacher.

Their kind (bi-encoder or ColBERT) comes from the model itself, never from the training config: a plain
Hugging Face / sentence-transformers model (the `minilm` alias included) is a bi-encoder, an embedctl
checkpoint says its kind in its card, a Stanford or PyLate folder is a ColBERT. So
``prebatch.mine_model=minilm`` under a ColBERT config mines with the bi-encoder the name denotes.

Example::

    cfg = helper_model_config(loaded.cfg.model, "minilm")       # kind biencoder whatever model.kind says
    encoder = load_encoder(cfg)
    q_items, d_items = items_for(encoder, q_tokens, d_tokens, qcache)   # cached ids, or texts decoded
"""

from __future__ import annotations

import dataclasses

import numpy as np

from embedctl.config.sections.model import ModelConfig
from embedctl.data.pretokenize import make_tokenizer

# Settings of the training config a helper model keeps whatever its name: they concern this machine
# and the text lengths, not what the model is.
_KEPT = ("query_max_length", "doc_max_length", "device", "native_bert", "trust_remote_code", "encoder_backend")


def helper_model_config(model: ModelConfig, name: str | None) -> ModelConfig:
    """Settings to load helper model ``name`` (None: ``model.name_or_path``) with.

    The same model as the training config's keeps that config's settings (pooling, prefixes); another
    model starts from the defaults. Either way ``kind`` starts as ``biencoder`` and only the model
    folder itself (embedctl card, Stanford or PyLate layout) can make it ``colbert``
    (:func:`embedctl.models.layout.effective_config`, applied by ``load_encoder``).
    """
    name = name or model.name_or_path
    if name == model.name_or_path:
        return dataclasses.replace(model, kind="biencoder", matryoshka_dims=[])
    return ModelConfig(name_or_path=name, **{k: getattr(model, k) for k in _KEPT})


def decode_for_model(tokens: list[np.ndarray], cache_tokenizer, cache_model: dict) -> list[str]:
    """Texts back from cached ids (when the helper model tokenizes differently): specials, markers and
    the instruction prefix are removed."""
    side_markers = [m for m in (cache_model.get("query_marker"), cache_model.get("doc_marker")) if m]
    prefixes = [p for p in (cache_model.get("query_prefix"), cache_model.get("doc_prefix")) if p]
    out = []
    for ids in tokens:
        text = cache_tokenizer.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)
        for m in side_markers:
            text = text.replace(m, "")
        text = text.strip()
        for p in prefixes:
            if text.lower().startswith(p.strip().lower()):
                text = text[len(p.strip()):].strip()
        out.append(text)
    return out


def items_for(encoder, model: ModelConfig, q_tokens: list[np.ndarray], d_tokens: list[np.ndarray],
              qcache) -> tuple[list, list]:
    """(query items, document items) ``encoder`` accepts for cached ids: the ids themselves when its
    tokenizer makes the same ids as the cache's (lengths aside: cached ids are already truncated), else
    the texts decoded from the ids."""
    lengths = ("query_max_length", "doc_max_length")
    have = {k: v for k, v in encoder.tokenizer.fingerprint().items() if k not in lengths}
    want = {k: v for k, v in qcache.fingerprint["tokenizer"].items() if k not in lengths}
    if have == want:
        return [t.tolist() for t in q_tokens], [t.tolist() for t in d_tokens]
    fields = {f.name for f in dataclasses.fields(model)}
    cache_cfg = dataclasses.replace(model, **{k: v for k, v in qcache.model.items() if k in fields})
    cache_tok = make_tokenizer(cache_cfg)
    return decode_for_model(q_tokens, cache_tok, qcache.model), decode_for_model(d_tokens, cache_tok, qcache.model)
