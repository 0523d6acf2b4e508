"""What TextTokenizer needs from a transformers tokenizer, cached so later loads skip importing transformers.

Importing transformers' tokenizer stack costs 1-2 s per process, which dominates the cold start of
`embedctl search`. The first load builds the tokenizer with transformers (the reference behaviour) and
stores its Rust pipeline (``backend_tokenizer.to_str()``) and special ids in
``$EMBEDCTL_CACHE_DIR/tokenizers/<key>.json`` (default ``~/.cache/embedctl``); the key hashes the tokenizer
files and the transformers version, so a changed file or upgrade rebuilds it. Unwritable caches are skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

from embedctl.errors import EmbedctlError
from embedctl.util.atomic import write_json
from embedctl.util.io import damaged_json, read_json

SPEC_FORMAT = 1
# Files that can change how text becomes ids; the ones present are hashed.
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.txt",
    "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model",
)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tokenizer_file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of each tokenizer file present in ``folder``."""
    return {name: sha256_file(folder / name) for name in TOKENIZER_FILES if (folder / name).is_file()}


def cache_dir() -> Path:
    return Path(os.environ.get("EMBEDCTL_CACHE_DIR") or Path.home() / ".cache" / "embedctl") / "tokenizers"


def _key(hashes: dict[str, str], trust_remote_code: bool) -> str:
    try:
        version = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        version = "?"
    blob = json.dumps({"f": SPEC_FORMAT, "files": hashes, "transformers": version, "remote": trust_remote_code},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def load_hf_tokenizer(folder: str | Path, *, trust_remote_code: bool = False):
    """The fast (tokenizers-backed) transformers tokenizer of a model folder, with a clear error when there is none."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=trust_remote_code)
    except Exception as exc:
        reason, hint = _why_unusable(folder, exc)
        raise EmbedctlError(f"`model.name_or_path`: no usable tokenizer in {folder} ({reason})", hint=hint) from exc
    if getattr(tok, "backend_tokenizer", None) is None:
        raise EmbedctlError(
            f"`model.name_or_path`: the tokenizer in {folder} has no fast (Rust) backend",
            hint="save a tokenizer.json for it (transformers can convert most slow tokenizers)",
        )
    return tok


JSON_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json")


def damaged_tokenizer_file(folder: str | Path) -> str | None:
    """Which tokenizer file of ``folder`` is damaged (a JSON file cut short or garbled, an empty vocabulary),
    in words naming the file; None when each reads. A refusal then names the file, not only the folder."""
    folder = Path(folder)
    for name in JSON_FILES:
        if damaged := damaged_json(folder / name):
            return damaged
    for name in ("vocab.txt", "vocab.json", "merges.txt"):
        file = folder / name
        if file.is_file() and file.stat().st_size == 0:
            return f"{file} is empty"
    return None


def _why_unusable(folder: str | Path, exc: Exception) -> tuple[str, str]:
    """(why the tokenizer of ``folder`` does not load: the damaged file, else the library's error; the fix)."""
    damaged = damaged_tokenizer_file(folder)
    if damaged:
        return damaged, "copy the tokenizer files again from the base model (or the model folder again)"
    return (f"{type(exc).__name__}: {exc}", "the model folder needs its tokenizer files (tokenizer.json or vocab.txt "
            "...); copy them from the base model")


def _special_affixes(tok) -> tuple[list[int], list[int]]:
    """Ids the tokenizer's post-processor puts before and after a single text (BERT: [CLS] / [SEP])."""
    try:
        plain = tok("hello world", add_special_tokens=False)["input_ids"]
        full = tok("hello world", add_special_tokens=True)["input_ids"]
    except Exception as exc:  # the Rust tokenizer's own error (an empty vocabulary: "Missing [UNK] token")
        folder = getattr(tok, "name_or_path", "the model folder")
        reason, hint = _why_unusable(folder, exc)
        raise EmbedctlError(f"`model.name_or_path`: the tokenizer in {folder} cannot tokenize text ({reason})",
                            hint=hint) from exc
    for start in range(len(full) - len(plain) + 1):
        if full[start:start + len(plain)] == plain:
            return list(full[:start]), list(full[start + len(plain):])
    raise EmbedctlError(
        "`model.name_or_path`: cannot tell which special tokens this tokenizer adds around a text",
        hint="use a tokenizer whose post-processor only adds tokens before/after the text",
    )


def spec_from_hf(tok) -> dict[str, Any]:
    """Everything TextTokenizer uses, taken from a transformers tokenizer."""
    prefix, suffix = _special_affixes(tok)
    return {
        "format": SPEC_FORMAT,
        "backend": tok.backend_tokenizer.to_str(),
        "vocab_size": len(tok),
        "pad_id": tok.pad_token_id if tok.pad_token_id is not None else 0,
        "mask_id": tok.mask_token_id,
        "unk_id": tok.unk_token_id,
        "padding_side": tok.padding_side,
        "prefix_ids": prefix,
        "suffix_ids": suffix,
    }


def tokenizer_spec(folder: Path, *, trust_remote_code: bool = False) -> tuple[dict[str, Any], dict[str, str], Any]:
    """(spec, file hashes, the transformers tokenizer when it had to be loaded else None)."""
    hashes = tokenizer_file_hashes(folder)
    path = cache_dir() / f"{_key(hashes, trust_remote_code)}.json"
    if hashes and path.is_file():
        try:
            spec = read_json(path, "tokenizer cache entry")
            if isinstance(spec, dict) and spec.get("format") == SPEC_FORMAT:
                return spec, hashes, None
        except (OSError, EmbedctlError):
            pass  # a damaged (or just removed) cache entry is rebuilt below
    tok = load_hf_tokenizer(folder, trust_remote_code=trust_remote_code)
    spec = spec_from_hf(tok)
    if hashes:
        _store(path, spec)
    return spec, hashes, tok


def _store(path: Path, spec: dict[str, Any]) -> None:
    try:
        write_json(path, spec, indent=None)
    except OSError:
        pass  # read-only home: every process then builds the tokenizer with transformers
