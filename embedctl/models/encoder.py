"""The one encoder shared by training, indexing, search and hard-negative mining.

    enc = load_encoder(ModelConfig(kind="colbert"))          # MiniLM + seeded 384->128 projection
    Q = enc.encode_queries(["what is a cell?"])              # [1, 32, 128] float32
    vecs, doclens = enc.encode_documents(["A cell is ..."])  # [sum(doclens), 128], [1]
    scores = colbert_scores(torch.from_numpy(Q), D, D_mask)  # MaxSim
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from embedctl.config.sections.model import ModelConfig
from embedctl.errors import EmbedctlError
from embedctl.models.checkpoint import (
    load_colbert_linear,
    load_hf_backbone,
    load_pylate_projection,
    load_stanford,
    save_encoder,
)
from embedctl.models.colbert import colbert_scores, fresh_projection, skiplist_table
from embedctl.models.hub import resolve_model_path
from embedctl.models.layout import detect_layout, effective_config
from embedctl.models.pooling import pool
from embedctl.models.tokenization import TextTokenizer
from embedctl.util.progress import Progress

__all__ = ["Encoder", "EncoderOutput", "load_encoder", "colbert_scores", "resolve_device"]


# Bi-encoder queries encoded together are cut into batches of similar lengths (Encoder._batches): SciFact's
# test queries (7-64 tokens), 16 at a time as `embedctl serve` gathers them, padded to 1.88x their tokens in
# one batch; cut at 0.7x the longest (batches of at least 96 padded tokens) they encoded 1.31x faster
# (interleaved, loaded 2-core host, minilm), the vectors equal within 1e-5. ColBERT queries all pad to
# query_max_length: not cut.
QUERY_SPLIT = 0.7
SPLIT_MIN_TOKENS = 96

class EncoderOutput(NamedTuple):
    """``embeddings``: bi-encoder [B, D]; ColBERT [B, L, dim] (zero where ``mask`` is False).
    ``mask``: None for bi-encoders; ColBERT [B, L] bool, False for padding and (documents) punctuation.

    A NamedTuple so DDP / DeepSpeed / torch pytrees see the tensors inside."""

    embeddings: torch.Tensor
    mask: torch.Tensor | None = None


def resolve_device(name: str | None) -> torch.device:
    """``auto``/None -> cuda when available, else cpu; otherwise ``torch.device(name)``."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise EmbedctlError(f"`model.device` = {name!r} is not a device", hint="use auto, cpu, cuda or cuda:N") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise EmbedctlError(f"`model.device` = {name!r} but this machine has no CUDA device",
                            hint="use model.device=auto (cuda when present) or cpu")
    return device


def freeze_unused_head(backbone: torch.nn.Module) -> None:
    """Freeze the backbone's pooler (BERT/XLM-R): its output is never used, and parameters that get no
    gradient make DDP fail ("expected to have finished reduction"). Its weights are kept and saved."""
    pooler = getattr(backbone, "pooler", None)
    if isinstance(pooler, torch.nn.Module):
        for param in pooler.parameters():
            param.requires_grad_(False)


def set_dropout(module: torch.nn.Module, rate: float) -> None:
    """Set every dropout rate in ``module`` (nn.Dropout layers and float attention-dropout attributes)."""
    for sub in module.modules():
        if isinstance(sub, torch.nn.Dropout):
            sub.p = rate
        for attr in ("attention_dropout", "dropout_prob", "attn_dropout"):
            if isinstance(getattr(sub, attr, None), float):
                setattr(sub, attr, rate)


