"""The .npy reader names the file and says what is wrong in words: no numpy header (garbage), pickled objects
(never loaded, and never a hint to load them unsafely), truncated; memory-mapped or not."""

import time

import numpy as np
import pytest

from embedctl.errors import EmbedctlError
from embedctl.util.io import file_record, load_npy, save_npy


@pytest.mark.parametrize("mmap", [True, False])
def test_damaged_npy_files_are_named_and_explained(tmp_path, mmap):
    (tmp_path / "garbage.npy").write_bytes(b"garbage" * 10)
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    save_npy(tmp_path / "short.npy", np.arange(1000))
    (tmp_path / "short.npy").write_bytes((tmp_path / "short.npy").read_bytes()[:500])
    for name, words in (("garbage", "no numpy header"), ("objects", "pickled data"), ("short", "truncated")):
        with pytest.raises(EmbedctlError, match=rf"{name}.npy: .*{words}") as err:
            load_npy(tmp_path / f"{name}.npy", mmap=mmap)
        assert "allow_pickle" not in str(err.value)


def test_round_trip_and_file_record(tmp_path):
    save_npy(tmp_path / "a.npy", np.arange(5, dtype=np.int32))
    np.testing.assert_array_equal(load_npy(tmp_path / "a.npy"), np.arange(5))
    record = file_record(tmp_path / "a.npy")
    assert record["bytes"] == (tmp_path / "a.npy").stat().st_size and len(record["sha256"]) == 64


def _records(tmp_path, n=3):
    for i in range(n):
        (tmp_path / f"a{i}.bin").write_bytes(bytes([i]) * 4096)
    return {f"a{i}.bin": file_record(tmp_path / f"a{i}.bin") for i in range(n)}


def test_content_check_reads_a_verified_unchanged_file_once(tmp_path, monkeypatch):
    """A reader that opens version after version (a server) does not hash the same immutable files again."""
    from embedctl.util import io

    monkeypatch.setattr(io, "RACY_S", 0.0)
    monkeypatch.setattr(io, "_VERIFIED", set())
    records = _records(tmp_path)
    reads = []
    real = io.file_record
    monkeypatch.setattr(io, "file_record", lambda p: reads.append(p) or real(p))
    io.check_records_content(tmp_path, records, what="the test folder")
    assert len(reads) == 3
    io.check_records_content(tmp_path, records, what="the test folder")
    assert len(reads) == 3  # unchanged since: not read again


def test_content_check_still_finds_a_same_size_rewrite_after_a_verified_read(tmp_path, monkeypatch):
    from embedctl.util import io

    monkeypatch.setattr(io, "RACY_S", 0.0)
    monkeypatch.setattr(io, "_VERIFIED", set())
    records = _records(tmp_path)
    io.check_records_content(tmp_path, records, what="the test folder")
    time.sleep(0.05)  # past one timestamp tick (the real RACY_S keeps recently changed files out of the cache)
    with open(tmp_path / "a1.bin", "r+b") as fh:  # same size, in place: only the timestamps say it changed
        fh.write(b"\xff")
    with pytest.raises(EmbedctlError, match="a1.bin: content differs"):
        io.check_records_content(tmp_path, records, what="the test folder")


def test_content_check_rereads_a_recently_changed_file(tmp_path, monkeypatch):
    """Within RACY_S of a change, the timestamps may not tell a second change apart: always read."""
    from embedctl.util import io

    monkeypatch.setattr(io, "_VERIFIED", set())
    records = _records(tmp_path)  # written just now
    io.check_records_content(tmp_path, records, what="the test folder")
    assert not io._VERIFIED
