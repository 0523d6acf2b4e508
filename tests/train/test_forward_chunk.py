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
