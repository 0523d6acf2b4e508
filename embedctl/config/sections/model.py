from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from embedctl.config.fields import between, choice, positive


@dataclass
class ModelConfig:
    """The encoder: which weights, which architecture, how text becomes token ids."""

    name_or_path: str = "minilm"
    """Model to load: `minilm` (the bundled all-MiniLM-L6-v2), a local folder, or a hub id already in the local cache."""
    kind: str = choice("biencoder", "biencoder", "colbert")
    """`biencoder` (one pooled vector per text) or `colbert` (one vector per token, MaxSim scoring). An embedctl checkpoint's card overrides it; a Stanford ColBERT checkpoint is always `colbert`."""
    pooling: str = choice("mean", "cls", "mean", "last")
    """Bi-encoder pooling: `cls`, `mean` (attention-masked) or `last` (last non-padding token, padding-side aware). A sentence-transformers folder's Pooling config or an embedctl checkpoint's card overrides it."""
    normalize: bool = True
    """L2-normalise output vectors (bi-encoder embeddings and ColBERT token vectors)."""
    dim: int = positive(128)
    """ColBERT projection size (a bias-free linear layer from the hidden size, seeded when fresh). A checkpoint's own projection decides it."""
    matryoshka_dims: list[int] = positive([])
    """Bi-encoder Matryoshka dimensions trained jointly (e.g. [384, 256, 128]); empty disables."""
    query_max_length: int = positive(32)
    """Maximum query length in tokens, special tokens included (ColBERT pads queries to this length with [MASK]). Unset, the model's own setting is the default: a sentence-transformers bi-encoder's max_seq_length, PyLate's query_length, a Stanford checkpoint's query_maxlen (`embedctl config show` says which applied)."""
    doc_max_length: int = positive(256)
    """Maximum document length in tokens, special tokens included (ColBERT: 180-220 is usual). Unset, the model's own setting is the default: a sentence-transformers bi-encoder's max_seq_length, PyLate's document_length, a Stanford checkpoint's doc_maxlen."""
    query_prefix: str = ""
    """Instruction prefix put before every query, e.g. 'query: ' for E5. Unset, a sentence-transformers folder's `query` prompt (config_sentence_transformers.json) is the default."""
    doc_prefix: str = ""
    """Instruction prefix put before every document, e.g. 'passage: ' for E5. Unset, a sentence-transformers folder's `document` (or `passage`, `corpus`) prompt is the default."""
    query_marker: str = "[unused0]"
    """ColBERT query marker token inserted after [CLS]."""
    doc_marker: str = "[unused1]"
    """ColBERT document marker token inserted after [CLS]."""
    query_augmentation: bool = True
    """ColBERT: pad queries with [MASK] to query_max_length and let the model attend to them (query augmentation)."""
    attend_to_mask_tokens: bool = True
    """ColBERT query augmentation: attention 1 on the [MASK] padding (false: the masks still get vectors but real tokens do not attend to them, the colbert-ai / PyLate default)."""
    mask_punctuation: bool = True
    """ColBERT: drop punctuation tokens from document vectors."""
    dropout: Optional[float] = between(0, 1, None)
    """Dropout rate for training; null keeps the model's own rate, 0 disables dropout."""
    native_bert: bool = True
    """Run a standard BERT model on embedctl's own plain-torch forward (same weights and outputs as transformers' BertModel; seconds faster to start, and in CPU training its dropout masks are drawn ~4x faster); false always uses transformers."""
    trust_remote_code: bool = False
    """Allow model code from the model folder to run (off by default: only turn on for models you trust)."""
    device: str = "auto"
    """Device for encoding: `auto` (cuda when present), `cpu`, `cuda`, `cuda:N`."""
    encoder_backend: str = choice("auto", "auto", "reference", "onnx", "onnx-int8", "bf16")
    """How inference encodes (training always runs the torch model): `reference` (fp32 eager torch, the exact path), `bf16` (the same torch forward under CPU autocast to bfloat16, on CPUs with AVX512_BF16 or AMX, its attention on embedctl's AVX512-BF16 kernel; per-vector cosine >= 0.999 vs the reference; no per-process cost), `onnx` (the same graph exported once into the cache and run by ONNX Runtime, fp32, graph-optimised; per-vector cosine >= 0.999 vs the reference), `onnx-int8` (ONNX Runtime with int8 dynamic quantisation: fails that bound, so never chosen by `auto`; asked for, it runs and says why it is off by default). `auto`: in a process that encodes at least 1,000 texts (an index build or prebatch mining of that many, a search of a queries file that long, a server) `bf16` where the CPU has native bfloat16, else `onnx`; elsewhere the reference (a one-query search, the Python API's Encoder; training's evaluation of at least 1,000 texts takes `bf16` where it can run); the reference wherever neither can run (docs/models.md, "Encode backends", has the figures behind the choice). An index records the backend its documents were encoded with and search encodes queries the same way unless this key is set for the search."""
