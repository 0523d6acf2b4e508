"""Evaluation: trec_eval metrics (metrics.py) and ranking/qrels files (io.py)."""
