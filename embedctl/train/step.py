"""One training step's forward/backward: this rank's slice -> gathered global embeddings -> global loss.

Two paths with the same result: :func:`plain_step` (one forward with graph) and :func:`grad_cache_step`
(GradCache: encode in chunks without graph, take d loss / d embeddings, re-encode each chunk with graph
under the same RNG state and back-propagate those gradients).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from embedctl.errors import EmbedctlError
from embedctl.train.distributed import gather_with_grad, slice_bounds
from embedctl.train.losses.combined import TrainingLoss
from embedctl.train.losses.infonce import InfoNCELoss, LossStats, maxsim_scorer
from embedctl.train.runtime import autocast, restore_torch_rng, save_torch_rng
from embedctl.util.ranks import RankEnv

LossFn = InfoNCELoss | TrainingLoss


@dataclass
class StepInputs:
    """This rank's padded slice of one global batch, plus the global relevance matrix."""

    q_ids: torch.Tensor        # [q_local, Lq] long
    q_att: torch.Tensor        # [q_local, Lq] long
    d_ids: torch.Tensor        # [d_local, Ld] long
    d_att: torch.Tensor        # [d_local, Ld] long
    relevance: torch.Tensor    # [Q, D] int8, global
    n_queries: int
    teacher: torch.Tensor | None = None   # [Q, D] float32 teacher scores (NaN = unscored), global, or None


def prepare_inputs(batch, tokenizer, info: RankEnv, device: torch.device) -> StepInputs:
    """Cut this rank's contiguous slice of queries and of documents out of ``batch`` and pad them.

    batch: embedctl.data.batches.Batch (every rank reads the same global batch);
    tokenizer: embedctl.models.TextTokenizer (its ``pad`` adds ColBERT [MASK] query augmentation).
    """
    nq, nd = len(batch.query_tokens), len(batch.document_tokens)
    if nq < info.world or nd < info.world:
        raise EmbedctlError(
            f"a training batch has {nq} queries and {nd} documents, fewer than the {info.world} ranks",
            hint="use fewer ranks, a smaller data.split_factor, or larger batches (prebatch.queries_per_batch)",
        )
    qs, qe = slice_bounds(nq, info.rank, info.world)
    ds, de = slice_bounds(nd, info.rank, info.world)
    q_ids, q_att = tokenizer.pad([t.tolist() for t in batch.query_tokens[qs:qe]], "query")
    d_ids, d_att = tokenizer.pad([t.tolist() for t in batch.document_tokens[ds:de]], "document")
    rel = torch.as_tensor(batch.relevance, dtype=torch.int8)
    teacher = None if batch.teacher_scores is None else torch.as_tensor(batch.teacher_scores).to(device)
    return StepInputs(q_ids.to(device), q_att.to(device), d_ids.to(device), d_att.to(device), rel.to(device), nq, teacher)


def global_loss(loss_fn: LossFn, q_out, d_out, relevance: torch.Tensor,
                teacher: torch.Tensor | None = None) -> tuple[torch.Tensor, LossStats]:
    """Gather both sides over ranks and compute the loss over the global batch.

    q_out / d_out: objects with ``.embeddings`` ([n, dim] or ColBERT [n, L, dim]) and ``.mask`` (None or
    [n, L] bool). ColBERT masks are gathered too (padding from other ranks is masked). ``teacher``: the
    global [Q, D] teacher scores, passed on to a loss that distills (``TrainingLoss``).
    """
    q = gather_with_grad(q_out.embeddings.float())  # scores and softmax in fp32 even under autocast
    d = gather_with_grad(d_out.embeddings.float())
    extra = {"teacher": teacher} if isinstance(loss_fn, TrainingLoss) else {}
    if q.ndim == 2:
        return loss_fn(q, d, relevance, **extra)
    q_mask = _gather_mask(q_out.mask, q_out.embeddings)
    d_mask = _gather_mask(d_out.mask, d_out.embeddings)
    return loss_fn(q, d, relevance, score_fn=maxsim_scorer(d_mask, q_mask), **extra)


