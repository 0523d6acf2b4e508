"""Checks of the pre-batched folder against the run, before any training step or output write.

The token ids in a batch folder are what the model sees: batches pretokenized for another tokenizer,
model kind, markers, prefixes or lengths (e.g. a ColBERT trained on batches made for the bi-encoder: no
[unused0]/[unused1] markers, 64-token queries) would train silently on the wrong inputs. A distilling
loss needs the teacher scores that `prebatch.teacher` stores.
"""

from __future__ import annotations

import dataclasses

from embedctl.errors import EmbedctlError
from embedctl.models.tokenization import TextTokenizer, fingerprint_differences


def _describe(model: dict) -> str:
    keys = ("name_or_path", "kind", "query_max_length", "doc_max_length")
    return ", ".join(f"{k}={model[k]}" for k in keys if k in model) or "unknown settings"


def check_batches(metadata: dict, data_path: str, model_cfg, loss: str) -> None:
    """Refuse batches made with another tokenizer or model settings than ``model_cfg``, and a distilling
    ``loss`` without teacher scores. Folders without recorded fingerprints (hand-made) are not checked."""
    if loss != "infonce" and "teacher" not in metadata:
        raise EmbedctlError(
            f"train.loss={loss} needs teacher scores, and the batches in {data_path} have none",
            hint="rebuild them with `embedctl prebatch CFG prebatch.teacher=MODEL --overwrite`, or set train.loss=infonce",
        )
    made_with = (metadata.get("sources") or {}).get("queries_fingerprint", {}).get("tokenizer")
    if not made_with:
        return
    tokenizer = TextTokenizer(model_cfg)  # the model folder's own settings applied; no weights loaded
    diff = fingerprint_differences(made_with, tokenizer.fingerprint())
    if diff:
        trained = dataclasses.asdict(model_cfg) | {"kind": tokenizer.model_cfg.kind}
        made_model = metadata.get("model") or {}
        lengths = [f"model.{k}={made_model[k]}" for k in ("query_max_length", "doc_max_length")
                   if k in made_model and made_model[k] != trained.get(k)]
        keep = f" (e.g. `{' '.join(lengths)}`)" if lengths else ""
        raise EmbedctlError(
            f"the batches in {data_path} were tokenized for another model than the one being trained: batches made "
            f"for ({_describe(metadata.get('model') or {})}), training ({_describe(trained)}); differences "
            f"(batches != training): " + "; ".join(diff[:6]),
            hint="pass the training config to every step: `embedctl pretokenize CFG --input ... --overwrite` and "
                 "`embedctl prebatch CFG --input ... --overwrite` (docs/getting-started.md), or train with the model "
                 f"settings the batches were made with{keep}",
        )
