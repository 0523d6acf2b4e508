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
    contiguous CPU tensors without gradients, H a multiple of 16 up to 1024, and a LayerNorm over H with weight
    and bias (``norm``: ``(normalized_shape, weight, bias, eps)``, encode_backends._norm_args)."""
    shape, weight, bias, _ = norm
    width = x.shape[-1] if x.dim() else 0
    return (y.dtype == torch.bfloat16 and x.dtype == torch.float32 and y.shape == x.shape and tuple(shape) == (width,)
            and 16 <= width <= 1024 and width % 16 == 0 and y.device.type == x.device.type == "cpu"
            and y.is_contiguous() and x.is_contiguous() and not (y.requires_grad or x.requires_grad)
            and weight is not None and bias is not None and weight.dtype == bias.dtype == torch.float32
            and weight.is_contiguous() and bias.is_contiguous() and bf16_attention.available())


def residual_layer_norm(y: torch.Tensor, x: torch.Tensor, norm: tuple) -> torch.Tensor | None:
    """x <- layer_norm(y + x) with ``norm``'s weight, bias and eps, in place; returns its bfloat16 copy, or None
    (x untouched) where the kernel does not apply."""
    if not applies(y, x, norm):
        return None
    _, weight, bias, eps = norm
    out = torch.empty(x.shape, dtype=torch.bfloat16)
    rc = bf16_attention.library().embedctl_residual_layer_norm(
        y.data_ptr(), x.data_ptr(), x.numel() // x.shape[-1], x.shape[-1], weight.data_ptr(), bias.data_ptr(),
        float(eps), out.data_ptr(), torch.get_num_threads())
    return out if rc == 0 else None
