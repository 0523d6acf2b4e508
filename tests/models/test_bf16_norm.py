"""The bf16 encoder's one-pass residual LayerNorm (embedctl/models/_bf16_norm.c) against torch's add, layer_norm
and cast (its reference) on random inputs and on a LayerNorm of the bundled model; the same bits on any thread
count; None (torch's ops kept, x untouched) wherever it does not apply."""

from __future__ import annotations

import pytest
import torch

from embedctl.models import bf16_attention, bf16_norm

pytestmark = pytest.mark.skipif(not bf16_attention.available(),
                                reason="the kernels are not built or this CPU has no AVX512_BF16")


def _inputs(shape, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    width = shape[-1]
    y = (scale * torch.randn(*shape, generator=g)).bfloat16()
    x = scale * torch.randn(*shape, generator=g)
    norm = ((width,), 1 + 0.1 * torch.randn(width, generator=g), 0.1 * torch.randn(width, generator=g), 1e-12)
    return y, x, norm


@pytest.mark.parametrize("shape", [(2, 7, 384), (1, 32, 384), (3, 16), (5, 1024), (32, 180, 384), (4, 5, 768)])
@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_within_float32_ulps_of_torchs_three_passes(shape, scale):
    y, x, norm = _inputs(shape, scale=scale)
    want = torch.layer_norm(y + x, *norm)
    got_x = x.clone()
    got_b = bf16_norm.residual_layer_norm(y, got_x, norm)
    assert got_b is not None and got_b.dtype == torch.bfloat16 and got_b.shape == x.shape
    # LayerNorm's output is O(1): a few float32 ulps of it, whatever the input's scale
    assert (got_x - want).abs().max() <= 1e-5 * (1 + want.abs().max())
    # the bfloat16 copy is got_x rounded to nearest (ties to even), as torch's .to() rounds
    assert torch.equal(got_b, got_x.to(torch.bfloat16))
    # ... so it differs from torch's cast only where the float32 values straddle a rounding point
    assert (got_b != want.to(torch.bfloat16)).float().mean() < 1e-3


def test_a_layer_norm_of_the_bundled_model():
    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.encode_backends import _norm_args
    from embedctl.models.encoder import load_encoder

    enc = load_encoder(ModelConfig(kind="colbert", encoder_backend="reference"), device="cpu")
    norm = _norm_args(enc.backbone.encoder.layer[2].output)
    y, x, _ = _inputs((4, 50, norm[1].shape[0]), seed=3)
    want = torch.layer_norm(y + x, *norm)
    got = x.clone()
    assert bf16_norm.residual_layer_norm(y, got, norm) is not None
    assert (got - want).abs().max() <= 1e-5 * (1 + want.abs().max())


def test_same_bits_on_any_thread_count():
    y, x, norm = _inputs((16, 70, 384))
    before = torch.get_num_threads()
    outs = []
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            xi = x.clone()
            outs.append((xi, bf16_norm.residual_layer_norm(y, xi, norm)))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(outs[0][0], a) and torch.equal(outs[0][1], b) for a, b in outs[1:])


def test_returns_none_and_leaves_x_where_it_does_not_apply():
    y, x, norm = _inputs((2, 8, 384))
    keep = x.clone()
    assert bf16_norm.residual_layer_norm(y.float(), x, norm) is None  # y not bfloat16
    assert bf16_norm.residual_layer_norm(y, x.double(), norm) is None  # x not float32
    assert bf16_norm.residual_layer_norm(y[:, :4], x, norm) is None  # shapes differ
    assert bf16_norm.residual_layer_norm(y.transpose(0, 1), x.transpose(0, 1), norm) is None  # not contiguous
    assert bf16_norm.residual_layer_norm(y, x, ((384,), None, None, 1e-12)) is None  # no affine parameters
    assert bf16_norm.residual_layer_norm(y, x, ((2, 8, 384), *norm[1:])) is None  # a norm over more than H
    y12, x12, norm12 = _inputs((2, 8, 12))
    assert bf16_norm.residual_layer_norm(y12, x12, norm12) is None  # width not a multiple of 16
    assert torch.equal(x, keep)
    with torch.enable_grad():
        xg = x.clone().requires_grad_()
        assert bf16_norm.residual_layer_norm(y, xg, norm) is None
