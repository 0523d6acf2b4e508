"""A plain-torch BERT encoder: same weights, same outputs as transformers' BertModel, for inference and training.

Why: importing transformers' modeling stack costs seconds (it pulls torch._dynamo and DTensor), which
dominates the cold start of `embedctl search` and `embedctl index`; and in CPU training, dropout masks
from ``bernoulli_`` are ~20% of a step, which :mod:`embedctl.models.dropout` draws ~4x faster.
This module builds the standard BERT encoder (absolute positions, post-LayerNorm, GELU) from config.json + model.safetensors with the exact
parameter names of ``BertModel``, so state dicts and saved folders are interchangeable. Anything it does not
recognise returns None from :func:`try_native_bert`, and the caller falls back to transformers.

    bert = try_native_bert("/path/to/minilm")            # NativeBert or None
    bert(input_ids=ids, attention_mask=mask).last_hidden_state   # [B, L, H]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from embedctl.errors import EmbedctlError
from embedctl.models import bf16_attention
from embedctl.models.dropout import FastDropout, dropout, fast_dropout_applies, keep_mask
from embedctl.util import atomic
from embedctl.util.io import read_json

_ACTIVATIONS = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}


class NativeConfig:
    """The model's config.json as attributes (``hidden_size``...), written back unchanged on save."""

    def __init__(self, raw: dict[str, Any]):
        self._raw = dict(raw)
        self.__dict__.update(raw)

    def to_dict(self) -> dict[str, Any]:
        return dict(self._raw)

    def to_json_file(self, path: str) -> None:
        atomic.write_text(path, json.dumps(self._raw, indent=2, sort_keys=True) + "\n")


class BaseOutput(NamedTuple):
    last_hidden_state: torch.Tensor


class _Linear(nn.Linear):
    """An ``nn.Linear`` whose parameters are left uninitialised: a NativeBert is only ever built to receive a
    complete state dict (:func:`native_bert_from_state` checks every name and shape before loading it), and
    torch's random init of MiniLM's 22M parameters was ~0.15 s of every search's cold start."""

    def reset_parameters(self) -> None:
        pass


class _Embedding(nn.Embedding):
    """An ``nn.Embedding`` left uninitialised, as :class:`_Linear` (the word embeddings' normal init was the
    largest part of that time)."""

    def reset_parameters(self) -> None:
        pass


