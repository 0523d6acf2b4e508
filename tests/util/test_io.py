"""The .npy reader names the file and says what is wrong in words: no numpy header (garbage), pickled objects
(never loaded, and never a hint to load them unsafely), truncated; memory-mapped or not."""

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
