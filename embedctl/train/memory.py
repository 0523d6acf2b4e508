"""Memory planned, not killed: the peak of one training step estimated before the first step.

A newcomer's 64 queries x 4 negatives step on all-MiniLM-L6-v2 was killed by the kernel at 20 GB of 24
("Killed", nothing else); GradCache with 32-text chunks then ran at 5.3 GB. :func:`plan_step_memory`
estimates the peak of a step from the batch (queries, documents), the lengths, the model's shape and
size, the engine and the chunking, compares it with the memory the process may use (``train.max_memory_gb``,
else the machine's available memory, psutil; a GPU's free memory) and either keeps the step, turns on
GradCache (``train.grad_cache.chunk_size``) with a note naming the chunk size, or refuses naming the keys
that would fit.

The estimate (bytes, one process) is the sum of
- ``resident``: what the process holds when the plan is made (model, tokenizer, data, torch itself),
  measured (RSS on CPU, allocated memory on a GPU);
- ``states``: gradients (4 bytes a parameter), AdamW's two moments (8), DDP's gradient buckets (4);
  DeepSpeed ZeRO partitions the moments (stage >= 1) and the gradients (stage >= 2) over the ranks;
- ``activations``: what autograd keeps for backward, per encoder layer and text of L tokens
  ``L x (A_HIDDEN x hidden + A_INTER x intermediate) + A_ATTN x heads x L^2`` floats, for every text of the
  rank's slice (forward_chunk_size passes keep their graphs) or for one GradCache chunk;
- ``loss``: the score matrix (ColBERT: queries x documents x Lq x Ld token similarities, or per loss chunk).
The coefficients are fitted to RSS high-water marks of real steps (bench/bench_memory.py: estimate vs real
peak per setting, target within 20%); lengths are taken at their maximum (model.*_max_length), so the
estimate leans high on batches of short texts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from embedctl.errors import EmbedctlError

GIB = 1024 ** 3
# floats kept for backward per token and layer, per hidden unit / intermediate unit / head x key
# (fitted: bench/bench_memory.py, all-MiniLM-L6-v2 fp32 on CPU, eager attention)
A_HIDDEN = 13.0
A_INTER = 2.0
A_ATTN = 2.5
TRANSIENT = 1.5    # the backward's short-lived buffers and the allocator's slack on top of what is kept: fitted to
                   # bench_memory's single_q8 (real 5.18 GiB RSS vs 4.03 estimated at 1.15); the other settings check it
BF16_FACTOR = 0.6  # autocast keeps most activations in 16 bits, a few in fp32


@dataclass
class StepShape:
    """One training step of one rank: texts encoded, their padded lengths, the global batch for the loss."""

    queries: int             # global batch
    documents: int
    query_length: int
    doc_length: int
    world: int = 1
    local_world: int = 1     # ranks on this machine (they share its memory)


@dataclass
class ModelShape:
    params: int
    hidden: int
    layers: int
    heads: int
    intermediate: int
    out_dim: int
    kind: str                # biencoder | colbert

    @classmethod
    def of(cls, encoder) -> ModelShape:
        c = encoder.backbone.config
        hidden = int(c.hidden_size)
        # ZeRO-3 partitions the parameters (each keeps its full size in ds_numel)
        return cls(params=sum(int(getattr(p, "ds_numel", p.numel())) for p in encoder.parameters()), hidden=hidden,
                   layers=int(getattr(c, "num_hidden_layers", 12)), heads=int(getattr(c, "num_attention_heads", 12)),
                   intermediate=int(getattr(c, "intermediate_size", 4 * hidden)), out_dim=int(encoder.dim),
                   kind=encoder.kind)


@dataclass
class MemoryEstimate:
    parts: dict[str, float] = field(default_factory=dict)   # bytes

    @property
    def total(self) -> float:
        return sum(self.parts.values())

    def describe(self) -> str:
        return f"~{self.total / GIB:.2f} GiB (" + ", ".join(f"{k} {v / GIB:.2f}" for k, v in self.parts.items()) + ")"


def text_activation_bytes(model: ModelShape, length: int, amp: bool) -> float:
    """Bytes autograd keeps for one text of ``length`` tokens through the whole encoder."""
    per_layer = length * (A_HIDDEN * model.hidden + A_INTER * model.intermediate) + A_ATTN * model.heads * length ** 2
    floats = model.layers * per_layer + 3 * length * model.hidden  # + embeddings (sum, layer norm, dropout)
    return 4.0 * floats * (BF16_FACTOR if amp else 1.0)


def estimate_step(shape: StepShape, model: ModelShape, *, resident: float, engine: str = "single",
                  zero_stage: int = 0, grad_cache_chunk: int | None = None, loss_chunk: int | None = None,
                  amp: bool = False) -> MemoryEstimate:
    """The peak bytes of one process during one step (see the module docstring for each part)."""
    p = float(model.params)
    grads, moments, buckets = 4 * p, 8 * p, 0.0
    if engine == "ddp":
        buckets = 4 * p
    elif engine == "deepspeed":
        moments = 8 * p / shape.world if zero_stage >= 1 else moments
        grads = 4 * p / shape.world if zero_stage >= 2 else grads
        buckets = 4 * p  # its flat fp32 gradient/partition buffers
    q_local = math.ceil(shape.queries / shape.world)
    d_local = math.ceil(shape.documents / shape.world)
    q_text = text_activation_bytes(model, shape.query_length, amp)
    d_text = text_activation_bytes(model, shape.doc_length, amp)
    if grad_cache_chunk:
        # one chunk with graph at a time (documents are the longer side), plus every text's cached
        # embedding and its gradient
        kept = min(grad_cache_chunk, max(d_local, 1)) * d_text if d_local else grad_cache_chunk * q_text
        per_text_out = model.out_dim * (shape.doc_length if model.kind == "colbert" else 1) * 4 * 2
        kept += (shape.queries + shape.documents) * per_text_out
    else:
        kept = q_local * q_text + d_local * d_text
    if model.kind == "colbert":
        rows = min(loss_chunk or shape.queries, shape.queries)
        loss = 3 * 4.0 * rows * shape.documents * shape.query_length * shape.doc_length
    else:
        loss = 3 * 4.0 * shape.queries * shape.documents
    return MemoryEstimate({"resident": float(resident), "states": grads + moments + buckets,
                           "activations": kept * TRANSIENT, "loss": loss})


@dataclass
class MemoryPlan:
    estimate: MemoryEstimate
    limit: float                 # bytes one process may use
    limit_source: str
    chunk_size: int | None       # GradCache chunk to train with (None: plain steps)
    note: str | None = None      # printed when the plan changed something


def plan_step_memory(shape: StepShape, model: ModelShape, *, resident: float, available: float,
                     limit_source: str, configured_chunk: int | None, **kw) -> MemoryPlan:
    """Keep the configured step when it fits ``available`` bytes (per process); else the largest GradCache
    chunk (a power of two) that fits, with a note; else refuse naming the keys that would fit."""
    first = estimate_step(shape, model, resident=resident, grad_cache_chunk=configured_chunk, **kw)
    if first.total <= available:
        return MemoryPlan(first, available, limit_source, configured_chunk)
    size = f"a step of {shape.queries} queries x {shape.documents} documents ({shape.query_length}/{shape.doc_length} tokens)"
    need = f"needs {first.describe()}, {available / GIB:.2f} GiB {limit_source}"
    texts = max(shape.queries, shape.documents)
    start = 2 ** int(math.log2(max(1, min(configured_chunk or texts, texts) - 1))) if texts > 1 else 1
    chunk = start
    while chunk >= 1:
        est = estimate_step(shape, model, resident=resident, grad_cache_chunk=chunk, **kw)
        if est.total <= available:
            note = (f"memory plan: {size} {need}: training with GradCache, train.grad_cache.chunk_size={chunk} "
                    f"(estimated peak {est.describe()}); the same loss and gradients, one more forward pass per text. Set "
                    f"train.grad_cache.chunk_size yourself, or train.max_memory_gb, to choose")
            return MemoryPlan(est, available, limit_source, chunk, note)
        chunk //= 2
    smallest = estimate_step(shape, model, resident=resident, grad_cache_chunk=1, **kw)
    raise EmbedctlError(
        f"memory plan: {size} {need}; even train.grad_cache.chunk_size=1 needs {smallest.total / GIB:.2f} GiB",
        hint="lower what stays whatever the batch: a smaller model, engine.name=deepspeed engine.zero_stage=2 "
             "(moments and gradients partitioned over ranks), train.precision=bf16, model.doc_max_length; or raise "
             "train.max_memory_gb if the machine really has the memory",
        exit_code=2,
    )


def available_bytes(device, max_memory_gb: float | None, local_world: int = 1) -> tuple[float, str]:
    """Bytes one process may use and where the figure comes from (for the messages)."""
    if max_memory_gb:
        return max_memory_gb * GIB, "allowed (train.max_memory_gb)"
    if device.type == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(device)
        return float(free + torch.cuda.memory_allocated(device)), "on the GPU"
    import psutil

    mine = psutil.Process().memory_info().rss
    # the ranks on this machine share what is available; each already holds its resident part
    return float(psutil.virtual_memory().available / max(1, local_world) + mine), "available on this machine"


def resident_bytes(device) -> float:
    if device.type == "cuda":
        import torch

        return float(torch.cuda.memory_allocated(device))
    import psutil

    return float(psutil.Process().memory_info().rss)
