"""The encoder's inference graph as an ONNX file, exported once per model into the cache.

``$EMBEDCTL_CACHE_DIR/onnx/<key>.onnx`` (default ``~/.cache/embedctl``); ``<key>-int8.onnx`` for the int8
dynamic quantisation of it. The key hashes everything the graph's output depends on: every parameter's
bytes (so a retrained or fine-tuned model gets its own graph), the head (kind, pooling, normalize, dim),
the exporter's versions and this module's format. Written to a temporary name and renamed
(embedctl.util.atomic): a crashed export never leaves a file that looks complete. ONNX files hold
weights and a graph, no code: nothing is unpickled to read them.

The graph: ``(input_ids, attention_mask) [B, L] int64 -> embeddings`` before masking: ColBERT the
normalised projection [B, L, dim], a bi-encoder its pooled vector [B, D] (:meth:`Encoder._head`). Both axes
are dynamic. The attention mask is always applied (the torch forward skips it when nothing is padded;
the result is the same).

Attention is exported written out (``softmax(q k^T / sqrt(d) + additive mask) v``, as BERT's eager forward
writes it), not through torch's ``scaled_dot_product_attention``, which the exporter expands into a chain of
Sqrt / Div / IsNaN / Where nodes per layer that no ONNX Runtime fusion recognises. Written out, the session's
own optimisations fold the scale into the q k^T MatMul (FusedMatMul) and fuse the bias + GELU: on SciFact
documents 0.89-0.96x the time of the SDPA export per batch, 0.93x per query (one thread, paired, loaded
host). ONNX Runtime's transformer optimizer (``onnxruntime.transformers.optimizer``, model type ``bert``)
fuses it further, into one Attention, two SkipLayerNormalization and one BiasGelu node per layer, but was
slower than the written-out graph in the same runs (0.95-0.98x of the SDPA export, against 0.89-0.96x),
so it is not applied. The arithmetic is the reference's up to fp32 rounding (per-vector cosine >= 0.9999998
on SciFact).
"""

from __future__ import annotations

import hashlib
import math
import os
import warnings
from pathlib import Path
from typing import Any

import torch

from embedctl.util.atomic import atomic_path

GRAPH_FORMAT = 2  # 2: attention written out (1: exported from torch's SDPA)
OPSET = 17


def cache_dir() -> Path:
    return Path(os.environ.get("EMBEDCTL_CACHE_DIR") or Path.home() / ".cache" / "embedctl") / "onnx"


def graph_key(encoder: Any) -> str:
    """The cache key of ``encoder``'s graph (see the module docstring)."""
    import onnxruntime

    # sha256 over views of the tensors' bytes (no copies): 0.14 s for minilm's 90 MB against 0.22 s for blake2b
    # over copies, in every process that opens the graph (a one-query search of an index built by onnx)
    digest = hashlib.sha256()
    cfg = encoder.model_cfg
    head = (f"{GRAPH_FORMAT}|{OPSET}|{torch.__version__}|{onnxruntime.__version__}|{encoder.kind}|"
            f"{cfg.pooling}|{cfg.normalize}|{encoder.dim}")
    digest.update(head.encode())
    for name, tensor in sorted(encoder.state_dict().items()):
        if name == "skiplist":
            continue
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
        digest.update(memoryview(tensor.detach().to("cpu").contiguous().view(torch.uint8).numpy()).cast("B"))
    return digest.hexdigest()[:32]


class _InferenceGraph(torch.nn.Module):
    """Backbone with the attention mask always applied, then the encoder's head; each layer as
    :func:`_layer` writes it (the same modules and weights as :class:`~embedctl.models.native_bert.NativeBert`)."""

    def __init__(self, encoder: Any):
        super().__init__()
        self.backbone = encoder.backbone
        self.linear = encoder.linear
        self.head = encoder._head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.backbone.embeddings(input_ids)
        # 0 where a key is a token, the dtype's lowest where it is padding (exp() of it is 0 in the softmax)
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.backbone.encoder.layer:
            x = _layer(layer, x, bias)
        return self.head(x, attention_mask)


def _layer(layer: Any, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """One NativeBert layer (native_bert._Layer) with its attention written out, in the shape ONNX Runtime's
    BERT fusion recognises (view + permute per projection, MatMul, Div by sqrt(d), Add mask, Softmax)."""
    attention = layer.attention.self
    hidden = x.shape[-1]
    size = hidden // attention.heads

    def heads(t: torch.Tensor) -> torch.Tensor:
        return t.view(t.size()[:-1] + (attention.heads, size)).permute(0, 2, 1, 3)

    q, k, v = heads(attention.query(x)), heads(attention.key(x)), heads(attention.value(x))
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(size)
    context = torch.matmul((scores + bias).softmax(dim=-1), v).permute(0, 2, 1, 3).contiguous()
    x = layer.attention.output(context.view(context.size()[:-2] + (hidden,)), x)
    return layer.output(layer.intermediate(x), x)


def export_graph(encoder: Any, path: Path) -> None:
    """Export ``encoder``'s inference graph (fp32) to ``path`` (temp name + rename)."""
    graph = _InferenceGraph(encoder)
    modes = {m: m.training for m in graph.modules()}  # the encoder's own modules: a training one stays so
    graph.eval()
    ids = torch.tensor([[101, 2023, 2003, 102, 0, 0], [101, 2178, 1037, 2460, 3793, 102]], dtype=torch.int64)
    mask = (ids != 0).to(torch.int64)
    axes = {"input_ids": {0: "batch", 1: "length"}, "attention_mask": {0: "batch", 1: "length"},
            "embeddings": {0: "batch"} if encoder.kind == "biencoder" else {0: "batch", 1: "length"}}
    with atomic_path(path) as tmp, warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's notes on the Python-side branches it freezes
        try:
            torch.onnx.export(graph, (ids, mask), str(tmp), input_names=["input_ids", "attention_mask"],
                              output_names=["embeddings"], dynamic_axes=axes, opset_version=OPSET, dynamo=False)
        finally:
            for module, training in modes.items():
                module.training = training


def quantize_graph(source: Path, path: Path) -> None:
    """int8 dynamic quantisation of ``source`` (per-channel uint8 weights: the most faithful variant measured
    on AVX2, still below the fidelity bound) to ``path`` (temp name + rename)."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))  # "consider pre-processing"
    with atomic_path(path) as tmp:
        quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QUInt8, per_channel=True)


def cached_graph(encoder: Any, quantized: bool = False) -> Path:
    """The cached graph of ``encoder`` (exported, and quantised, on first use)."""
    key = graph_key(encoder)
    fp32 = cache_dir() / f"{key}.onnx"
    if not fp32.is_file():
        export_graph(encoder, fp32)
    if not quantized:
        return fp32
    int8 = cache_dir() / f"{key}-int8.onnx"
    if not int8.is_file():
        quantize_graph(fp32, int8)
    return int8