class _Embeddings(nn.Module):
    def __init__(self, c: NativeConfig):
        super().__init__()
        self.word_embeddings = _Embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = _Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = _Embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = FastDropout(c.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        words = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        length = words.shape[1]
        x = words + self.token_type_embeddings.weight[0]
        x = x + self.position_embeddings.weight[:length]
        return self.dropout(self.LayerNorm(x))


class _SelfAttention(nn.Module):
    def __init__(self, c: NativeConfig):
        super().__init__()
        self.heads = c.num_attention_heads
        self.query = _Linear(c.hidden_size, c.hidden_size)
        self.key = _Linear(c.hidden_size, c.hidden_size)
        self.value = _Linear(c.hidden_size, c.hidden_size)
        self.dropout = FastDropout(c.attention_probs_dropout_prob)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, n, h = x.shape
        shape = (b, n, self.heads, h // self.heads)
        q, k, v = (proj(x).view(shape).transpose(1, 2) for proj in (self.query, self.key, self.value))
        p = self.dropout.p if self.training else 0.0
        if p > 0.0 and x.device.type == "cpu":
            out = _attention_with_fast_dropout(q, k, v, mask, p)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        return out.transpose(1, 2).reshape(b, n, h)


class FusedQKVAttention(nn.Module):
    """Inference-only twin of :class:`_SelfAttention`: query, key and value as one [3h, h] projection, one
    matrix product instead of three (a 32-token query on one core: 92 us against 3 x 42 us a layer in
    bfloat16). In bfloat16, sequences of up to 512 tokens attend on embedctl's attention kernel
    (:mod:`embedctl.models.bf16_attention`: within a bfloat16 rounding of SDPA, ~3-4x faster for a query's
    layer and a batch of documents) where it runs, SDPA otherwise. Made from a trained module by
    :func:`fuse_qkv`; no dropout, never trained."""

    def __init__(self, attention: _SelfAttention):
        super().__init__()
        self.heads = attention.heads
        parts = (attention.query, attention.key, attention.value)
        hidden = attention.query.in_features
        self.qkv = _Linear(hidden, 3 * attention.query.out_features)
        self.qkv.weight = nn.Parameter(torch.cat([p.weight.detach() for p in parts]), requires_grad=False)
        self.qkv.bias = nn.Parameter(torch.cat([p.bias.detach() for p in parts]), requires_grad=False)
        self.attention_kernel = True  # False: always SDPA (the kernel's reference, for tests and bench A/B)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, n, h = x.shape
        qkv = self.qkv(x)
        if self.attention_kernel:  # bfloat16, <= 512 tokens, where the kernel runs; else None
            out = bf16_attention.attention(qkv, self.heads, mask)
            if out is not None:
                return out
        q, k, v = qkv.view(b, n, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, n, h)


def fuse_qkv(module: nn.Module) -> None:
    """Replace every :class:`_SelfAttention` inside ``module`` by its :class:`FusedQKVAttention` (inference)."""
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, _SelfAttention):
                setattr(parent, name, FusedQKVAttention(child))


def _attention_with_fast_dropout(q, k, v, mask: torch.Tensor | None, p: float) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + mask) with dropout on the probabilities, @ v: SDPA's math path, whose
    built-in dropout would draw its [B, heads, L, L] mask with the slow CPU ``bernoulli_``.

    The scale and the mask ride inside one ``baddbmm`` (-inf added where a key is padding): separate
    scaling and ``masked_fill`` passes over the [B, heads, L, L] scores, forward and backward, were ~5%
    of a CPU ColBERT training step. For the same reason the 1 / keep scaling of dropout is applied to the
    [B, heads, L, d] output instead of the probabilities; the probabilities are multiplied by a 0/1 float
    mask (a bool ``masked_fill`` is ~5x slower than a float multiply on CPU, forward and backward)."""
    b, heads, n, d = q.shape
    q3, k3 = q.reshape(b * heads, n, d), k.reshape(b * heads, n, d).transpose(1, 2)
    if mask is None:
        bias = q.new_zeros(1, 1, 1)
    else:  # mask [B, 1, 1, L] -> [B * heads, 1, L]: 0 for a key, -inf for padding
        bias = q.new_zeros(mask.shape).masked_fill_(~mask, float("-inf")).expand(b, heads, 1, n)
        bias = bias.reshape(b * heads, 1, n)
    scores = torch.baddbmm(bias, q3, k3, alpha=d ** -0.5)
    probs = scores.view(b, heads, n, n).softmax(dim=-1)
    if not fast_dropout_applies(probs, p, True):
        return torch.matmul(dropout(probs, p, True), v)
    kept, keep = keep_mask(probs.shape, p, probs.device)
    return torch.matmul(probs * kept.to(probs.dtype), v).mul_(1.0 / keep)


class _DenseNorm(nn.Module):
    """dense -> dropout -> LayerNorm(residual + .): BertSelfOutput and BertOutput."""

    def __init__(self, c: NativeConfig, in_features: int):
        super().__init__()
        self.dense = _Linear(in_features, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.dropout = FastDropout(c.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class _Attention(nn.Module):
    def __init__(self, c: NativeConfig):
        super().__init__()
        self.self = _SelfAttention(c)
        self.output = _DenseNorm(c, c.hidden_size)


class _Intermediate(nn.Module):
    def __init__(self, c: NativeConfig):
        super().__init__()
        self.dense = _Linear(c.hidden_size, c.intermediate_size)
        self.approximate = _ACTIVATIONS[c.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x), approximate=self.approximate)


class _Layer(nn.Module):
    def __init__(self, c: NativeConfig):
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _DenseNorm(c, c.intermediate_size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = self.attention.output(self.attention.self(x, mask), x)
        return self.output(self.intermediate(x), x)


class _Stack(nn.Module):
    def __init__(self, c: NativeConfig):
        super().__init__()
        self.layer = nn.ModuleList(_Layer(c) for _ in range(c.num_hidden_layers))


class _Pooler(nn.Module):
    """Kept only so the weights round-trip; embedctl never uses the pooler output."""

    def __init__(self, c: NativeConfig):
        super().__init__()
        self.dense = _Linear(c.hidden_size, c.hidden_size)


class NativeBert(nn.Module):
    """BERT encoder with ``BertModel``'s parameter names; ``forward(input_ids, attention_mask)``."""

    def __init__(self, config: NativeConfig, with_pooler: bool):
        super().__init__()
        self.config = config
        self.embeddings = _Embeddings(config)
        self.encoder = _Stack(config)
        self.pooler = _Pooler(config) if with_pooler else None

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                inputs_embeds: torch.Tensor | None = None, **_: Any) -> BaseOutput:
        """``input_ids`` [B, L], or ``inputs_embeds`` [B, L, H] (word embeddings looked up by the caller)."""
        x = self.embeddings(input_ids, inputs_embeds)
        mask = None
        if attention_mask is not None and not bool(attention_mask.all()):
            mask = attention_mask[:, None, None, :].bool()
        for layer in self.encoder.layer:
            x = layer(x, mask)
        return BaseOutput(x)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def save_pretrained(self, path: str, state_dict: dict | None = None, **_: Any) -> None:
        """model.safetensors + config.json, loadable by transformers' BertModel."""
        from safetensors.torch import save_file

        state = state_dict if state_dict is not None else self.state_dict()
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.items()}
        Path(path).mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(Path(path) / "model.safetensors"), metadata={"format": "pt"})
        self.config.to_json_file(str(Path(path) / "config.json"))


