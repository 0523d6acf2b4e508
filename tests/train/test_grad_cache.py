"""GradCache gives the gradients of the plain path (dropout off), and replays dropout exactly (dropout on)."""

from __future__ import annotations

import pytest
import torch
from support.trainhelpers import make_prebatched, tiny_model_overrides

from embedctl.config import load_config
from embedctl.data.batches import read_batch
from embedctl.models.encoder import load_encoder
from embedctl.train.engines.base import SingleEngine
from embedctl.train.losses import InfoNCELoss
from embedctl.train.optim import build_optimizer, build_scheduler
from embedctl.train.step import _Out, global_loss, grad_cache_step, plain_step, prepare_inputs
from embedctl.util.ranks import RankEnv

pytestmark = pytest.mark.slow


def _engine(kind: str, dropout: str):
    overrides = [o for o in tiny_model_overrides(kind) if not o.startswith("model.dropout")] + [f"model.dropout={dropout}"]
    cfg = load_config(None, overrides).cfg
    torch.manual_seed(0)
    enc = load_encoder(cfg.model, device="cpu", train=True)
    opt = build_optimizer(enc, cfg.optim)
    eng = SingleEngine(RankEnv(), torch.device("cpu"), None)
    eng.setup(enc, opt, build_scheduler(opt, cfg.optim, 10))
    return eng


def _close(a: torch.Tensor, b: torch.Tensor, name: str) -> None:
    """Equal up to float32 summation order: max abs difference within 1e-5 of the largest entry (+1e-6)."""
    err = (a - b).abs().max().item()
    assert err <= 1e-5 * b.abs().max().item() + 1e-6, f"{name}: max abs diff {err}"


def _grads(eng) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in eng.encoder.named_parameters() if p.grad is not None}
    eng.optimizer.zero_grad(set_to_none=True)
    return out


@pytest.fixture(scope="module", params=["biencoder", "colbert"])
def case(request, module_tmp):
    root = make_prebatched(module_tmp(request.param) / "b", n_batches=1, queries_per_batch=5,
                           kind=request.param)
    return request.param, read_batch(str(root / "batch_00000000"))


def test_grad_cache_equals_plain_path_without_dropout(case):
    kind, batch = case
    eng = _engine(kind, "0")
    inputs = prepare_inputs(batch, eng.encoder.tokenizer, RankEnv(), torch.device("cpu"))
    loss_fn = InfoNCELoss(temperature=0.05)
    loss_plain, _ = plain_step(eng, loss_fn, inputs, None)
    plain = _grads(eng)
    loss_cached, _ = grad_cache_step(eng, loss_fn, inputs, None, chunk_size=2)
    cached = _grads(eng)
    assert loss_cached == pytest.approx(loss_plain, rel=1e-5)
    assert plain.keys() == cached.keys() and len(plain) > 10
    for name in plain:
        _close(cached[name], plain[name], name)


def test_grad_cache_replays_dropout_masks(case):
    """With dropout on, GradCache equals encoding the same chunks with graph in the same RNG order."""
    kind, batch = case
    eng = _engine(kind, "0.1")
    inputs = prepare_inputs(batch, eng.encoder.tokenizer, RankEnv(), torch.device("cpu"))
    loss_fn = InfoNCELoss(temperature=0.05)
    torch.manual_seed(123)
    outs = {"query": [], "document": []}
    for side, ids, att in (("query", inputs.q_ids, inputs.q_att), ("document", inputs.d_ids, inputs.d_att)):
        for i in range(0, ids.shape[0], 2):
            outs[side].append(eng.encoder(ids[i:i + 2], att[i:i + 2], side=side))
    q = _Out(torch.cat([o.embeddings for o in outs["query"]]),
             None if outs["query"][0].mask is None else torch.cat([o.mask for o in outs["query"]]))
    d = _Out(torch.cat([o.embeddings for o in outs["document"]]),
             None if outs["document"][0].mask is None else torch.cat([o.mask for o in outs["document"]]))
    ref_loss, _ = global_loss(loss_fn, q, d, inputs.relevance)
    ref_loss.backward()
    ref = _grads(eng)
    after_ref = torch.get_rng_state()
    torch.manual_seed(123)
    loss, _ = grad_cache_step(eng, loss_fn, inputs, None, chunk_size=2)
    got = _grads(eng)
    assert loss == pytest.approx(float(ref_loss.detach()), rel=1e-5)
    assert torch.equal(torch.get_rng_state(), after_ref)  # RNG ends where the plain chunked pass left it
    for name in ref:
        _close(got[name], ref[name], name)
