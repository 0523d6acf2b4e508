"""ctypes front for the attention kernel of the bf16 encoder (embedctl/models/_bf16_attention.c): the bf16
encode backend's self-attention of sequences of up to 512 tokens (BERT's positions: a query is 32, a SciFact
document at most 180 or 256), straight from the fused query/key/value projection's output.

The reference is torch's ``scaled_dot_product_attention`` on the same bfloat16 inputs (what
:class:`~embedctl.models.native_bert.FusedQKVAttention` runs otherwise): the kernel's output is within a
bfloat16 rounding of it (tests/models/test_bf16_attention.py), ~3-4x faster for a 32-token MiniLM query layer
and for a batch of 32 documents of 180 tokens (bench/bf16_attention.py, on AVX512-BF16 without AMX). On a CPU
with AMX tiles the kernel runs on them (``path`` "auto"; "avx512" / "amx" force one), its weights rounded to
bfloat16 before p . v as SDPA's bfloat16 path rounds them: a batch of documents in 0.54-0.56x the AVX-512
path's time on a 2-core AMX host (documents/s of the whole bf16 encoder 1.18-1.19x; bench/bf16_attention.py
--fusion amx).
:func:`attention` answers None
wherever the kernel does not apply (not built, a CPU without AVX512_BF16, a longer sequence, another head
size, another mask, a sequence with no key to attend to), and the caller keeps SDPA.
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import torch

from embedctl.native import load_library

MAX_LEN = 512
HEAD_DIMS = (32, 64)


@cache
def library() -> ctypes.CDLL | None:
    """The bf16 encoder's kernel library (attention, residual LayerNorm, a query's products), or None where it was
    not built."""
    lib = load_library(Path(__file__).parent, "_bf16_attention")
    if lib is None:
        return None
    lib.embedctl_bf16_attention_ready.argtypes = []
    lib.embedctl_bf16_attention_amx_ready.argtypes = []
    lib.embedctl_bf16_attention.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                             ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.embedctl_residual_layer_norm.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                                 ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, ctypes.c_void_p,
                                                 ctypes.c_int]
    if hasattr(lib, "embedctl_bf16_linear"):  # absent from a library built before it: oneDNN's products only
        lib.embedctl_bf16_linear_ready.argtypes = []
        lib.embedctl_bf16_linear.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                             ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
        lib.embedctl_bf16_linear_pack.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return lib


@cache
def available() -> bool:
    """Whether the kernel was built at install and this CPU runs it (AVX-512 F/BW and AVX512_BF16)."""
    lib = library()
    return lib is not None and bool(lib.embedctl_bf16_attention_ready())


@cache
def amx_available() -> bool:
    """Whether :func:`attend`'s default path runs on AMX tiles here (AMX-BF16, and Linux granted the tile state)."""
    lib = library()
    return available() and bool(lib.embedctl_bf16_attention_amx_ready())


PATHS = {"auto": 0, "avx512": 1, "amx": 2}
tiles = True  # "auto" may take the AMX tiles (bench/bf16_attention.py --fusion amx turns this off for its A/B)


def applies(qkv: torch.Tensor, heads: int) -> bool:
    """Whether :func:`attention` can take this projection output (before any masking check)."""
    if qkv.dim() != 3 or qkv.dtype != torch.bfloat16 or qkv.device.type != "cpu" or qkv.requires_grad:
        return False
    width = qkv.shape[2]
    return (1 <= qkv.shape[1] <= MAX_LEN and width % (3 * heads) == 0 and width // (3 * heads) in HEAD_DIMS
            and available())


def attention(qkv: torch.Tensor, heads: int, mask: torch.Tensor | None = None) -> torch.Tensor | None:
    """Self-attention of ``qkv`` bfloat16 [B, L, 3 * heads * D] (query, key, value, each [heads, D] per token)
    -> bfloat16 [B, L, heads * D], softmax(q k^T / sqrt(D)) v per head; ``mask`` bool, broadcastable to
    [B, 1, 1, L] (True: a key to attend to) or None. None where the kernel does not apply (see the module)."""
    if not applies(qkv, heads) or (mask is not None and not _key_mask(mask, qkv.shape[0], qkv.shape[1])):
        return None
    return attend(qkv, heads, None if mask is None else key_bytes(mask, qkv.shape[0], qkv.shape[1]))


def key_bytes(mask: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    """A key mask [B or 1, 1, 1, L] as the kernel reads it: uint8 [B, L], 1 for a key to attend to."""
    return mask.reshape(mask.shape[0], -1).expand(batch, length).to(torch.uint8).contiguous()


def attend(qkv: torch.Tensor, heads: int, keep: torch.Tensor | None, path: str = "auto") -> torch.Tensor | None:
    """The kernel's call, for a ``qkv`` that :func:`applies` and the :func:`key_bytes` of its mask (or None):
    the output, or None where the kernel declines (a sequence with no key, no memory for its scratch, ``path``
    "amx" on a CPU without the tiles). The caller checks once what :func:`attention` checks on every call (a
    stack of layers: once per forward). ``path``: "auto" (the AMX tiles where they run, unless ``tiles`` is
    False), "avx512" or "amx"."""
    batch, length, width = qkv.shape
    qkv = qkv.contiguous()
    out = torch.empty((batch, length, width // 3), dtype=torch.bfloat16)
    rc = library().embedctl_bf16_attention(qkv.data_ptr(), batch, length, heads, width // (3 * heads),
                                             None if keep is None else keep.data_ptr(), out.data_ptr(),
                                             torch.get_num_threads(),
                                             PATHS["avx512" if path == "auto" and not tiles else path])
    return out if rc == 0 else None


def _key_mask(mask: torch.Tensor, batch: int, length: int) -> bool:
    """A bool key mask [B or 1, 1, 1, L] (native_bert's): the only kind the kernel takes."""
    return (mask.dtype == torch.bool and mask.dim() == 4 and tuple(mask.shape[1:]) == (1, 1, length)
            and mask.shape[0] in (1, batch))
