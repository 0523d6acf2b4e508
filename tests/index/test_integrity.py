"""An index is checked on the paths users run, not only by `index info --verify`: every file a version
references is read against its recorded sha256 when search or a change opens it (a same-size corruption
of an array used to change results silently); a lost or rolled-back commit file never silently undoes a
committed change; the model is the same model (a hash of all its weights); and `index add` refuses the
settings it would not use."""

from __future__ import annotations

import json
import shutil

import pytest
from support.lifecycle import COLBERT, INCREMENTAL, build_base, copy_index, invoke, write_tsv

from embedctl.errors import EmbedctlError
from embedctl.index import meta as M
from embedctl.index.generations import COMMIT_SEAL_KEY, open_generation, pending_name
from embedctl.search.plaid import PlaidSearcher

NEW = [("n1", "Sailors on long voyages got scurvy until lemons brought them vitamin C.")]


@pytest.fixture(scope="module")
def base(module_tmp):
    return build_base(module_tmp("integrity"))


@pytest.fixture()
def index(base, tmp_path):
    return copy_index(base, tmp_path / "indexes" / "idx")


def _flip(path, where: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0xFF  # same length, other content
    path.write_bytes(bytes(data))


def _search(index, *extra):
    return invoke("search", "scurvy on long sea voyages", "--index", str(index), "search.threads=1", *extra)


@pytest.mark.parametrize("victim", ["plaid/0.codes.npy", "plaid/0.residuals.npy", "plaid/ivf.npy", "docs.parquet"])
def test_search_refuses_a_same_size_corruption_naming_the_file_and_the_fix(index, victim):
    assert _search(index).exit_code == 0
    _flip(index / victim)
    res = _search(index)
    assert res.exit_code == 1
    assert f"{index / victim}: content differs from the recorded sha256" in res.stderr
    assert "--overwrite" in res.stderr and "restore the file" in res.stderr and "Traceback" not in res.stderr
    with pytest.raises(EmbedctlError, match="content differs from the recorded sha256"):
        PlaidSearcher(index)


def test_an_edited_metadata_file_is_refused(index):
    """The metadata holds every other file's checksum; its own content is sealed with a sha256 (an edited
    num_docs used to pass search with exit 0)."""
    path = index / "embedctl_index.json"
    meta = json.loads(path.read_text())
    path.write_text(json.dumps({**meta, "num_docs": meta["num_docs"] + 1}))
    res = _search(index)
    assert res.exit_code == 1
    assert f"{path}: its content differs from the sha256 it was written with" in res.stderr
    assert "--overwrite" in res.stderr and "Traceback" not in res.stderr
    path.write_text(json.dumps(meta, indent=2))  # the same content, written otherwise: still the same index
    assert _search(index).exit_code == 0


def test_a_change_refuses_a_corrupted_index_and_every_new_file_is_checked(index, tmp_path):
    coll = write_tsv(tmp_path / "new.tsv", NEW)
    assert invoke("index", "add", "--index", str(index), "--collection", str(coll), *INCREMENTAL).exit_code == 0
    gen = open_generation(index)
    new_files = sorted(f for f in gen.files if f.startswith("segments/"))
    assert new_files and all(gen.files[f]["sha256"] for f in new_files)  # whatever kind of file: recorded
    _flip(index / new_files[0])
    res = invoke("index", "delete", "--index", str(index), "--id", "d1")
    assert res.exit_code == 1 and f"{new_files[0]}: content differs from the recorded sha256" in res.stderr
    assert open_generation(index, check=False).number == 1  # nothing written


def test_a_deleted_or_rolled_back_commit_is_refused_not_silently_undone(index, tmp_path):
    coll = write_tsv(tmp_path / "new.tsv", NEW)
    assert invoke("index", "add", "--index", str(index), "--collection", str(coll), *INCREMENTAL).exit_code == 0
    assert invoke("index", "delete", "--index", str(index), "--id", "d1").exit_code == 0
    commit2 = index / "commits" / "commit.2.json"
    saved = commit2.read_bytes()

    commit2.unlink()  # lost: version 1 would be the newest and d1 back
    res = _search(index)
    assert res.exit_code == 1 and "files of change 2 (deletes/base.g000002.npy) are newer than the newest commit (1)" \
        in res.stderr and "commits/commit.2.json was lost" in res.stderr and "restore the lost commit" in res.stderr
    res = invoke("index", "add", "--index", str(index), "--collection", str(coll), *INCREMENTAL)
    assert res.exit_code == 1 and "newer than the newest commit" in res.stderr
    assert (index / "deletes" / "base.g000002.npy").is_file()  # the writer collected nothing
    res = invoke("index", "info", "--index", str(index))
    assert res.exit_code == 0 and "warning: " in res.stderr and "commit.2.json was lost" in res.stderr
    res = invoke("index", "info", "--index", str(index), "--verify")
    assert res.exit_code == 1 and "deletes/base.g000002.npy" in res.stderr

    commit2.write_bytes((index / "commits" / "commit.1.json").read_bytes())  # rolled back: an older copy
    res = _search(index)
    assert res.exit_code == 1 and "commit.2.json: holds the commit of version 1, not 2" in res.stderr
    older = json.loads((index / "commits" / "commit.1.json").read_text())
    commit2.write_text(json.dumps({**older, "generation": 2}))  # the older copy with its number edited
    res = _search(index)
    assert res.exit_code == 1 and "commit.2.json: its content differs from the sha256 it was written with" \
        in res.stderr
    # the same, sealed again as if embedctl had written it: the record of the version it follows tells
    commit2.write_text(json.dumps(M.seal({**older, "generation": 2}, COMMIT_SEAL_KEY)))
    for args in (["search", "scurvy on long sea voyages", "--index", str(index)],
                 ["index", "info", "--index", str(index), "--verify"]):
        res = invoke(*args)
        assert res.exit_code == 1, res.stderr
        assert "commit.2.json: does not follow version 1" in res.stderr and "restore" in res.stderr
    _flip(commit2, 0.5)  # any other damage to a commit file
    res = _search(index)
    assert res.exit_code == 1 and "commit.2.json" in res.stderr and "Traceback" not in res.stderr

    commit2.write_bytes(saved)  # restored: all is well again
    assert _search(index).exit_code == 0
    assert invoke("index", "info", "--index", str(index), "--verify").exit_code == 0


def test_a_killed_writers_files_are_not_a_lost_commit(index):
    """A writer marks its change pending before writing files: what a killed one left is ignored by readers
    and collected by the next writer, as before."""
    (index / "segments" / "g000001").mkdir(parents=True)
    (index / "segments" / "g000001" / "docs.parquet").write_bytes(b"half written")
    (index / pending_name(1)).parent.mkdir(exist_ok=True)
    (index / pending_name(1)).write_text("")
    assert _search(index).exit_code == 0
    assert invoke("index", "delete", "--index", str(index), "--id", "d1").exit_code == 0
    assert not (index / "segments").exists() and not (index / pending_name(1)).exists()
    assert not (index / pending_name(2)).exists() and open_generation(index).number == 1


def test_verify_names_files_modified_after_the_commit(index):
    res = invoke("index", "delete", "--index", str(index), "--id", "d1")
    assert res.exit_code == 0
    ids = index / "ids.npy"
    ids.write_bytes(ids.read_bytes())  # same bytes, written after the commit
    res = invoke("index", "info", "--index", str(index), "--verify")
    assert res.exit_code == 1 and f"{ids}: modified after the commit it belongs to (commit.1.json)" in res.stderr


@pytest.fixture(scope="module")
def own_model(module_tmp):
    """An index built with a model folder of its own (a copy of minilm) that the test can change."""
    from embedctl.models.hub import resolve_model_path

    work = module_tmp("own-model")
    model = work / "model"
    shutil.copytree(resolve_model_path("minilm"), model)
    return build_base(work, extra=(f"model.name_or_path={model}",)), model


def test_a_partly_changed_checkpoint_of_the_same_size_is_refused_by_add_and_search(own_model, tmp_path):
    built, model = own_model
    index = copy_index(built, tmp_path / "indexes" / "idx")
    weights = json.loads((index / "embedctl_index.json").read_text())["model"]["weights"]
    assert weights.startswith("sha256:")
    safetensors = model / "model.safetensors"
    saved = safetensors.read_bytes()
    try:
        _flip(safetensors, 0.5)  # the middle: past the first and last 64 KiB the old signature read
        res = invoke("index", "add", "--index", str(index), "--collection", str(write_tsv(tmp_path / "n.tsv", NEW)),
                     *INCREMENTAL)
        assert res.exit_code == 1 and f"the weights in {model} changed since the index was built" in res.stderr
        assert "--overwrite" in res.stderr and open_generation(index).number == 0
        res = _search(index)
        assert res.exit_code == 1 and "changed since the index was built" in res.stderr
    finally:
        safetensors.write_bytes(saved)
    assert _search(index).exit_code == 0  # the same bytes again (the cache key changed: hashed again)


@pytest.mark.parametrize("override, named", [
    (("model.doc_max_length=64",), "model.doc_max_length=64"),
    (("model.kind=biencoder",), "model.kind='biencoder'"),
    (("index.nbits=4",), "index.nbits=4"),
    (("index.kind=dense",), "index.kind='dense'"),
])
def test_add_refuses_settings_it_would_not_use(index, tmp_path, override, named):
    coll = write_tsv(tmp_path / "new.tsv", NEW)
    res = invoke("index", "add", "--index", str(index), "--collection", str(coll), *INCREMENTAL, *override)
    assert res.exit_code == 2, res.output
    assert named in res.stderr and "the index has" in res.stderr and "drop " in res.stderr
    assert open_generation(index).number == 0


def test_add_refuses_another_model_folder(index, tmp_path):
    coll = write_tsv(tmp_path / "new.tsv", NEW)
    res = invoke("index", "add", "--index", str(index), "--collection", str(coll), *INCREMENTAL,
                 "model.name_or_path=bert-tiny")
    assert res.exit_code == 1 and "was built with model 'minilm', not 'bert-tiny'" in res.stderr
    res = invoke("index", "add", "--index", str(index), "--collection", str(coll), *INCREMENTAL, *COLBERT)
    assert res.exit_code == 0, res.output  # the index's own settings, given again: accepted
