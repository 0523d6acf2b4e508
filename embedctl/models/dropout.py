"""Dropout whose CPU mask is drawn from 16-bit random integers instead of ``bernoulli_``.

Why: on CPU, ``torch.nn.functional.dropout`` draws one Bernoulli sample per element with a scalar generator;
for a MiniLM training step that is ~20% of the step (the attention-probability dropout alone is a
[B, heads, L, L] mask per layer). Filling a quarter as many 64-bit integers and reading them as four
16-bit lanes is ~4x faster and uses the same seeded torch generator, so runs stay reproducible and
exactly resumable. The drop probability is rounded to a multiple of 1/65536 (0.1 -> 0.100006) and kept
elements are scaled by the exact inverse of the realised keep probability, so E[dropout(x)] == x.
On other devices the stock kernel is used (it is fast there).

    drop = FastDropout(0.1)        # a torch.nn.Dropout: ``p`` and ``set_dropout`` work as usual
    y = drop(x)                    # x * mask / keep_probability in training, x in eval
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_LANES = 65536


def keep_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """(bool mask with P(True) = keep, keep) for dropout rate ``p``; keep = 1 - round(p * 65536) / 65536."""
    dropped = round(p * _LANES)
    n = 1
    for size in shape:
        n *= int(size)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device)
    words.random_(-(2**63), None)  # the full 64-bit range: every 16-bit lane is uniform
    lanes = words.view(torch.int16)[:n].view(shape)
    return lanes >= (-32768 + dropped), 1.0 - dropped / _LANES


def fast_dropout_applies(x: torch.Tensor, p: float, training: bool) -> bool:
    """Whether :func:`dropout` draws the fast CPU mask for ``x`` (else it is the identity or ``F.dropout``)."""
    return training and 0.0 < p and x.device.type == "cpu" and round(p * _LANES) < _LANES


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """``F.dropout(x, p, training)``, with the fast mask on CPU."""
    if not training or p <= 0.0:
        return x
    if not fast_dropout_applies(x, p, training):  # not CPU, or a p that rounds to 1 (nothing kept)
        return F.dropout(x, p, True)
    mask, keep = keep_mask(x.shape, p, x.device)
    return x * mask.to(x.dtype).mul_(1.0 / keep)


class FastDropout(torch.nn.Dropout):
    """``torch.nn.Dropout`` with :func:`dropout`'s fast CPU mask (same ``p`` attribute, same state dict)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)
