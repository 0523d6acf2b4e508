"""Data pipeline: text sources and labels, the token cache (`embedctl pretokenize`), the pre-batched format
(written by the `embedctl prebatch` engine, embedctl.prebatch) and its reader for training. See docs/formats.md."""
