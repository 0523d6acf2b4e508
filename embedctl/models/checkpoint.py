"""Reading model weights from every supported layout, and writing embedctl checkpoints.

A checkpoint folder written by :func:`save_encoder`::

    config.json, model.safetensors          the HF backbone (save_pretrained, safetensors)
    tokenizer files                         copied byte for byte (token caches stay valid)
    embedctl_model.json                     kind, pooling, normalize, dim, markers, prefixes, lengths, ...
    colbert_linear.safetensors              ColBERT only: {"weight": [dim, hidden]}
    modules.json, sentence_bert_config.json, config_sentence_transformers.json, 1_Pooling/, 2_Normalize/
                                            bi-encoder only: loads with sentence_transformers.SentenceTransformer
    modules.json, sentence_bert_config.json, config_sentence_transformers.json, 1_Dense/
                                            ColBERT only: loads with PyLate's models.ColBERT (same vectors)

Exports for other systems: :func:`save_stanford` (colbert-ai's ``Checkpoint`` / ``Searcher``) and
:func:`save_pylate` (a PyLate folder without the embedctl card).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Protocol

import torch

from embedctl.config.sections.model import ModelConfig
from embedctl.errors import EmbedctlError
from embedctl.models.layout import (
    CARD_FORMAT,
    CARD_NAME,
    COLBERT_LINEAR_NAME,
    DAMAGED_HINT,
    KEY,
    pylate_dense_dir,
    short_reason,
    stanford_weights,
    transformer_dir,
)
from embedctl.models.native_bert import native_bert_from_state, try_native_bert
from embedctl.models.tokenization import TOKENIZER_FILES, TextTokenizer
from embedctl.util.atomic import write_json
from embedctl.util.fs import url_to_fs
from embedctl.util.io import damaged_json, read_json


class SavableEncoder(Protocol):
    """What the writers read of an :class:`embedctl.models.encoder.Encoder` (the encoder imports this
    module for its loaders and writers; this module never imports the encoder)."""

    backbone: torch.nn.Module
    linear: torch.nn.Linear | None
    tokenizer: TextTokenizer
    kind: str
    dim: int
    hidden_size: int
    model_cfg: ModelConfig


def _fail(path, exc: Exception, what: str) -> EmbedctlError:
    # safetensors' own error type says nothing a user can act on; its text (a header cut short) does
    reason = str(exc) if type(exc).__name__ == "SafetensorError" else f"{type(exc).__name__}: {exc}"
    if type(exc).__name__ == "SafetensorError":
        damaged = _damaged_safetensors(path)
        reason = f"{damaged or 'a .safetensors file'} is damaged or incomplete: {reason}"
    elif damaged := damaged_json(Path(path) / "config.json"):  # transformers says OSError for one cut short
        reason, what = damaged, "could not read the model's config.json"
    return EmbedctlError(
        f"`{KEY}` = {str(path)!r}: {what} ({reason})",
        hint="point model.name_or_path at a complete model folder (config.json + weights + tokenizer), "
        "or use the alias `minilm`",
    )


def _damaged_safetensors(path) -> Path | None:
    """The first .safetensors file under a model folder whose header does not read (a file cut short fails
    there: its header's offsets no longer cover the file), so a refusal names the file, not only the folder."""
    from safetensors import safe_open

    try:
        found = sorted(Path(path).rglob("*.safetensors")) if Path(path).is_dir() else []
    except OSError:
        return None
    for file in found:
        try:
            with safe_open(str(file), framework="np"):
                pass
        except Exception:  # safetensors' own error type: the file is the answer
            return file
    return None


@contextlib.contextmanager
def quiet_transformers():
    """Hide transformers' per-load "Loading weights" progress bar (embedctl prints its own progress)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def load_hf_backbone(path: str | Path, cfg: ModelConfig, *, native: bool = False) -> torch.nn.Module:
    """``AutoModel.from_pretrained`` of a HF / sentence-transformers / embedctl folder, in float32.

    ``native``: a standard BERT is built by :mod:`embedctl.models.native_bert` instead."""
    folder = transformer_dir(path)
    if native:
        model = try_native_bert(folder)
        if model is not None:
            return model
    from transformers import AutoModel

    try:
        with quiet_transformers():
            return AutoModel.from_pretrained(str(folder), trust_remote_code=cfg.trust_remote_code, dtype=torch.float32)
    except Exception as exc:
        raise _fail(path, exc, "could not load the model weights") from exc


def read_state_dict(file: Path) -> dict[str, torch.Tensor]:
    """Tensors of a safetensors file, or of a tensor-only .bin read with ``torch.load(weights_only=True)``."""
    try:
        if file.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(file))
        state = torch.load(str(file), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise EmbedctlError(
            f"`{KEY}`: {file} could not be read as plain tensors ({short_reason(exc)})",
            hint="only safetensors or tensor-only .bin files are read (never arbitrary pickles)",
        ) from exc
    if not isinstance(state, dict):
        raise _fail(file, TypeError("not a dict of tensors"), "could not read the weights file")
    return state


def _modern_key(key: str) -> str:
    """Old TF-style LayerNorm names (``gamma``/``beta``, as colbert-ai checkpoints often carry) -> weight/bias."""
    if "LayerNorm" in key:
        if key.endswith(".gamma"):
            return key[: -len("gamma")] + "weight"
        if key.endswith(".beta"):
            return key[: -len("beta")] + "bias"
    return key


def load_stanford(path: str | Path, cfg: ModelConfig, *, native: bool = False) -> tuple[torch.nn.Module, torch.Tensor]:
    """Backbone and ``linear.weight`` of a Stanford ColBERT folder (``bert.*`` + ``linear.weight`` keys)."""
    file = stanford_weights(path)
    state = read_state_dict(file)
    if "linear.weight" not in state:
        raise _fail(file, KeyError("linear.weight"), "the Stanford ColBERT weights have no projection")
    inner = {_modern_key(k[len("bert."):]): v for k, v in state.items() if k.startswith("bert.")}
    if native:
        raw = read_json(Path(path) / "config.json", "model config", DAMAGED_HINT)
        model = native_bert_from_state(raw, inner) if isinstance(raw, dict) else None
        if model is not None:
            return model, state["linear.weight"].to(torch.float32)
    from transformers import AutoConfig, AutoModel

    try:
        config = AutoConfig.from_pretrained(str(path), trust_remote_code=cfg.trust_remote_code)
        backbone = AutoModel.from_config(config, trust_remote_code=cfg.trust_remote_code, dtype=torch.float32)
    except Exception as exc:
        raise _fail(path, exc, "could not build the model from its config.json") from exc
    result = backbone.load_state_dict(inner, strict=False)
    missing = [k for k in result.missing_keys if not k.startswith("pooler.") and not k.endswith("position_ids")]
    unexpected = [k for k in result.unexpected_keys if not k.startswith("pooler.") and not k.endswith("position_ids")]
    if missing or unexpected:
        raise EmbedctlError(
            f"`{KEY}` = {str(path)!r}: the Stanford ColBERT weights in {file.name} do not fit its config.json "
            f"(missing: {missing[:5]}, unexpected: {unexpected[:5]})",
            hint="the folder must hold the config.json saved together with these weights",
        )
    return backbone, state["linear.weight"].to(torch.float32)


def load_pylate_projection(path: str | Path) -> torch.Tensor:
    """The bias-free Dense weight [dim, hidden] of a PyLate folder (its ``1_Dense`` module)."""
    folder = pylate_dense_dir(path)
    files = [folder / n for n in ("model.safetensors", "pytorch_model.bin") if (folder / n).is_file()]
    if not files:
        raise EmbedctlError(f"`{KEY}` = {str(path)!r}: the Dense module {folder.name} holds no weights",
                            hint="the PyLate folder is incomplete; save it again with PyLate")
    state = read_state_dict(files[0])
    config = folder / "config.json"
    activation = read_json(config, "PyLate Dense config", DAMAGED_HINT).get("activation_function", "") \
        if config.is_file() else ""
    weights = [k for k in state if k.endswith("weight")]
    if len(weights) != 1 or any(k.endswith("bias") for k in state) or (activation and not activation.endswith("Identity")):
        raise EmbedctlError(
            f"`{KEY}` = {str(path)!r}: the Dense module {folder.name} is not a bias-free linear projection "
            f"(tensors {sorted(state)}, activation {activation or '?'})",
            hint="only ColBERT projections (Linear without bias, identity activation) are supported",
        )
    return state[weights[0]].to(torch.float32)


def load_colbert_linear(path: str | Path) -> torch.Tensor:
    """The projection weight [dim, hidden] saved by :func:`save_encoder`."""
    file = Path(path) / COLBERT_LINEAR_NAME
    if not file.is_file():
        raise EmbedctlError(
            f"`{KEY}` = {str(path)!r}: the checkpoint says kind colbert but has no {COLBERT_LINEAR_NAME}",
            hint="the checkpoint is incomplete; use another step checkpoint or re-save the model",
        )
    state = read_state_dict(file)
    if "weight" not in state:
        raise _fail(file, KeyError("weight"), "the projection file has no `weight` tensor")
    return state["weight"].to(torch.float32)


def model_card(encoder: SavableEncoder) -> dict:
    """The embedctl_model.json content describing ``encoder``."""
    cfg = encoder.model_cfg
    return {
        "format": CARD_FORMAT,
        "kind": cfg.kind,
        "pooling": cfg.pooling,
        "normalize": cfg.normalize,
        "dim": encoder.dim,
        "hidden_size": encoder.hidden_size,
        "query_marker": cfg.query_marker,
        "doc_marker": cfg.doc_marker,
        "query_prefix": cfg.query_prefix,
        "doc_prefix": cfg.doc_prefix,
        "query_max_length": cfg.query_max_length,
        "doc_max_length": cfg.doc_max_length,
        "mask_punctuation": cfg.mask_punctuation,
        "query_augmentation": cfg.query_augmentation,
        "attend_to_mask_tokens": cfg.attend_to_mask_tokens,
        "matryoshka_dims": list(cfg.matryoshka_dims),
        "base_model": cfg.name_or_path,
    }


def _write_sentence_transformers(encoder: SavableEncoder, folder: Path) -> None:
    """modules.json + pooling config (the classic layout every sentence-transformers version reads)."""
    cfg = encoder.model_cfg
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if cfg.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (folder / "2_Normalize").mkdir(exist_ok=True)
    write_json(folder / "modules.json", modules)
    write_json(folder / "sentence_bert_config.json", {"max_seq_length": cfg.doc_max_length, "do_lower_case": False})
    write_json(folder / "1_Pooling" / "config.json", {
        "word_embedding_dimension": encoder.hidden_size,
        "pooling_mode_cls_token": cfg.pooling == "cls",
        "pooling_mode_mean_tokens": cfg.pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": cfg.pooling == "last",
        "include_prompt": True,
    })
    write_json(folder / "config_sentence_transformers.json", {
        "prompts": {"query": cfg.query_prefix, "document": cfg.doc_prefix},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine" if cfg.normalize else "dot",
    })


def _write_pylate(encoder: SavableEncoder, folder: Path, linear: torch.Tensor) -> None:
    """PyLate's files (what ``pylate.models.ColBERT(folder)`` reads): modules.json (Transformer at the root,
    a bias-free ``pylate.models.Dense.Dense`` in 1_Dense/), its settings in config_sentence_transformers.json
    (markers as prefixes, lengths, query expansion, attention to the [MASK] expansion, punctuation skiplist)."""
    import string

    from safetensors.torch import save_file

    cfg = encoder.model_cfg
    write_json(folder / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"},
    ])
    write_json(folder / "sentence_bert_config.json", {"max_seq_length": cfg.doc_max_length, "do_lower_case": False})
    write_json(folder / "config_sentence_transformers.json", {
        "prompts": {"query": "", "document": ""},
        "default_prompt_name": None,
        "similarity_fn_name": "MaxSim",
        "query_prefix": cfg.query_marker,
        "document_prefix": cfg.doc_marker,
        "query_length": cfg.query_max_length,
        "document_length": cfg.doc_max_length,
        "attend_to_expansion_tokens": cfg.attend_to_mask_tokens,
        "skiplist_words": list(string.punctuation) if cfg.mask_punctuation else [],
        "do_query_expansion": cfg.query_augmentation,
    })
    (folder / "1_Dense").mkdir(exist_ok=True)
    weight = linear.detach().to("cpu", torch.float32).contiguous()
    save_file({"linear.weight": weight}, str(folder / "1_Dense" / "model.safetensors"))
    write_json(folder / "1_Dense" / "config.json", {
        "in_features": int(weight.shape[1]), "out_features": int(weight.shape[0]), "bias": False,
        "activation_function": "torch.nn.modules.linear.Identity", "use_residual": False,
    })


def _copy_tokenizer(encoder: SavableEncoder, folder: Path) -> None:
    """Copy the tokenizer files byte for byte, so the tokenizer fingerprint of the checkpoint is unchanged."""
    source = encoder.tokenizer.tokenizer_dir
    copied = [name for name in TOKENIZER_FILES if (source / name).is_file()]
    for name in copied:
        shutil.copyfile(source / name, folder / name)
    if not copied:
        encoder.tokenizer.tokenizer.save_pretrained(str(folder))


def _split_state(encoder: SavableEncoder, state_dict: dict | None):
    if state_dict is None:
        return None, (encoder.linear.weight if encoder.linear is not None else None)
    backbone = {k[len("backbone."):]: v for k, v in state_dict.items() if k.startswith("backbone.")}
    return backbone, state_dict.get("linear.weight")


def _apply_umask(folder: Path) -> None:
    """Temp files and folders are private (0600/0700); give the published checkpoint the usual modes."""
    mask = os.umask(0)
    os.umask(mask)
    folder.chmod(0o777 & ~mask)
    for item in folder.rglob("*"):
        item.chmod((0o777 if item.is_dir() else 0o666) & ~mask)


def _publish(tmp: Path, final: Path) -> None:
    """Move the finished folder onto ``final`` (replacing an older one) so readers never see half a folder."""
    if final.exists():
        old = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)


def save_encoder(encoder: SavableEncoder, path: str, state_dict: dict | None = None) -> None:
    """Write ``encoder`` as a checkpoint folder (see the module docstring) at a local path or fsspec URL.

    ``state_dict``: a full ``encoder.state_dict()`` gathered by the caller (e.g. under ZeRO-3); by default the
    live parameters are saved. The folder appears complete or not at all (written beside it, then renamed).
    """
    remote = "://" in path and not path.startswith("file://")
    final = Path(tempfile.mkdtemp(prefix="embedctl-save-")) / "model" if remote else Path(path.removeprefix("file://"))
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))
    try:
        backbone_state, linear = _split_state(encoder, state_dict)
        with quiet_transformers():
            encoder.backbone.save_pretrained(str(tmp), state_dict=backbone_state)
        _copy_tokenizer(encoder, tmp)
        if encoder.kind == "colbert":
            from safetensors.torch import save_file

            save_file({"weight": linear.detach().to("cpu", torch.float32).contiguous()}, str(tmp / COLBERT_LINEAR_NAME))
            _write_pylate(encoder, tmp, linear)
        else:
            _write_sentence_transformers(encoder, tmp)
        write_json(tmp / CARD_NAME, model_card(encoder))
        _apply_umask(tmp)
        _publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if remote:
        fs, target = url_to_fs(path)
        fs.put(str(final), target, recursive=True)
        shutil.rmtree(final.parent, ignore_errors=True)


def save_stanford(encoder: SavableEncoder, path: str) -> None:
    """Export a ColBERT encoder in the Stanford layout (``bert.*`` + ``linear.weight`` in model.safetensors,
    config.json, tokenizer files): what colbert-ai's ``Checkpoint`` loads."""
    from safetensors.torch import save_file

    if encoder.kind != "colbert":
        raise EmbedctlError("the Stanford ColBERT layout holds ColBERT models only (model.kind=colbert)")
    final = Path(path)
    final.mkdir(parents=True, exist_ok=True)
    state = {f"bert.{k}": v.detach().to("cpu", torch.float32).contiguous()
             for k, v in encoder.backbone.state_dict().items()}
    state["linear.weight"] = encoder.linear.weight.detach().to("cpu", torch.float32).contiguous()
    save_file(state, str(final / "model.safetensors"), metadata={"format": "pt"})
    encoder.backbone.config.to_json_file(str(final / "config.json"))
    _copy_tokenizer(encoder, final)
    cfg = encoder.model_cfg
    # colbert-ai's ColBERTConfig.load_from_checkpoint reads these, so Checkpoint(path) encodes as we do
    meta = {"dim": encoder.dim, "query_maxlen": cfg.query_max_length, "doc_maxlen": cfg.doc_max_length,
            "mask_punctuation": cfg.mask_punctuation, "attend_to_mask_tokens": cfg.attend_to_mask_tokens,
            "query_token_id": cfg.query_marker, "doc_token_id": cfg.doc_marker, "similarity": "cosine"}
    write_json(final / "artifact.metadata", meta)


def save_pylate(encoder: SavableEncoder, path: str) -> None:
    """Export a ColBERT encoder as a PyLate folder (no embedctl card): the backbone (save_pretrained),
    tokenizer files and PyLate's modules; ``pylate.models.ColBERT(path)`` and embedctl's PyLate layout
    load it with the same vectors."""
    if encoder.kind != "colbert":
        raise EmbedctlError("the PyLate layout holds ColBERT models only (model.kind=colbert)")
    final = Path(path)
    final.mkdir(parents=True, exist_ok=True)
    with quiet_transformers():
        encoder.backbone.save_pretrained(str(final))
    _copy_tokenizer(encoder, final)
    _write_pylate(encoder, final, encoder.linear.weight)
