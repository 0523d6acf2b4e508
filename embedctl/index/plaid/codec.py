"""Residual codec (ColBERTv2): a vector = its nearest centroid + a residual quantised to ``nbits`` per dimension.

A token vector ``e`` (L2-normalised, ``dim`` floats) is stored as
- ``code``: int32 index of the centroid with the largest inner product, and
- ``packed``: ``dim * nbits / 8`` bytes holding one bucket index per dimension of ``e - centroid[code]``.

Bucket index ``b`` of a residual value ``x`` is ``searchsorted(cutoffs, x)`` (torch.bucketize semantics:
``cutoffs[b-1] < x <= cutoffs[b]``); it decodes to ``weights[b]``. Cutoffs sit at the quantiles
``i / 2^nbits`` (i = 1..2^nbits-1) and weights at ``(i + 0.5) / 2^nbits`` (i = 0..2^nbits-1) of all
residual values of a held-out sample (:func:`train_codec`).

Bit packing: the ``8 / nbits`` bucket indices of dimensions ``[j * per, (j + 1) * per)`` share byte ``j``, the
first dimension in the most significant bits (``np.packbits`` order). Example for nbits=2:
dims (3, 0, 1, 2) -> byte 0b11_00_01_10 = 198.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from embedctl.errors import EmbedctlError
from embedctl.index.plaid import kernels

VALID_NBITS = (1, 2, 4)
HELDOUT_FRACTION = 0.05
HELDOUT_MAX = 50_000


def check_nbits(nbits: int, dim: int) -> None:
    """Raise a clear error unless ``nbits`` is 1, 2 or 4 and ``dim * nbits`` fills whole bytes."""
    if nbits not in VALID_NBITS:
        raise EmbedctlError(f"`index.nbits` = {nbits}: PLAID residuals take 1, 2 or 4 bits", hint="set index.nbits=2")
    if (dim * nbits) % 8:
        raise EmbedctlError(f"vector size {dim} x nbits {nbits} is not a whole number of bytes",
                            hint="use a dimension divisible by 8")


def pack_bits(buckets: np.ndarray, nbits: int) -> np.ndarray:
    """Pack bucket indices uint8 [n, dim] (values < 2^nbits) into uint8 [n, dim * nbits / 8]."""
    per = 8 // nbits
    n, dim = buckets.shape
    b = buckets.reshape(n, dim // per, per).astype(np.uint8, copy=False)
    shifts = (nbits * np.arange(per - 1, -1, -1)).astype(np.uint8)
    out = np.zeros((n, dim // per), dtype=np.uint8)
    for i in range(per):  # per <= 8 vectorised passes; no Python loop over vectors
        out |= b[:, :, i] << shifts[i]
    return out


def bucket_indices(values, cutoffs):
    """torch float [..] -> uint8 bucket indices: how many ``cutoffs`` (sorted, torch float) each value
    exceeds, i.e. ``np.searchsorted(cutoffs, value, side="left")``. One comparison pass per cutoff (3 for
    nbits=2, ~4x numpy's searchsorted); torch.bucketize for the 15 cutoffs of nbits=4."""
    import torch

    if len(cutoffs) > 3:
        return torch.bucketize(values, cutoffs, out_int32=True).to(torch.uint8)
    out = torch.zeros(values.shape, dtype=torch.uint8)
    for c in cutoffs:
        out += values > c
    return out


def unpack_table(nbits: int) -> np.ndarray:
    """uint8 [256, 8 / nbits]: the bucket indices stored in each possible byte value (first dim first)."""
    per = 8 // nbits
    values = np.arange(256, dtype=np.uint16)[:, None]
    shifts = nbits * np.arange(per - 1, -1, -1)[None, :]
    return ((values >> shifts) & ((1 << nbits) - 1)).astype(np.uint8)


def unpack_bits(packed: np.ndarray, nbits: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: uint8 [n, dim * nbits / 8] -> bucket indices uint8 [n, dim]."""
    return unpack_table(nbits)[packed].reshape(packed.shape[0], -1)


def decode_table(weights: np.ndarray, nbits: int) -> np.ndarray:
    """float32 [256, 8 / nbits]: residual values encoded by each byte, so decompression is one gather."""
    return np.asarray(weights, dtype=np.float32)[unpack_table(nbits)]


@dataclass
class Codec:
    """Everything needed to compress and decompress: centroids fp16 [C, dim], bucket cutoffs/weights."""

    centroids: np.ndarray       # float16 [C, dim], rows L2-normalised
    avg_residual: np.ndarray    # float32 [dim], mean |residual| per dimension on the held-out sample
    bucket_cutoffs: np.ndarray  # float32 [2^nbits - 1]
    bucket_weights: np.ndarray  # float32 [2^nbits]
    nbits: int

    @property
    def dim(self) -> int:
        return int(self.centroids.shape[1])

    def centroids_f32(self) -> np.ndarray:
        return self.centroids.astype(np.float32)

    def assign(self, emb: np.ndarray, device: str = "cpu", precision: str = "fp32") -> np.ndarray:
        """Nearest centroid (max inner product) of each row of float32 [n, dim] -> int32 [n]."""
        return assign_codes(emb, self.centroids_f32(), device=device, precision=precision)

    def compress(self, emb: np.ndarray, device: str = "cpu", precision: str = "fp32") -> tuple[np.ndarray, np.ndarray]:
        """float32 [n, dim] -> (codes int32 [n], packed residuals uint8 [n, dim * nbits / 8])."""
        import torch

        emb = np.ascontiguousarray(emb, dtype=np.float32)
        cf = self.centroids_f32()
        codes = assign_codes(emb, cf, device=device, precision=precision)
        if kernels.available():  # the same arithmetic in one pass, without temporaries
            return codes, kernels.compress(emb, cf, codes, self.bucket_cutoffs, self.nbits)
        packed = np.empty((emb.shape[0], self.dim * self.nbits // 8), dtype=np.uint8)
        cent, cutoffs = torch.from_numpy(cf), torch.from_numpy(np.asarray(self.bucket_cutoffs, np.float32))
        with torch.inference_mode():
            for lo in range(0, emb.shape[0], 65536):  # bounded temporaries
                hi = min(lo + 65536, emb.shape[0])
                res = torch.from_numpy(emb[lo:hi]) - cent.index_select(0, torch.from_numpy(codes[lo:hi]))
                packed[lo:hi] = pack_bits(bucket_indices(res, cutoffs).numpy(), self.nbits)
        return codes, packed

    def norms(self, codes: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """float16 [n]: L2 norm of each decompressed (not yet normalised) vector, stored so that search can
        normalise scores without gathering centroid rows."""
        if kernels.available():
            table = decode_table(self.bucket_weights, self.nbits)
            return kernels.decoded_norms(self.centroids_f32(), codes, packed, table, self.nbits).astype(np.float16)
        out = np.empty(len(codes), dtype=np.float16)
        for lo in range(0, len(codes), 65536):
            d = self.decompress(codes[lo:lo + 65536], packed[lo:lo + 65536], normalize=False)
            out[lo:lo + len(d)] = np.linalg.norm(d, axis=1)
        return out

    def decompress(self, codes: np.ndarray, packed: np.ndarray, normalize: bool = True) -> np.ndarray:
        """(codes [n], packed [n, bytes]) -> float32 [n, dim] = centroid + decoded residual (L2-normalised).

        Gathers in torch (several times numpy's fancy indexing for the centroid rows and the byte table)."""
        import torch

        table = torch.from_numpy(decode_table(self.bucket_weights, self.nbits))
        c = torch.from_numpy(np.asarray(codes, dtype=np.int64))
        p = torch.from_numpy(np.ascontiguousarray(packed)).to(torch.int64)
        with torch.inference_mode():
            out = torch.from_numpy(self.centroids_f32()).index_select(0, c) + table[p].reshape(len(c), self.dim)
            if normalize:
                out /= torch.linalg.vector_norm(out, dim=1, keepdim=True).clamp_min(1e-12)
        return out.numpy()


def assign_codes(emb: np.ndarray, centroids: np.ndarray, device: str = "cpu", precision: str = "fp32") -> np.ndarray:
    """argmax_c <emb_i, centroid_c> for float32 [n, dim] against float32 [C, dim] -> int32 [n].

    ``precision`` "fp32" is exact (faiss on CPU, torch on GPU); "bf16" uses the CPU's bfloat16 matrix units,
    "int16" the AVX2 integer kernel (see embedctl/index/plaid/assign.py: both exact with the C kernels).
    """
    from embedctl.index.plaid import assign

    return assign.nearest(emb, centroids, precision=precision, device=device)


def heldout_size(num_sample_embeddings: int) -> int:
    """5% of the sample's vectors, capped at 50,000 (at least 1)."""
    return max(1, int(min(HELDOUT_FRACTION * num_sample_embeddings, HELDOUT_MAX)))


def train_codec(centroids: np.ndarray, heldout: np.ndarray, nbits: int, device: str = "cpu",
                precision: str = "fp32") -> Codec:
    """Fit bucket cutoffs/weights and avg_residual on held-out float32 [h, dim] vectors.

    >>> c = np.eye(4, dtype=np.float16); h = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    >>> train_codec(c, h, nbits=2).bucket_weights.shape
    (4,)
    """
    check_nbits(nbits, centroids.shape[1])
    cf = centroids.astype(np.float32)
    heldout = np.ascontiguousarray(heldout, dtype=np.float32)
    codes = assign_codes(heldout, cf, device=device, precision=precision)
    res = heldout - cf[codes]
    levels = 1 << nbits
    cutoff_q = np.arange(1, levels, dtype=np.float64) / levels
    weight_q = (np.arange(levels, dtype=np.float64) + 0.5) / levels
    flat = res.reshape(-1)
    return Codec(
        centroids=np.ascontiguousarray(centroids, dtype=np.float16),
        avg_residual=np.abs(res).mean(axis=0).astype(np.float32),
        bucket_cutoffs=np.quantile(flat, cutoff_q).astype(np.float32),
        bucket_weights=np.quantile(flat, weight_q).astype(np.float32),
        nbits=nbits,
    )
