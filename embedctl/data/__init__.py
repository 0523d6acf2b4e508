"""Data pipeline: text sources, the token cache (`embedctl pretokenize`), the pre-batched format
(`embedctl prebatch`) and its reader for training. See docs/formats.md."""
