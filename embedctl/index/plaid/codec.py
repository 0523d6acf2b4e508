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
from embedctl.index.plaid import reference
from embedctl.index.plaid.bf16 import on_bf16_grid
from embedctl.index.plaid.reference import Backend, decode_table, pack_bits, unpack_table

__all__ = ["Codec", "check_nbits", "decode_table", "heldout_size", "pack_bits", "train_codec", "unpack_bits",
           "unpack_table"]

VALID_NBITS = (1, 2, 4)
HELDOUT_FRACTION = 0.05
HELDOUT_MAX = 50_000
BLOCK_VECTORS = 65536  # vectors per residual pass when compressing: bounded temporaries (the reference's)


def check_nbits(nbits: int, dim: int) -> None:
    """Raise a clear error unless ``nbits`` is 1, 2 or 4 and ``dim * nbits`` fills whole bytes."""
    if nbits not in VALID_NBITS:
        raise EmbedctlError(f"`index.nbits` = {nbits}: PLAID residuals take 1, 2 or 4 bits", hint="set index.nbits=2")
    if (dim * nbits) % 8:
        raise EmbedctlError(f"vector size {dim} x nbits {nbits} is not a whole number of bytes",
                            hint="use a dimension divisible by 8")


def unpack_bits(packed: np.ndarray, nbits: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: uint8 [n, dim * nbits / 8] -> bucket indices uint8 [n, dim]."""
    return unpack_table(nbits)[packed].reshape(packed.shape[0], -1)


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

    def compress(self, emb: np.ndarray, backend: Backend | None = None) -> tuple[np.ndarray, np.ndarray]:
        """float32 [n, dim] -> (codes int32 [n] nearest centroid by inner product, packed residuals uint8
        [n, dim * nbits / 8]), on ``backend`` (the reference when None)."""
        backend = backend or Backend()
        emb = np.ascontiguousarray(emb, dtype=np.float32)
        cf = self.centroids_f32()
        # one assignment call for every vector (each backend bounds its own temporaries; one call per block
        # packed the centroids and started the threads again each time), the residual pass in blocks
        codes = np.ascontiguousarray(backend.nearest(emb, cf)[0], dtype=np.int32) if len(emb) else \
            np.zeros(0, np.int32)
        packed = np.empty((len(emb), self.dim * self.nbits // 8), dtype=np.uint8)
        for lo in range(0, len(emb), BLOCK_VECTORS):
            hi = min(len(emb), lo + BLOCK_VECTORS)
            packed[lo:hi] = backend.compress(emb[lo:hi], cf, codes[lo:hi], self.bucket_cutoffs, self.nbits)
        return codes, packed

    def norms(self, codes: np.ndarray, packed: np.ndarray, backend: Backend | None = None) -> np.ndarray:
        """float16 [n]: L2 norm of each decompressed (not yet normalised) vector, stored so that search can
        normalise scores without gathering centroid rows."""
        backend = backend or Backend()
        return backend.decoded_norms(self.centroids_f32(), codes, packed, self.bucket_weights,
                                     self.nbits).astype(np.float16)

    def decompress(self, codes: np.ndarray, packed: np.ndarray, normalize: bool = True) -> np.ndarray:
        """(codes [n], packed [n, bytes]) -> float32 [n, dim] = centroid + decoded residual (L2-normalised)."""
        return reference.decompress(self.centroids_f32(), codes, packed, self.bucket_weights, self.nbits, normalize)


def heldout_size(num_sample_embeddings: int) -> int:
    """5% of the sample's vectors, capped at 50,000 (at least 1)."""
    return max(1, int(min(HELDOUT_FRACTION * num_sample_embeddings, HELDOUT_MAX)))


def train_codec(centroids: np.ndarray, heldout: np.ndarray, nbits: int, backend: Backend | None = None) -> Codec:
    """Fit bucket cutoffs/weights and avg_residual on held-out float32 [h, dim] vectors.

    The weights (each bucket's decoded value) are rounded to bfloat16, ~2^-9 of a value (at most 2^-8), far
    inside their buckets: every decoded residual is then a bfloat16 value, which the final MaxSim on AMX tiles
    decodes to half the bytes for two products instead of three (search_amx.residual_split), the same bits.

    >>> c = np.eye(4, dtype=np.float16); h = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    >>> train_codec(c, h, nbits=2).bucket_weights.shape
    (4,)
    """
    check_nbits(nbits, centroids.shape[1])
    cf = centroids.astype(np.float32)
    heldout = np.ascontiguousarray(heldout, dtype=np.float32)
    codes = (backend or Backend()).nearest(heldout, cf)[0]
    res = heldout - cf[codes]
    levels = 1 << nbits
    cutoff_q = np.arange(1, levels, dtype=np.float64) / levels
    weight_q = (np.arange(levels, dtype=np.float64) + 0.5) / levels
    # one call for both sets: one partition of the values instead of two (each quantile is computed alone)
    quantiles = np.quantile(res.reshape(-1), np.concatenate([cutoff_q, weight_q]))
    return Codec(
        centroids=np.ascontiguousarray(centroids, dtype=np.float16),
        avg_residual=np.abs(res).mean(axis=0).astype(np.float32),
        bucket_cutoffs=quantiles[:levels - 1].astype(np.float32),
        bucket_weights=on_bf16_grid(quantiles[levels - 1:].astype(np.float32)),
        nbits=nbits,
    )
