"""Index builders: PLAID (ColBERTv2, embedctl.index.plaid) and dense faiss indexes."""
