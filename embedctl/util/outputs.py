"""What marks a folder another embedctl command wrote: the file each command writes last, or its ledger.

A command refuses an output folder that holds another command's output: its own files would mix with (and,
with --overwrite, replace parts of) what that command wrote. One table for every command that checks
(pretokenize, prebatch, train); each leaves out the markers of its own output.
"""

from __future__ import annotations

from typing import Any

INDEX = "embedctl_index.json"  # embedctl.index.files.META_FILE (tests/util/test_outputs.py keeps them equal)
TOKEN_CACHE = "ledger.json"
BATCHES = "metadata.json"
TRAINING = "checkpoints"

OTHER_OUTPUTS: tuple[tuple[str, str], ...] = (
    (INDEX, "an index (`embedctl index`)"),
    (TOKEN_CACHE, "a token cache (`embedctl pretokenize`) or an index being built"),
    # a BEIR folder's cache: one side per subfolder, only config and versions files at its top
    ("documents/ledger.json", "a token cache (`embedctl pretokenize` of a BEIR folder)"),
    ("queries/ledger.json", "a token cache (`embedctl pretokenize` of a BEIR folder)"),
    ("corpus.jsonl", "a collection (a BEIR folder)"),
    (BATCHES, "pre-batched data (`embedctl prebatch`)"),
    ("LATEST", "a folder of indexes (index.root)"),
    (TRAINING, "a training run (`embedctl train`)"),
)


def other_output(fs: Any, path: str, own: tuple[str, ...] = ()) -> tuple[str, str] | None:
    """``(marker, what)`` of the first other command's output found in the folder ``path`` of the fsspec
    file system ``fs`` (markers in ``own`` skipped: the caller's own output), None when there is none."""
    for marker, what in OTHER_OUTPUTS:
        if marker not in own and fs.exists(f"{path.rstrip('/')}/{marker}"):
            return marker, what
    return None
