"""Bi-encoder pooling of token states into one vector per text, independent of the padding side."""

from __future__ import annotations

import torch

POOLING_MODES = ("cls", "mean", "last")


def first_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of the first non-padding token per row ([B] int64); 0 with right padding."""
    return attention_mask.to(torch.int64).argmax(dim=1)


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of the last non-padding token per row ([B] int64); L-1 with left padding."""
    length = attention_mask.shape[1]
    return length - 1 - attention_mask.to(torch.int64).flip(1).argmax(dim=1)


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Pool ``hidden`` [B, L, H] over tokens where ``attention_mask`` [B, L] is 1 -> [B, H].

    ``cls``: the first real token; ``mean``: masked mean; ``last``: the last real token. All three give the
    same result for left- and right-padded inputs. Example: ``pool(h, m, "mean")`` on MiniLM -> [B, 384].
    """
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    if mode == "cls":
        return hidden[rows, first_token_index(attention_mask)]
    if mode == "last":
        return hidden[rows, last_token_index(attention_mask)]
    if mode == "mean":
        weights = attention_mask.to(hidden.dtype).unsqueeze(-1)
        return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)
    raise ValueError(f"unknown pooling {mode!r}; expected one of {POOLING_MODES}")


def matryoshka_truncate(embeddings: torch.Tensor, dim: int, normalize: bool = True) -> torch.Tensor:
    """First ``dim`` components of [B, D] embeddings, re-normalised (Matryoshka training / smaller indexes).

    Example: ``matryoshka_truncate(emb, 128)`` -> [B, 128] unit vectors.
    """
    if not 0 < dim <= embeddings.shape[-1]:
        raise ValueError(f"Matryoshka dim {dim} must be in 1..{embeddings.shape[-1]}")
    cut = embeddings[..., :dim]
    return torch.nn.functional.normalize(cut, dim=-1) if normalize else cut
