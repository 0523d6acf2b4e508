"""Recognise what kind of model folder a path holds and derive the effective model settings.

Four layouts are understood (checked in this order):

- ``embedctl``: a folder written by :meth:`Encoder.save` (has ``embedctl_model.json``); its card decides
  kind, pooling, normalize, dim, markers, prefixes, mask_punctuation and query_augmentation.
- ``stanford``: a Stanford ColBERT checkpoint (``bert.*`` weights plus ``linear.weight``); always ColBERT,
  dim from ``linear.weight``.
- ``pylate``: a PyLate ColBERT folder (sentence-transformers modules with a bias-free Dense projection and
  query/document prefixes); always ColBERT, markers = its prefixes, expansion settings from its config.
- ``sentence-transformers``: a folder with ``modules.json``; pooling is read from its Pooling module.
- ``hf``: any other folder with ``config.json`` (a plain Hugging Face model).

Nothing here imports torch at module level, so the tokenizer side stays light.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from embedctl.config.sections.model import ModelConfig
from embedctl.errors import EmbedctlError
from embedctl.util.io import read_json

CARD_NAME = "embedctl_model.json"
CARD_FORMAT = 1
COLBERT_LINEAR_NAME = "colbert_linear.safetensors"
KEY = "model.name_or_path"

# Settings a checkpoint's card may fix (lengths, device, dropout and trust_remote_code stay with the config).
CARD_FIELDS = (
    "kind", "pooling", "normalize", "dim", "query_marker", "doc_marker", "query_prefix", "doc_prefix",
    "mask_punctuation", "query_augmentation", "attend_to_mask_tokens",
)


DAMAGED_HINT = f"the model folder is damaged; save it again or point `{KEY}` at another folder"


def read_card(path: str | Path) -> dict | None:
    """The embedctl model card of a checkpoint folder, or None for other layouts."""
    card_path = Path(path) / CARD_NAME
    if not card_path.is_file():
        return None
    card = read_json(card_path, "embedctl model card", DAMAGED_HINT)
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
        raise EmbedctlError(
            f"`{KEY}`: {card_path} has format {card.get('format') if isinstance(card, dict) else '?'}, "
            f"this embedctl reads format {CARD_FORMAT}",
            hint="use the embedctl version that wrote the checkpoint, or re-save it",
        )
    return card


def st_modules(path: str | Path) -> list[dict] | None:
    """The entries of a sentence-transformers ``modules.json``, or None."""
    modules_path = Path(path) / "modules.json"
    if not modules_path.is_file():
        return None
    modules = read_json(modules_path, "sentence-transformers modules.json", DAMAGED_HINT)
    return modules if isinstance(modules, list) else None


def transformer_dir(path: str | Path) -> Path:
    """The folder holding the HF weights/tokenizer (old sentence-transformers put them in ``0_Transformer``)."""
    path = Path(path)
    for module in st_modules(path) or []:
        if str(module.get("type", "")).endswith("Transformer") and module.get("path"):
            sub = path / module["path"]
            if (sub / "config.json").is_file():
                return sub
    return path


def st_pooling(path: str | Path) -> str | None:
    """Pooling mode from a sentence-transformers Pooling module config (cls | mean | last), or None."""
    for module in st_modules(path) or []:
        if str(module.get("type", "")).endswith("Pooling"):
            config_path = Path(path) / module.get("path", "1_Pooling") / "config.json"
            if not config_path.is_file():
                return None
            cfg = read_json(config_path, "sentence-transformers pooling config", DAMAGED_HINT)
            mode = cfg.get("pooling_mode")  # sentence-transformers >= 6 writes one string
            if isinstance(mode, str):
                return {"cls": "cls", "mean": "mean", "lasttoken": "last"}.get(mode)
            if cfg.get("pooling_mode_cls_token"):
                return "cls"
            if cfg.get("pooling_mode_lasttoken"):
                return "last"
            if cfg.get("pooling_mode_mean_tokens"):
                return "mean"
            return None
    return None


def pylate_settings(path: str | Path) -> dict | None:
    """Settings of a PyLate ColBERT folder (sentence-transformers with a Dense projection and query/document
    prefixes in config_sentence_transformers.json), or None for other folders."""
    st_config = Path(path) / "config_sentence_transformers.json"
    if not st_config.is_file() or pylate_dense_dir(path) is None:
        return None
    cfg = read_json(st_config, "sentence-transformers config", DAMAGED_HINT)
    if not isinstance(cfg, dict) or "query_prefix" not in cfg or "document_prefix" not in cfg:
        return None
    return {
        "kind": "colbert",
        "query_marker": str(cfg["query_prefix"]).strip(),
        "doc_marker": str(cfg["document_prefix"]).strip(),
        "query_augmentation": bool(cfg.get("do_query_expansion", True)),
        "attend_to_mask_tokens": bool(cfg.get("attend_to_expansion_tokens", False)),
        "mask_punctuation": bool(cfg.get("skiplist_words", True)),
    }


def pylate_dense_dir(path: str | Path) -> Path | None:
    """The folder of the first sentence-transformers Dense module, or None."""
    for module in st_modules(path) or []:
        if str(module.get("type", "")).endswith("Dense") and module.get("path"):
            return Path(path) / module["path"]
    return None


def _safetensors_keys(file: Path) -> list[str]:
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="np") as fh:  # keys only: no torch import on the tokenizer path
            return list(fh.keys())
    except Exception as exc:  # safetensors' own error type (a header cut short): named in words, with the file
        raise EmbedctlError(f"{file}: the .safetensors file is damaged or incomplete ({exc})",
                            hint="copy the model folder again, or point model.name_or_path at a complete one") from exc


def short_reason(exc: Exception) -> str:
    """One line about why torch.load refused a file (its messages run to many lines)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    detail = next((line for line in lines if "Unsupported global" in line), lines[0] if lines else "")
    detail = detail.split(". Please use")[0]  # torch's advice to allow-list globals is not ours to give
    return f"{type(exc).__name__}: {detail[:300]}"


