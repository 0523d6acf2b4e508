"""ctypes front for the bf16 encoder's residual LayerNorm (embedctl/models/_bf16_norm.c): BERT's
``LayerNorm(dense(.) + residual)`` from a product's bfloat16 output and the float32 residual to the new
residual and its bfloat16 copy, in one pass where torch makes three (the add, layer_norm, the cast).

The reference is torch's ``layer_norm(y + x)`` then ``.to(torch.bfloat16)`` (what
:class:`~embedctl.models.encode_backends.Bf16Stack` runs otherwise): within a few float32 ulps of it
(tests/models/test_bf16_norm.py). :func:`residual_layer_norm` answers None wherever the kernel does not
apply (not built, a CPU without AVX512_BF16, another dtype, layout or width), and the caller keeps torch's ops.
"""

from __future__ import annotations

import torch

from embedctl.models import bf16_attention


def applies(y: torch.Tensor, x: torch.Tensor, norm: tuple) -> bool:
    """Whether :func:`residual_layer_norm` takes these: y bfloat16 and x float32 of one [..., H] shape, both
    contiguous CPU tensors without gradients, and a LayerNorm :func:`norm_applies` takes over that H."""
    return (y.dtype == torch.bfloat16 and y.shape == x.shape and y.device.type == "cpu" and y.is_contiguous()
            and not y.requires_grad and residual_applies(x) and norm_applies(norm, x.shape[-1]))


def residual_applies(x: torch.Tensor) -> bool:
    """The residual's part of :func:`applies`: float32, contiguous, on the CPU, no gradients, H a multiple of 16
    up to 1024, and the kernel built for this CPU."""
    width = x.shape[-1] if x.dim() else 0
    return (x.dtype == torch.float32 and 16 <= width <= 1024 and width % 16 == 0 and x.device.type == "cpu"
            and x.is_contiguous() and not x.requires_grad and bf16_attention.available())


def norm_applies(norm: tuple, width: int | None = None) -> bool:
    """The LayerNorm's part of :func:`applies` (``norm``: ``(normalized_shape, weight, bias, eps)``,
    encode_backends._norm_args): one dimension (``width`` when given), with float32 contiguous weight and bias."""
    shape, weight, bias, _ = norm
    return (len(tuple(shape)) == 1 and (width is None or tuple(shape) == (width,)) and weight is not None
            and bias is not None and weight.dtype == bias.dtype == torch.float32 and weight.is_contiguous()
            and bias.is_contiguous() and weight.shape == bias.shape == tuple(shape))


def residual_layer_norm(y: torch.Tensor, x: torch.Tensor, norm: tuple) -> torch.Tensor | None:
    """x <- layer_norm(y + x) with ``norm``'s weight, bias and eps, in place; returns its bfloat16 copy, or None
    (x untouched) where the kernel does not apply."""
    return run(y, x, norm) if applies(y, x, norm) else None


def run(y: torch.Tensor, x: torch.Tensor, norm: tuple) -> torch.Tensor | None:
    """The kernel's call for arguments :func:`applies` takes (a caller that checked once for many calls: a stack
    of layers), or None where the kernel declines."""
    _, weight, bias, eps = norm
    out = torch.empty(x.shape, dtype=torch.bfloat16)
    rc = bf16_attention.library().embedctl_residual_layer_norm(
        y.data_ptr(), x.data_ptr(), x.numel() // x.shape[-1], x.shape[-1], weight.data_ptr(), bias.data_ptr(),
        float(eps), out.data_ptr(), torch.get_num_threads())
    return out if rc == 0 else None