def _supported(raw: dict[str, Any]) -> bool:
    needed = ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size",
              "max_position_embeddings", "type_vocab_size", "layer_norm_eps")
    return (
        raw.get("model_type") == "bert"
        and all(isinstance(raw.get(k), (int, float)) for k in needed)
        and raw.get("hidden_act", "gelu") in _ACTIVATIONS
        and raw.get("position_embedding_type", "absolute") == "absolute"
        and not raw.get("is_decoder", False)
        and not raw.get("add_cross_attention", False)
        and raw["hidden_size"] % raw["num_attention_heads"] == 0
    )


def native_bert_from_state(raw_config: dict[str, Any], state: dict[str, torch.Tensor]) -> NativeBert | None:
    """Build from a config dict and a ``BertModel`` state dict; None when anything does not match exactly."""
    if not _supported(raw_config):
        return None
    raw = {"hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, **raw_config}
    state = {k: v for k, v in state.items() if not k.endswith(("position_ids", "token_type_ids"))}
    with_pooler = any(k.startswith("pooler.") for k in state)
    # Built on the CPU with uninitialised parameters (_Linear, _Embedding), then every one is loaded; a
    # meta-device build would import torch._dynamo for Embedding init (seconds).
    model = NativeBert(NativeConfig(raw), with_pooler)
    own = model.state_dict()
    if set(state) != set(own) or any(tuple(state[k].shape) != tuple(p.shape) for k, p in own.items()):
        return None
    model.load_state_dict(state)
    return model.eval()


def try_native_bert(folder: str | Path) -> NativeBert | None:
    """A NativeBert for a HF BERT folder (config.json + model.safetensors), or None to use transformers."""
    folder = Path(folder)
    config_file, weights = folder / "config.json", folder / "model.safetensors"
    if not (config_file.is_file() and weights.is_file()):
        return None
    try:
        raw = read_json(config_file, "model config")
    except (OSError, EmbedctlError):
        return None
    if not isinstance(raw, dict) or not _supported(raw):
        return None
    from safetensors.torch import load_file

    try:
        state = load_file(str(weights))
    except Exception:  # damaged file: let transformers produce its own error message
        return None
    return native_bert_from_state(raw, state)
