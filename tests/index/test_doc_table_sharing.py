"""Readers of one process share the documents table of an unchanged file (embedctl.index.docs.open_doc_table):
a server opening each new version keeps the decoded rows of the segments it already read."""

from __future__ import annotations

import os

from embedctl.index.docs import DocTableWriter, open_doc_table


def _write(path, rows):
    with DocTableWriter(path) as w:
        for doc_id, text in rows:
            w.add(doc_id, None, text)


def test_the_same_file_gives_the_same_table_and_a_rewritten_one_a_new_table(tmp_path):
    path = tmp_path / "docs.parquet"
    _write(path, [("a", "first text"), ("b", "second text")])
    table = open_doc_table(path)
    assert table.titles_and_texts([1]) == [(None, "second text")]
    assert open_doc_table(path) is table  # decoded rows carried over
    _write(path, [("a", "replaced"), ("b", "also replaced")])  # a rebuild over the index: a new inode
    fresh = open_doc_table(path)
    assert fresh is not table and fresh.titles_and_texts([0]) == [(None, "replaced")]
    assert table.titles_and_texts([0]) == [(None, "first text")]  # a reader of the old file keeps reading it
    os.unlink(path)
