"""A query's products on AMX tiles (embedctl/models/_bf16_linear.c) against oneDNN's packed product (the bits the
bf16 encoder had: the same, on random inputs and on the bundled model's weights) and float64 (within a bfloat16
rounding of the float32 sums); the GELU product within its rounding of the exact GELU, as oneDNN's; None
(oneDNN's product kept) wherever the kernel does not apply; and the bf16 encoder's query vectors with it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from embedctl.models import bf16_linear

pytestmark = pytest.mark.skipif(not bf16_linear.available(),
                                reason="the kernels are not built or this CPU has no AMX-BF16")


def _onednn(x, weight, bias):
    packed = torch.ops.mkldnn._reorder_linear_weight(weight)
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


@pytest.mark.parametrize("n,k", [(1152, 384), (384, 384), (1536, 384), (384, 1536), (16, 32), (48, 64), (80, 96)])
@pytest.mark.parametrize("rows", [1, 5, 16, 17, 32])
def test_the_bits_of_onednns_product(n, k, rows):
    """A query's rows: output blocks in pairs and one alone (n / 16 odd), one row tile and two, a ragged second
    one."""
    g = torch.Generator().manual_seed(n + k + rows)
    weight = (0.05 * torch.randn(n, k, generator=g)).bfloat16()
    bias = (0.1 * torch.randn(n, generator=g)).bfloat16()
    x = torch.randn(1, rows, k, generator=g).bfloat16()
    packed = bf16_linear.pack(weight)
    for b in (bias, None):
        got = bf16_linear.linear(x, packed, b)
        assert got is not None and got.dtype == torch.bfloat16 and got.shape == (1, rows, n)
        assert torch.equal(got, _onednn(x, weight, b))
        exact = x.double() @ weight.double().T + (0 if b is None else b.double())
        # float32 sums (~k ulps of sum |x w|) then one rounding to bfloat16 (half an ulp: 2^-8 of the value)
        bound = 2 ** -8 * exact.abs() + k * 2 ** -23 * (x.double().abs() @ weight.double().abs().T) + 1e-30
        assert ((got.double() - exact).abs() <= bound).all()
        assert (got.double() - F.linear(x, weight, b).double()).abs().max() <= 2 ** -7 * exact.abs().max()


@pytest.mark.parametrize("rows", [33, 48, 64, 77, 128, 256])
def test_more_rows_in_groups_each_row_as_alone(rows):
    """Past 32 rows the kernel runs groups of 32 over each pair of output blocks: every row is what it is alone
    (whatever the batch around it: oneDNN's blocking, and its bits, change with the row count), within float64's
    bound; the C kernel takes up to 256 rows, bf16_linear.linear gives it up to MAX_ROWS."""
    g = torch.Generator().manual_seed(rows)
    weight, bias = (0.05 * torch.randn(400, 384, generator=g)).bfloat16(), (0.1 * torch.randn(400, generator=g)).bfloat16()
    packed = bf16_linear.pack(weight)
    x = torch.randn(rows, 384, generator=g).bfloat16()
    out = torch.empty(rows, 400, dtype=torch.bfloat16)
    from embedctl.models import bf16_attention
    for gelu in (0, 1):
        assert bf16_attention.library().embedctl_bf16_linear(x.data_ptr(), rows, 384, packed.data_ptr(), 400,
                                                             bias.data_ptr(), gelu, out.data_ptr(), 2) == 0
        alone = torch.cat([bf16_linear.linear(x[r:r + 1], packed, bias, gelu=bool(gelu)) for r in range(rows)])
        assert torch.equal(out, alone)
    if rows <= bf16_linear.MAX_ROWS:
        assert torch.equal(bf16_linear.linear(x, packed, bias, gelu=True), out)
    exact = F.gelu(x.double() @ weight.double().T + bias.double())
    assert ((out.double() - exact).abs() <= 2 ** -8 * exact.abs() + 1e-5 * (1 + exact.abs())).all()
    assert bf16_attention.library().embedctl_bf16_linear(x.data_ptr(), 257, 384, packed.data_ptr(), 400,
                                                         None, 0, out.data_ptr(), 1) == -1


def test_the_bundled_models_weights():
    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.encoder import load_encoder

    enc = load_encoder(ModelConfig(kind="colbert", encoder_backend="reference"), device="cpu")
    layer = enc.backbone.encoder.layer[1]
    g = torch.Generator().manual_seed(1)
    for linear in (layer.attention.output.dense, layer.output.dense, layer.intermediate.dense):
        weight, bias = linear.weight.detach().bfloat16(), linear.bias.detach().bfloat16()
        x = torch.randn(32, weight.shape[1], generator=g).bfloat16()
        assert torch.equal(bf16_linear.linear(x, bf16_linear.pack(weight), bias), _onednn(x, weight, bias))


def test_none_where_it_does_not_apply(monkeypatch):
    weight = torch.randn(64, 64).bfloat16()
    packed = bf16_linear.pack(weight)
    x = torch.randn(8, 64).bfloat16()
    assert bf16_linear.linear(x, packed, None) is not None
    too_many = torch.randn(bf16_linear.MAX_ROWS + 1, 64).bfloat16()
    for bad in (too_many, x.float(), torch.randn(8, 32).bfloat16(),
                torch.randn(64, 8).bfloat16().T, torch.randn(8, 64).bfloat16().requires_grad_()):
        assert bf16_linear.linear(bad, packed, None) is None  # too many rows, dtype, width, layout, gradients
    assert bf16_linear.linear(x, packed, torch.zeros(64)) is None  # a float32 bias
    assert bf16_linear.linear(x, packed, torch.zeros(32).bfloat16()) is None
    for shape in ((40, 64), (64, 48), (8, 64)):  # n not a multiple of 16, k not of 32, too few outputs
        assert bf16_linear.pack(torch.randn(*shape).bfloat16()) is None
    assert bf16_linear.pack(weight.float()) is None
    monkeypatch.setattr(bf16_linear, "tiles", False)
    assert bf16_linear.linear(x, packed, None) is None


def test_the_gelu_within_its_rounding_of_the_exact_one():
    """gelu=True: the exact (erf) GELU of the float32 sums, rounded once: within half a bfloat16 ulp plus the erf
    approximation's ~1e-7 of float64's, as accurate as oneDNN's post-op (the same outputs but for a few in the
    GELU's far negative tail, where both are ~1e-6 from the exact value and their erfs differ)."""
    g = torch.Generator().manual_seed(3)
    weight, bias = (0.05 * torch.randn(1536, 384, generator=g)).bfloat16(), (0.1 * torch.randn(1536, generator=g)).bfloat16()
    packed, onednn = bf16_linear.pack(weight), torch.ops.mkldnn._reorder_linear_weight(weight)
    for scale in (1.0, 3.0, 10.0):
        x = (scale * torch.randn(32, 384, generator=g)).bfloat16()
        got = bf16_linear.linear(x, packed, bias, gelu=True)
        exact = F.gelu(x.double() @ weight.double().T + bias.double())
        assert ((got.double() - exact).abs() <= 2 ** -8 * exact.abs() + 1e-5 * (1 + exact.abs())).all()
        theirs = torch.ops.mkldnn._linear_pointwise(x, onednn, bias, "gelu", [], "none")
        assert ((theirs.double() - exact).abs() <= 2 ** -8 * exact.abs() + 1e-5 * (1 + exact.abs())).all()
        if scale == 1.0:
            assert (got == theirs).float().mean() > 0.999
    assert torch.equal(bf16_linear.linear(x, packed, bias, gelu=False), _onednn(x, weight, bias))


def test_a_querys_vectors_with_the_tiles(monkeypatch):
    """The bf16 encoder takes the kernel for a query's products (Bf16Stack and the twin's modules alike), the
    feed-forward's GELU too: the vectors within cosine 0.9999 of oneDNN's products' (those without the GELU give
    oneDNN's bits: above); a batch of documents (more rows) keeps oneDNN."""
    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.encoder import load_encoder

    enc = load_encoder(ModelConfig(kind="colbert", encoder_backend="bf16"), device="cpu")
    calls, real = [], bf16_linear.run

    def taken(x, packed, bias, gelu=False):  # the products the kernel took (every call reaches run): (rows, gelu)
        y = real(x, packed, bias, gelu)
        if y is not None:
            calls.append((x.numel() // x.shape[-1], gelu))
        return y

    monkeypatch.setattr(bf16_linear, "run", taken)
    query = "do statins lower the risk of heart failure?"
    with_tiles = torch.as_tensor(enc.encode_queries([query])[0])
    assert calls and max(rows for rows, _ in calls) <= bf16_linear.MAX_ROWS
    assert sum(gelu for _, gelu in calls) == len(enc.backbone.encoder.layer)  # one GELU product a layer
    calls.clear()
    enc.encode_documents(["a document " * 40] * 4)
    assert not calls
    monkeypatch.setattr(bf16_linear, "tiles", False)
    without = torch.as_tensor(enc.encode_queries([query])[0])
    assert (with_tiles * without).sum(-1).min() > 0.9999


def test_the_same_bits_on_any_thread_count():
    g = torch.Generator().manual_seed(7)
    weight, bias = (0.05 * torch.randn(1552, 384, generator=g)).bfloat16(), torch.randn(1552, generator=g).bfloat16()
    x = torch.randn(32, 384, generator=g).bfloat16()
    packed, before = bf16_linear.pack(weight), torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        want = bf16_linear.linear(x, packed, bias)
        for threads in (2, 3, 64):
            torch.set_num_threads(threads)
            assert torch.equal(bf16_linear.linear(x, packed, bias), want)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(want, _onednn(x, weight, bias))
