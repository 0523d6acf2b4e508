"""Encoders shared by training, indexing and search."""