def _bin_keys(file: Path) -> list[str]:
    import torch

    try:
        try:
            state = torch.load(str(file), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:  # legacy (non-zip) serialisation cannot be memory-mapped
            state = torch.load(str(file), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise EmbedctlError(
            f"`{KEY}`: {file} could not be read as plain tensors ({short_reason(exc)})",
            hint="only tensor-only pytorch_model.bin files are read (never arbitrary pickles); convert it to safetensors",
        ) from exc
    return list(state.keys()) if isinstance(state, dict) else []


def stanford_weights(path: str | Path) -> Path | None:
    """The weights file of a Stanford ColBERT layout folder (``bert.*`` + ``linear.weight``), or None."""
    path = Path(path)
    if (path / CARD_NAME).is_file():
        return None
    for name, keys_of in (("model.safetensors", _safetensors_keys), ("pytorch_model.bin", _bin_keys)):
        file = path / name
        if file.is_file():
            keys = keys_of(file)
            if "linear.weight" in keys and any(k.startswith("bert.") for k in keys):
                return file
            return None
    return None


def detect_layout(path: str | Path) -> str:
    """One of ``embedctl``, ``stanford``, ``pylate``, ``sentence-transformers``, ``hf`` (module docstring)."""
    if (Path(path) / CARD_NAME).is_file():
        return "embedctl"
    if stanford_weights(path) is not None:
        return "stanford"
    if pylate_settings(path) is not None:
        return "pylate"
    if st_modules(path) is not None:
        return "sentence-transformers"
    return "hf"


def effective_config(model_cfg: ModelConfig, path: str | Path, layout: str | None = None) -> ModelConfig:
    """``model_cfg`` with what the model folder itself decides applied (see the module docstring)."""
    layout = layout or detect_layout(path)
    changes: dict[str, Any] = {}
    if layout == "embedctl":
        card = read_card(path) or {}
        changes = {k: card[k] for k in CARD_FIELDS if k in card}
    elif layout == "stanford":
        changes = {"kind": "colbert"}
    elif layout == "pylate":
        changes = pylate_settings(path) or {}
    elif layout == "sentence-transformers" and model_cfg.kind == "biencoder":
        pooling = st_pooling(path)
        if pooling is not None:
            changes["pooling"] = pooling
    return dataclasses.replace(model_cfg, **changes) if changes else model_cfg
