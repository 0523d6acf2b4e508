"""train.forward_chunk_size: passes of a few texts give the outputs and gradients of one pass; its default."""

from __future__ import annotations

import pytest
import torch
from support.trainhelpers import tiny_model_overrides

from embedctl.config import load_config
from embedctl.models.encoder import load_encoder
from embedctl.train.loop import forward_chunk_size


def _grads(enc) -> dict[str, torch.Tensor]:
    out = {n: p.grad.clone() for n, p in enc.named_parameters() if p.grad is not None}
    enc.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("kind,native", [("colbert", True), ("biencoder", True), ("colbert", False)])
def test_chunked_passes_give_the_outputs_and_gradients_of_one(kind, native):
    """Chunked passes look the word embeddings up once (``inputs_embeds``): both backbones take that route."""
    overrides = [o for o in tiny_model_overrides(kind) if not o.startswith("model.dropout")] + ["model.dropout=0"]
    overrides.append(f"model.native_bert={str(native).lower()}")
    enc = load_encoder(load_config(None, overrides).cfg.model, device="cpu", train=True)
    assert (type(enc.backbone).__name__ == "NativeBert") == native
    texts = [f"document {i} " + "words " * (3 * i) for i in range(11)]
    ids, att = enc.tokenizer.pad(enc.tokenizer.encode(texts, "document"), "document")
    results = []
    for chunk in (None, 4, 1):
        enc.forward_chunk_size = chunk
        out = enc(ids, att, "document")
        (out.embeddings.float() ** 3).sum().backward()  # any scalar that weighs rows differently
        results.append((out, _grads(enc)))
    (one, g_one), *chunked = results
    for out, grads in chunked:
        assert out.embeddings.shape == one.embeddings.shape
        assert torch.allclose(out.embeddings, one.embeddings, atol=1e-5)
        assert (out.mask is None) == (one.mask is None) and (out.mask is None or torch.equal(out.mask, one.mask))
        for name, g in g_one.items():
            assert torch.allclose(grads[name], g, atol=1e-4 * g.abs().max().item() + 1e-6), name


def test_default_is_eight_on_cpu_and_one_pass_elsewhere():
    assert forward_chunk_size(None, torch.device("cpu")) == 8
    assert forward_chunk_size(None, torch.device("cuda")) is None
    assert forward_chunk_size(3, torch.device("cuda")) == 3
    assert load_config(None, ["train.forward_chunk_size=16"]).cfg.train.forward_chunk_size == 16


@pytest.mark.parametrize("chunk", [None, 4])
def test_dual_encoder_one_lookup_gives_the_outputs_and_gradients_of_two_calls(chunk):
    """DualEncoder looks the word embeddings of queries and documents up at once (one embedding gradient)."""
    from embedctl.train.engines.base import DualEncoder

    overrides = [o for o in tiny_model_overrides("colbert") if not o.startswith("model.dropout")] + ["model.dropout=0"]
    enc = load_encoder(load_config(None, overrides).cfg.model, device="cpu", train=True)
    enc.forward_chunk_size = chunk
    q_ids, q_att = enc.tokenizer.pad(enc.tokenizer.encode([f"query {i}" for i in range(6)], "query"), "query")
    d_ids, d_att = enc.tokenizer.pad(enc.tokenizer.encode([f"doc {i} " + "w " * i for i in range(7)], "document"),
                                     "document")

    def loss(q, d):  # touches both sides and weighs rows differently
        return (q.embeddings ** 3).sum() + (d.embeddings ** 2 * torch.arange(7.0)[:, None, None]).sum()

    q, d = DualEncoder(enc)(q_ids, q_att, d_ids, d_att)
    loss(q, d).backward()
    together = _grads(enc)
    q2, d2 = enc(q_ids, q_att, "query"), enc(d_ids, d_att, "document")
    loss(q2, d2).backward()
    apart = _grads(enc)
    torch.testing.assert_close(q.embeddings, q2.embeddings, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(d.embeddings, d2.embeddings, atol=1e-6, rtol=1e-6)
    assert torch.equal(q.mask, q2.mask) and torch.equal(d.mask, d2.mask)
    assert together.keys() == apart.keys() and "backbone.embeddings.word_embeddings.weight" in together
    for name, g in apart.items():
        torch.testing.assert_close(together[name], g, atol=1e-5 * g.abs().max().item() + 1e-7, rtol=1e-5)
