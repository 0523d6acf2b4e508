"""embedctl: one command-line tool from raw text to a trained, indexed and evaluated retrieval model."""

__version__ = "0.1.0"