class Encoder(torch.nn.Module):
    """HF encoder + bi-encoder pooling or ColBERT projection; see :func:`load_encoder` to build one."""

    def __init__(self, backbone: torch.nn.Module, tokenizer: TextTokenizer, model_cfg: ModelConfig,
                 linear: torch.nn.Linear | None = None):
        super().__init__()
        self.backbone = backbone
        self.linear = linear
        self.tokenizer = tokenizer
        self.kind = model_cfg.kind
        self.hidden_size = int(backbone.config.hidden_size)
        self.dim = int(linear.out_features) if linear is not None else self.hidden_size
        self.model_cfg = dataclasses.replace(model_cfg, dim=self.dim) if self.kind == "colbert" else model_cfg
        self.pad_id = tokenizer.pad_id
        skip = tokenizer.punctuation_ids() if self.kind == "colbert" and model_cfg.mask_punctuation else []
        self.register_buffer("skiplist", skiplist_table(max(tokenizer.vocab_size, 1), skip), persistent=False)
        self.train(backbone.training)

    @property
    def device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    # -- forward -------------------------------------------------------------------------------------
    forward_chunk_size: int | None = None
    """Texts per backbone pass in :meth:`forward` (training sets it: ``train.forward_chunk_size``); None: one."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, side: str,
                words: torch.Tensor | None = None) -> EncoderOutput:
        """``input_ids``/``attention_mask`` [B, L] (from ``tokenizer.pad``), ``side`` "query"|"document";
        ``words`` [B, L, H]: the rows' word embeddings, when the caller looked them up (:meth:`word_embeddings`).

        With ``forward_chunk_size`` the rows go through the model in passes of that many, concatenated (each
        row's output does not depend on the others; the passes keep their graphs)."""
        chunk = self.forward_chunk_size
        if not chunk or input_ids.shape[0] <= chunk:
            return self._forward(input_ids, attention_mask, side, words)
        if words is None:  # one lookup for all passes (see word_embeddings)
            words = self.word_embeddings(input_ids)[0]
        parts = [self._forward(input_ids[i:i + chunk], attention_mask[i:i + chunk], side, words[i:i + chunk])
                 for i in range(0, input_ids.shape[0], chunk)]
        masks = [p.mask for p in parts]
        return EncoderOutput(torch.cat([p.embeddings for p in parts]), None if masks[0] is None else torch.cat(masks))

    def word_embeddings(self, *id_batches: torch.Tensor) -> list[torch.Tensor]:
        """The word embeddings of each [B, L] id batch, [B, L, H], from one lookup for all of them.

        Why one: each lookup's backward builds a dense [vocab, hidden] gradient (47 MB for MiniLM), and on CPU
        allocating, zeroing and summing those was ~5% of a ColBERT training step per lookup."""
        ids = [x.to(self.device, non_blocking=True) for x in id_batches]
        flat = self.backbone.get_input_embeddings()(torch.cat([x.reshape(-1) for x in ids]))
        return [w.view(*x.shape, -1) for w, x in zip(flat.split([x.numel() for x in ids]), ids, strict=True)]

    def _forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, side: str,
                 words: torch.Tensor | None = None) -> EncoderOutput:
        """One backbone pass; ``words``: the rows' word embeddings already looked up, or None."""
        device = self.device
        input_ids = input_ids.to(device, non_blocking=True)
        attention_mask = attention_mask.to(device, non_blocking=True)
        if words is None:
            hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        else:
            hidden = self.backbone(inputs_embeds=words, attention_mask=attention_mask).last_hidden_state
        return self._masked(self._head(hidden, attention_mask), input_ids, attention_mask, side)

    def _head(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Backbone states [B, L, H] -> bi-encoder pooled [B, D] / ColBERT projected [B, L, dim], normalised
        when ``model.normalize`` (the part of the head an exported graph includes: embedctl.models.onnx_graph)."""
        if self.kind == "biencoder":
            emb = pool(hidden, attention_mask, self.model_cfg.pooling)
        else:
            emb = self.linear(hidden)
        return F.normalize(emb, dim=-1) if self.model_cfg.normalize else emb

    def _masked(self, emb: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                side: str) -> EncoderOutput:
        """The head's output as an EncoderOutput: ColBERT vectors zeroed where the mask is False."""
        if self.kind == "biencoder":
            return EncoderOutput(emb, None)
        if side == "query" and self.model_cfg.query_augmentation:
            mask = input_ids != self.pad_id  # [MASK] expansion vectors count even when not attended to
        else:
            mask = attention_mask.bool()
        if side == "document" and self.model_cfg.mask_punctuation:
            mask = mask & ~self.skiplist[input_ids]
        return EncoderOutput(emb * mask.unsqueeze(-1).to(emb.dtype), mask)

    # -- encode backend ------------------------------------------------------------------------------
    backend_name: str = "reference"
    """The encode backend inference runs on (embedctl.models.encode_backends): ``reference`` or a fast path."""
    _runner = None

    backend_asked: str = "reference"
    """The ``model.encoder_backend`` value ``backend_name`` was resolved from (``auto`` or a backend's name)."""

    def use_backend(self, name: str, warn: bool = True, texts: int = 0) -> str:
        """Run inference (the ``encode_*`` methods) on encode backend ``name`` (``auto`` resolves here, for a
        process that will encode ``texts`` texts: embedctl.models.encode_backends.AUTO); returns the resolved
        name, also kept in ``backend_name``. ConfigError when it cannot run here."""
        from embedctl.models import encode_backends

        runner = encode_backends.make_runner(name, self, warn=warn, texts=texts)
        self._runner = runner
        self.backend_name = runner.name if runner is not None else "reference"
        self.backend_asked = name
        self.model_cfg = dataclasses.replace(self.model_cfg, encoder_backend=self.backend_name)
        return self.backend_name

    def _infer(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, side: str) -> EncoderOutput:
        """One inference pass on the chosen backend (the reference: :meth:`forward`)."""
        if self._runner is None:
            return self(input_ids, attention_mask, side=side)
        return self._masked(self._runner(input_ids, attention_mask), input_ids, attention_mask, side)

    # -- batch encoding ------------------------------------------------------------------------------
    def _ids(self, items, side: str) -> list:
        if len(items) and isinstance(items[0], str):
            return self.tokenizer.encode(list(items), side)
        return list(items)

    def document_ids(self, items) -> list:
        """Documents (strings, or id lists kept as they are) -> token id lists, as :meth:`encode_documents`
        tokenizes them (callers that batch by length tokenize once: embedctl.index.encoding)."""
        return self._ids(items, "document")

    def _batches(self, ids: list, batch_size: int, split: float = 0.0):
        """Yield (positions, rows) in longest-first order, at most ``batch_size`` rows each. ``split`` > 0 also
        ends a batch before a row shorter than ``split`` x the batch's longest once the batch pads to
        ``SPLIT_MIN_TOKENS``: the rows are padded to the longest, and a served batch of short and long queries
        would spend most of its work on padding."""
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        order = np.argsort(-lengths, kind="stable")
        start = 0
        while start < len(order):
            end, longest = start + 1, lengths[order[start]]
            while end < min(len(order), start + batch_size):
                if split and lengths[order[end]] < split * longest and (end - start) * longest >= SPLIT_MIN_TOKENS:
                    break
                end += 1
            positions = order[start:end]
            yield positions, [ids[i] for i in positions]
            start = end

    def _run(self, fn):
        """Run ``fn`` in eval + inference mode (train() walks every module: skipped when already in eval)."""
        was_training, backbone_training = self.training, self.backbone.training
        if was_training or backbone_training:
            self.eval()
        try:
            with torch.inference_mode():
                return fn()
        finally:
            if was_training:
                self.train(True)
            elif backbone_training:
                self.backbone.train(True)

    def encode_queries(self, items, batch_size: int = 64) -> np.ndarray:
        """Queries (strings, or id lists from the token cache) -> bi-encoder [N, D] / ColBERT [N, Lq, dim] float32.

        ColBERT queries are padded to query_max_length (or the longest given id list when longer)."""
        ids = self._ids(items, "query")
        if self.kind == "biencoder":
            return self._encode_pooled(ids, "query", batch_size, split=QUERY_SPLIT)
        width = max([self.model_cfg.query_max_length] + [len(x) for x in ids])
        out = np.zeros((len(ids), width, self.dim), dtype=np.float32)

        def run():
            for positions, rows in self._batches(ids, batch_size):
                emb = self._infer(*self.tokenizer.pad(rows, "query"), side="query").embeddings
                out[positions, : emb.shape[1]] = emb.float().cpu().numpy()
            return out

        return self._run(run)

    def _encode_pooled(self, ids: list, side: str, batch_size: int, bar: Progress | None = None,
                       split: float = 0.0) -> np.ndarray:
        out = np.zeros((len(ids), self.dim), dtype=np.float32)

        def run():
            for positions, rows in self._batches(ids, batch_size, split):
                out[positions] = self._infer(*self.tokenizer.pad(rows, side), side=side).embeddings.float().cpu().numpy()
                if bar is not None:
                    bar.advance(len(rows))
            return out

        return self._run(run)

    def encode_documents(self, items, batch_size: int = 32, progress: bool = False):
        """Documents (strings or id lists) -> bi-encoder [N, D] float32, or ColBERT
        ``(vectors [sum(doclens), dim] float32, doclens [N] int64)`` in input order; punctuation and padding
        vectors are dropped, so ``doclens`` counts the kept vectors. ``progress``: show a bar
        (embedctl.util.progress) that advances after every batch."""
        ids = self._ids(items, "document")
        with Progress(len(ids), "encoding", unit="docs", enabled=progress) as bar:
            if self.kind == "biencoder":
                return self._encode_pooled(ids, "document", batch_size, bar)
            return self._run(lambda: self._encode_colbert_docs(ids, batch_size, bar))

    def _encode_colbert_docs(self, ids: list, batch_size: int, bar: Progress):
        per_doc: list[np.ndarray | None] = [None] * len(ids)
        for positions, rows in self._batches(ids, batch_size):
            out = self._infer(*self.tokenizer.pad(rows, "document"), side="document")
            counts = out.mask.sum(dim=1).tolist()
            flat = out.embeddings[out.mask].float().cpu().numpy()
            for pos, piece in zip(positions, np.split(flat, np.cumsum(counts)[:-1]), strict=True):
                per_doc[pos] = piece
            bar.advance(len(rows))
        doclens = np.array([len(p) for p in per_doc], dtype=np.int64)
        vectors = np.concatenate(per_doc) if per_doc else np.zeros((0, self.dim), dtype=np.float32)
        return vectors, doclens

    # -- persistence ---------------------------------------------------------------------------------
    def save(self, path: str, state_dict: dict | None = None) -> None:
        """Write a checkpoint folder (safetensors + tokenizer + embedctl_model.json; bi-encoders also load with
        ``sentence_transformers.SentenceTransformer(path)``). See embedctl.models.checkpoint."""
        save_encoder(self, path, state_dict)


def _check_lengths(backbone: torch.nn.Module, cfg: ModelConfig) -> None:
    limit = getattr(backbone.config, "max_position_embeddings", None)
    for key in ("query_max_length", "doc_max_length"):
        value = getattr(cfg, key)
        if limit is not None and value > limit:
            raise EmbedctlError(
                f"`model.{key}` = {value} is more than the model's {limit} positions",
                hint=f"set model.{key} to at most {limit}", exit_code=2,  # a config value: exit 2 as for every other
            )


def _load_parts(path: str, layout: str, cfg: ModelConfig, native: bool):
    """(backbone, projection or None) for ``path`` read as ``layout``."""
    weight = None
    if layout == "stanford":
        backbone, weight = load_stanford(path, cfg, native=native)
    else:
        backbone = load_hf_backbone(path, cfg, native=native)
        if layout == "embedctl" and cfg.kind == "colbert":
            weight = load_colbert_linear(path)
        elif layout == "pylate":
            weight = load_pylate_projection(path)
    if cfg.kind != "colbert":
        return backbone, None
    hidden = int(backbone.config.hidden_size)
    if weight is None:
        return backbone, fresh_projection(hidden, cfg.dim)
    if weight.ndim != 2 or weight.shape[1] != hidden:
        raise EmbedctlError(
            f"`model.name_or_path` = {path!r}: ColBERT projection has shape {tuple(weight.shape)}, "
            f"expected [dim, {hidden}]",
            hint="the projection does not belong to this backbone; re-save the checkpoint",
        )
    linear = torch.nn.Linear(hidden, weight.shape[0], bias=False)  # (caller forks the RNG)
    with torch.no_grad():
        linear.weight.copy_(weight)
    return backbone, linear


def load_encoder(model_cfg: ModelConfig, *, device: str | None = None, train: bool = False,
                 texts: int = 0) -> Encoder:
    """Build the encoder ``model_cfg`` describes, on ``device`` (default ``model.device``), in eval mode
    unless ``train``; ``texts``: how many texts this process will encode with it (``model.encoder_backend=auto``
    picks a fast path whose per-process cost that many pay back: embedctl.models.encode_backends.AUTO).

    ``model.name_or_path``: ``minilm``; a HF / sentence-transformers folder (ColBERT gets a fresh projection
    seeded by a fixed seed; ST pooling is read from its Pooling module); an embedctl checkpoint (its
    embedctl_model.json decides kind/pooling/dim/markers/normalize/prefixes, the config's lengths apply); a
    Stanford ColBERT folder (``bert.*`` + ``linear.weight``); a PyLate ColBERT folder (its Dense projection,
    prefixes as markers). ``model.dropout``: None keeps the model's rates. ``model.native_bert``: a
    standard BERT runs on :mod:`embedctl.models.native_bert` (same outputs, no transformers import, seconds
    faster to start; in training, faster CPU dropout). ``model.encoder_backend``: how the ``encode_*``
    methods run (embedctl.models.encode_backends; ``auto`` resolves to the name kept in ``model_cfg``).
    """
    path = resolve_model_path(model_cfg.name_or_path)
    layout = detect_layout(path)
    cfg = effective_config(model_cfg, path, layout)
    tokenizer = TextTokenizer(cfg, path)
    native = cfg.native_bert and not cfg.trust_remote_code
    with torch.random.fork_rng(devices=[]):  # loading must not shift the caller's seeded RNG stream
        backbone, linear = _load_parts(path, layout, cfg, native)
    _check_lengths(backbone, cfg)
    freeze_unused_head(backbone)
    if cfg.dropout is not None:
        set_dropout(backbone, float(cfg.dropout))
    encoder = Encoder(backbone, tokenizer, cfg, linear)
    encoder.to(resolve_device(device or cfg.device))
    encoder.train(train)
    encoder.use_backend(cfg.encoder_backend, texts=texts)  # model_cfg.encoder_backend: the resolved name
    return encoder
