"""ctypes front for the bf16 encoder's products over a few rows on AMX tiles (embedctl/models/_bf16_linear.c): a
query's ``x @ w^T + bias`` (or its GELU) in bfloat16 with float32 sums, rounded once to bfloat16, the weight laid
out once as tiles (:func:`pack`). oneDNN's packed product (encode_backends.PackedBf16Linear) runs everywhere
else: more than :data:`MAX_ROWS` rows (a batch of documents, where it is compute-bound and faster), no AMX,
shapes it does not take. The reference is ``F.linear`` in bfloat16: within one bfloat16 rounding of it, as
oneDNN's is; without the GELU, oneDNN's bits for a query's 32 rows (tests/models/test_bf16_linear.py). Laying out
a MiniLM's weights takes ~18 ms when the encoder loads.
"""

from __future__ import annotations

from functools import cache

import torch

from embedctl.models import bf16_attention

# The kernel takes up to 256 rows (_bf16_linear.c); used up to 128 (four queries: a server's small batches). Its
# rows are independent of each other and of their number, so a query's vector is the same alone or in such a
# batch (oneDNN's blocking, and with it the bits, changes with the row count). A product of a query's shapes on a
# 2-core AMX host (24 of them, /tmp harness, interleaved), tiles against oneDNN, one thread / two: 32 rows 1.86 /
# 1.00 against 2.69 / 1.60 ms (oneDNN's bits); 64 rows 2.67 / 1.48 against 3.04 / 2.04; 128 rows 4.44 / 2.41
# against 4.77 / 2.91; 256 rows 7.19 / 4.37 against 6.88 / 5.55 (slower on one thread: not used).
MAX_ROWS = 128
tiles = True  # the products may take the kernel (bench/bf16_attention.py --fusion linear turns this off for its A/B)


@cache
def available() -> bool:
    """Whether the kernel was built at install and runs here (AMX-BF16 and AVX512_BF16, the tile state granted)."""
    lib = bf16_attention.library()
    return lib is not None and hasattr(lib, "embedctl_bf16_linear") and bool(lib.embedctl_bf16_linear_ready())


def pack(weight: torch.Tensor) -> torch.Tensor | None:
    """The kernel's layout of a bfloat16 weight [n, k] (n a multiple of 16, k of 32): its tiles as a bfloat16
    tensor of the same size, or None where the kernel is not :func:`available` or does not take the shape."""
    if not available() or weight.dim() != 2 or weight.dtype != torch.bfloat16:
        return None
    n, k = weight.shape
    if n < 16 or k < 32 or n % 16 or k % 32:
        return None
    weight = weight.detach().contiguous()
    packed = torch.empty_like(weight)
    if bf16_attention.library().embedctl_bf16_linear_pack(weight.data_ptr(), n, k, packed.data_ptr()) != 0:
        return None
    return packed


def takes_rows(rows: int) -> bool:
    """Whether the kernel is on, runs here and takes ``rows`` rows (a caller's check once for many products of
    the same rows, before :func:`run`)."""
    return tiles and 1 <= rows <= MAX_ROWS and available()


def linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, gelu: bool = False
           ) -> torch.Tensor | None:
    """x bfloat16 [..., k] (at most :data:`MAX_ROWS` rows in all, contiguous, on the CPU, no gradients) times the
    :func:`pack`-ed weight, plus ``bias`` bfloat16 [n] (or None) -> bfloat16 [..., n], on torch's thread count
    (the output columns split; the same bits on any); ``gelu``: the exact (erf) GELU of each float32 sum before
    its rounding, as oneDNN's ``gelu`` post-op (within its rounding, not its bits). None where the kernel does
    not take these (the caller runs oneDNN's product)."""
    n, k = packed.shape
    if (x.dtype != torch.bfloat16 or x.dim() < 1 or x.shape[-1] != k or x.device.type != "cpu" or x.requires_grad
            or not x.is_contiguous() or not takes_rows(x.numel() // k)):
        return None
    if bias is not None and (bias.dtype != torch.bfloat16 or bias.shape != (n,) or not bias.is_contiguous()):
        return None
    return run(x, packed, bias, gelu)


def run(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, gelu: bool = False
        ) -> torch.Tensor | None:
    """The kernel's call for arguments :func:`linear` takes, unchecked (Bf16Stack: its products' inputs are its
    own contiguous bfloat16 tensors, their rows checked once a forward with :func:`takes_rows`: ~4 us of checks
    a product, 24 a query); None where the kernel declines."""
    n, k = packed.shape
    out = torch.empty(*x.shape[:-1], n, dtype=torch.bfloat16)
    rc = bf16_attention.library().embedctl_bf16_linear(x.data_ptr(), x.numel() // k, k, packed.data_ptr(), n,
                                                       None if bias is None else bias.data_ptr(), int(gelu),
                                                       out.data_ptr(), torch.get_num_threads())
    return out if rc == 0 else None
