"""PLAID (ColBERTv2) compressed late-interaction index: codec, k-means, IVF, indexer, on-disk format.

Entry points: :func:`build_plaid_index` (here), :func:`embedctl.index.plaid.format.open_plaid` (the loader)
and :class:`embedctl.search.plaid.PlaidSearcher`.
"""

from embedctl.index.plaid.indexer import build_plaid_index

__all__ = ["build_plaid_index"]
