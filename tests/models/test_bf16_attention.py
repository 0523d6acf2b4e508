"""The attention kernel of the bf16 encoder (embedctl/models/_bf16_attention.c: sequences of up to 512 tokens),
both of its paths (AVX-512, and AMX tiles where the CPU has them), against the float32 arithmetic of the same
bfloat16 inputs and against torch's SDPA (its reference), on random inputs and on the bf16 encoder's own layers;
the same bits on any thread count; None (SDPA kept) wherever it does not apply."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from embedctl.config.sections.model import ModelConfig
from embedctl.models import bf16_attention
from embedctl.models.encoder import load_encoder
from embedctl.models.native_bert import FusedQKVAttention

pytestmark = pytest.mark.skipif(not bf16_attention.available(),
                                reason="the kernel is not built or this CPU has no AVX512_BF16")

SHAPES = [(1, 32, 12, 32), (3, 17, 4, 32), (2, 64, 2, 64), (1, 1, 3, 32), (2, 48, 12, 32), (4, 5, 1, 64),
          (2, 180, 12, 32), (1, 257, 2, 64), (1, 512, 1, 32)]


def _inputs(batch, length, heads, dim, masked, seed=0):
    g = torch.Generator().manual_seed(seed)
    qkv = (2 * torch.randn(batch, length, 3 * heads * dim, generator=g)).bfloat16()
    mask = None
    if masked:
        keep = torch.rand(batch, length, generator=g) > 0.3
        keep[:, 0] = True  # every sequence keeps a key
        mask = keep[:, None, None, :]
    return qkv, mask


def _split(qkv, heads):
    b, n, width = qkv.shape
    return qkv.view(b, n, 3, heads, width // (3 * heads)).permute(2, 0, 3, 1, 4)


def _exact(qkv, heads, mask, of_abs=False):
    """float32 attention of the bfloat16 inputs (the products are exact in float32); ``of_abs``: of |v| instead,
    sum_j p_j |v_j| per output (what rounding the weights p_j to bfloat16 can move an output by)."""
    q, k, v = (t.float() for t in _split(qkv, heads))
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    b, n = qkv.shape[:2]
    return (scores.softmax(-1) @ (v.abs() if of_abs else v)).transpose(1, 2).reshape(b, n, -1)


PATHS = ["avx512", pytest.param("amx", marks=pytest.mark.skipif(not bf16_attention.amx_available(),
                                                                 reason="this CPU has no AMX-BF16 tiles"))]


def _attend(qkv, heads, mask, path):
    keep = None if mask is None else bf16_attention.key_bytes(mask, qkv.shape[0], qkv.shape[1])
    return bf16_attention.attend(qkv, heads, keep, path)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_within_a_bfloat16_rounding_of_the_float32_arithmetic_and_of_sdpa(shape, masked, path):
    batch, length, heads, dim = shape
    qkv, mask = _inputs(*shape, masked)
    with torch.inference_mode():
        got = _attend(qkv, heads, mask, path)
        q, k, v = _split(qkv, heads)
        sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(batch, length, -1)
    exact = _exact(qkv, heads, mask)
    assert got is not None and got.dtype == torch.bfloat16 and got.shape == (batch, length, heads * dim)
    # one rounding to bfloat16 (half an ulp: 2^-8 of the value) over float32 sums; on AMX tiles each weight is
    # also rounded to bfloat16 before p . v (2^-9 of itself), as SDPA's own bfloat16 path does
    weights = _exact(qkv, heads, mask, of_abs=True) * 2.0 ** -8 if path == "amx" else 0.0
    assert ((got.float() - exact).abs() <= exact.abs() * 2.0 ** -8 + weights + 1e-5).all()
    scale = exact.abs().max()
    assert (got.float() - sdpa.float()).abs().max() <= scale * 2.0 ** -7


def test_the_default_path_is_amx_where_the_cpu_has_it():
    qkv, mask = _inputs(2, 40, 4, 32, masked=True)
    want = "amx" if bf16_attention.amx_available() else "avx512"
    assert torch.equal(_attend(qkv, 4, mask, "auto"), _attend(qkv, 4, mask, want))
    if not bf16_attention.amx_available():
        assert _attend(qkv, 4, mask, "amx") is None  # asked for explicitly on a CPU without the tiles


@pytest.mark.parametrize("path", PATHS)
def test_same_bits_on_any_thread_count(path):
    qkv, mask = _inputs(8, 40, 12, 32, masked=True)
    before = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            outs.append(_attend(qkv, 12, mask, path))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(outs[0], o) for o in outs[1:])


def test_returns_none_where_it_does_not_apply():
    qkv, _ = _inputs(1, 32, 12, 32, masked=False)
    assert bf16_attention.attention(torch.randn(1, 513, 3 * 12 * 32).bfloat16(), 12) is None  # too long
    assert bf16_attention.attention(torch.randn(1, 8, 3 * 4 * 48).bfloat16(), 4) is None  # head size 48
    assert bf16_attention.attention(qkv.float(), 12) is None  # not bfloat16
    assert bf16_attention.attention(qkv[:, :, :100], 12) is None  # not 3 x heads x dim wide
    assert bf16_attention.attention(qkv, 12, torch.zeros(1, 1, 1, 32)) is None  # an additive float mask
    assert bf16_attention.attention(qkv, 12, torch.ones(1, 1, 32, 32, dtype=torch.bool)) is None  # per query
    no_key = torch.zeros(1, 1, 1, 32, dtype=torch.bool)
    assert bf16_attention.attention(qkv, 12, no_key) is None  # a sequence with nothing to attend to
    with torch.enable_grad():
        assert bf16_attention.attention(qkv.clone().requires_grad_(), 12) is None


def test_the_bf16_encoder_attends_on_the_kernel_within_the_bound_of_sdpa(monkeypatch):
    """The bf16 backend's twin takes the kernel for queries (32 tokens) and documents; their vectors with and
    without it agree to cosine >= 0.9999."""
    enc = load_encoder(ModelConfig(kind="colbert", encoder_backend="bf16"), device="cpu")
    modules = [m for m in enc._runner._backbone().modules() if isinstance(m, FusedQKVAttention)]
    assert modules and all(m.attention_kernel for m in modules)
    calls = []
    real = bf16_attention.attend  # the kernel's call, from the twin's modules or from encode_backends.Bf16Stack
    monkeypatch.setattr(bf16_attention, "attend", lambda *a, **k: calls.append(a[0].shape) or real(*a, **k))
    texts = ["what causes the aurora borealis?", "vitamin c deficiency and collagen"]
    docs = [" ".join(["word"] * 120), "A short one.", "Collagen synthesis needs vitamin C; scurvy follows."]
    with_kernel = enc.encode_queries(texts), enc.encode_documents(docs, batch_size=2)[0]
    assert calls[0][1] == 32 and any(shape[1] > 64 for shape in calls)
    for m in modules:
        m.attention_kernel = False
    without = enc.encode_queries(texts), enc.encode_documents(docs, batch_size=2)[0]
    for a, b in zip(with_kernel, without, strict=True):
        a, b = np.asarray(a).reshape(-1, enc.dim), np.asarray(b).reshape(-1, enc.dim)
        keep = np.linalg.norm(b, axis=1) > 0
        cos = (a[keep] * b[keep]).sum(1) / np.linalg.norm(a[keep], axis=1) / np.linalg.norm(b[keep], axis=1)
        assert cos.min() >= 0.9999


def test_a_key_mask_shared_by_the_batch_equals_it_repeated():
    qkv, mask = _inputs(3, 24, 4, 32, masked=True)
    shared = mask[:1]
    assert torch.equal(bf16_attention.attention(qkv, 4, shared),
                       bf16_attention.attention(qkv, 4, shared.expand(3, 1, 1, 24).contiguous()))
