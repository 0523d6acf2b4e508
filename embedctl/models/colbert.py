"""ColBERT pieces: the seeded projection head, the punctuation skiplist and MaxSim scoring."""

from __future__ import annotations

import math

import torch

# Fixed seed of a fresh projection: two loads of the same plain HF model give identical ColBERT weights.
PROJECTION_SEED = 12345
# Elements of the [nq, Lq, nd_chunk, Ld] similarity block computed at once by colbert_scores.
_SCORE_BLOCK = 1 << 25


def fresh_projection(hidden_size: int, dim: int, seed: int = PROJECTION_SEED) -> torch.nn.Linear:
    """A bias-free Linear(hidden_size, dim) initialised like torch's default, from a fixed seed.

    The draw uses its own generator, so the global RNG (and training reproducibility) is untouched.
    """
    with torch.random.fork_rng(devices=[]):  # Linear's own init must not move the global RNG
        linear = torch.nn.Linear(hidden_size, dim, bias=False)
    generator = torch.Generator().manual_seed(seed)
    bound = 1.0 / math.sqrt(hidden_size)  # kaiming_uniform(a=sqrt(5)) bound, torch's Linear default
    with torch.no_grad():
        linear.weight.copy_(torch.empty(dim, hidden_size).uniform_(-bound, bound, generator=generator))
    return linear


def skiplist_table(vocab_size: int, ids: list[int]) -> torch.Tensor:
    """Bool lookup [vocab_size]: True for ids whose document vectors are dropped (punctuation)."""
    table = torch.zeros(vocab_size, dtype=torch.bool)
    if ids:
        table[torch.tensor(ids, dtype=torch.long)] = True
    return table


def colbert_scores(Q: torch.Tensor, D: torch.Tensor, D_mask: torch.Tensor) -> torch.Tensor:
    """MaxSim late interaction: ``Q`` [nq, Lq, d], ``D`` [nd, Ld, d], ``D_mask`` [nd, Ld] bool -> [nq, nd].

    ``score[q, n] = sum_i max_{j: D_mask[n, j]} Q[q, i] . D[n, j]``; a document with no unmasked vector
    scores 0. Query padding should be zero vectors (the encoder's output is), so it adds nothing.
    Differentiable; computed in document blocks to bound memory. Example::

        colbert_scores(torch.randn(2, 32, 128), torch.randn(5, 180, 128), torch.ones(5, 180, dtype=torch.bool))
        # -> tensor of shape [2, 5]
    """
    nq, lq, d = Q.shape
    nd, ld, d2 = D.shape
    if d != d2 or D_mask.shape != (nd, ld):
        raise ValueError(f"shape mismatch: Q {tuple(Q.shape)}, D {tuple(D.shape)}, D_mask {tuple(D_mask.shape)}")
    mask = D_mask.to(device=D.device, dtype=torch.bool)
    q_flat = Q.reshape(nq * lq, d)
    step = max(1, _SCORE_BLOCK // max(1, nq * lq * ld))
    blocks = []
    for start in range(0, nd, step):
        d_blk, m_blk = D[start:start + step], mask[start:start + step]
        sims = (q_flat @ d_blk.reshape(-1, d).T).reshape(nq, lq, d_blk.shape[0], ld)
        # in place: the matmul's backward needs only its inputs, and a copy of the block was ~4% of a step
        best = sims.masked_fill_(~m_blk[None, None], float("-inf")).amax(dim=-1)
        best = best.masked_fill(~m_blk.any(dim=-1)[None, None], 0.0)
        blocks.append(best.sum(dim=1))
    if not blocks:
        return Q.new_zeros(nq, 0)
    return torch.cat(blocks, dim=1)
