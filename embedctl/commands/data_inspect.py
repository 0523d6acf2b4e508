"""`embedctl data inspect`: what is inside a token cache or a pre-batched folder (printed on stdout)."""

from __future__ import annotations

from embedctl.data.inspect import inspect_path
from embedctl.util.console import stdout_console


def run(path: str, verify: bool = False) -> None:
    """Print schema, counts, token-length histograms, relevance counts and a decoded example of ``path``;
    ``verify`` first checks every file against its recorded sha256 (exit 1 naming each file that differs)."""
    inspect_path(path, stdout_console(), verify=verify)