def _gather_mask(mask: torch.Tensor | None, emb: torch.Tensor) -> torch.Tensor:
    if mask is None:
        mask = torch.ones(emb.shape[:2], dtype=torch.bool, device=emb.device)
    return gather_with_grad(mask.to(torch.uint8)).bool()


@dataclass
class _Out:
    """Embeddings (+ mask) of one side, re-assembled from chunks."""

    embeddings: torch.Tensor
    mask: torch.Tensor | None


def plain_step(engine, loss_fn: LossFn, inputs: StepInputs, amp_dtype) -> tuple[float, LossStats]:
    """Forward both sides with graph, global loss, backward (the engine fixes the gradient scale)."""
    with engine.sync(True):
        with autocast(engine.device, amp_dtype):
            q_out, d_out = engine.forward(inputs.q_ids, inputs.q_att, inputs.d_ids, inputs.d_att)
        loss, stats = global_loss(loss_fn, q_out, d_out, inputs.relevance, inputs.teacher)
        engine.backward(loss)
    return float(loss.detach()), stats


def grad_cache_step(engine, loss_fn: LossFn, inputs: StepInputs, amp_dtype, chunk_size: int):
    """GradCache: same loss and gradients as :func:`plain_step` with memory bounded by ``chunk_size`` texts.

    1. encode each chunk of queries then documents without graph, saving the RNG state before each chunk;
    2. leaf copies of the embeddings -> global loss -> backward gives d loss / d embeddings;
    3. per chunk: restore its RNG state (same dropout masks), re-encode with graph, backward
       ``sum(embeddings * cached_grad)``; gradient sync (DDP) only on the last chunk.
    """
    chunks = _chunks(inputs, chunk_size)
    cached, rng = [], []
    with torch.no_grad():
        for side, ids, att in chunks:
            rng.append(save_torch_rng(engine.device))
            cached.append(_encode(engine, side, ids, att, amp_dtype))
    q_out = _assemble([o for (side, _, _), o in zip(chunks, cached, strict=True) if side == "query"])
    d_out = _assemble([o for (side, _, _), o in zip(chunks, cached, strict=True) if side == "document"])
    with torch.enable_grad():
        loss, stats = global_loss(loss_fn, q_out, d_out, inputs.relevance, inputs.teacher)
        loss.backward()
    grads = _split_grads(q_out.embeddings.grad, d_out.embeddings.grad, chunks)
    end_state = save_torch_rng(engine.device)
    for i, ((side, ids, att), grad) in enumerate(zip(chunks, grads, strict=True)):
        restore_torch_rng(rng[i], engine.device)
        with engine.sync(i == len(chunks) - 1):
            out = _encode(engine, side, ids, att, amp_dtype)
            emb = out.embeddings
            engine.backward((emb.float() * grad[:, : emb.shape[1]] if emb.ndim == 3 else emb.float() * grad).sum())
    restore_torch_rng(end_state, engine.device)
    return float(loss.detach()), stats


def _chunks(inputs: StepInputs, size: int) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    out = []
    for side, ids, att in (("query", inputs.q_ids, inputs.q_att), ("document", inputs.d_ids, inputs.d_att)):
        out += [(side, ids[i: i + size], att[i: i + size]) for i in range(0, ids.shape[0], size)]
    return out


def _encode(engine, side: str, ids: torch.Tensor, att: torch.Tensor, amp_dtype):
    with autocast(engine.device, amp_dtype):
        if side == "query":
            return engine.forward(ids, att, None, None)[0]
        return engine.forward(None, None, ids, att)[1]


def _assemble(outs: list) -> _Out:
    """Concatenate chunk outputs (detached) into one leaf tensor that collects d loss / d embeddings."""
    emb = torch.cat([o.embeddings.detach().float() for o in outs]).requires_grad_(True)
    masks = [o.mask for o in outs]
    return _Out(emb, None if masks[0] is None else torch.cat(masks))


def _split_grads(q_grad: torch.Tensor, d_grad: torch.Tensor, chunks) -> list[torch.Tensor]:
    out, offsets = [], {"query": 0, "document": 0}
    for side, ids, _ in chunks:
        grad = q_grad if side == "query" else d_grad
        start = offsets[side]
        out.append(grad[start: start + ids.shape[0]])
        offsets[side] = start + ids.shape[0]
    return out
