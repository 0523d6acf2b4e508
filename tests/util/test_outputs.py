"""The one table of other commands' output markers."""

from __future__ import annotations

import fsspec

from embedctl.index.files import META_FILE
from embedctl.util.outputs import INDEX, other_output


def test_the_index_marker_is_the_index_metadata_file():
    assert INDEX == META_FILE


def test_other_output_names_the_first_marker_and_skips_the_callers_own(tmp_path):
    fs = fsspec.filesystem("file")
    assert other_output(fs, str(tmp_path)) is None
    (tmp_path / "metadata.json").write_text("{}")
    assert other_output(fs, str(tmp_path), own=("metadata.json",)) is None
    assert other_output(fs, str(tmp_path))[0] == "metadata.json"
    (tmp_path / "documents").mkdir()
    (tmp_path / "documents" / "ledger.json").write_text("{}")
    assert other_output(fs, str(tmp_path))[1].startswith("a token cache")
