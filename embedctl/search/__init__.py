"""Searchers: PLAID (embedctl.search.plaid) and dense faiss."""
