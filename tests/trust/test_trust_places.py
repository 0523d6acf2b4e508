"""Nothing outside its place: an index name stays under index.root, --overwrite replaces only an index (never
a user's folder), and a training run never writes into a token cache, batches, an index or its own inputs.
Every refusal happens before any work and leaves the folders as they were."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture()
def place(tmp_path, monkeypatch):
    """A workspace: work/ (the cwd) with indexes/, a user's folder beside it, a tiny collection."""
    work = tmp_path / "work"
    (work / "indexes").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious\n")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "one"}\n{"_id": "d2", "text": "two"}\n')
    monkeypatch.chdir(work)
    monkeypatch.setenv("COLUMNS", "400")
    return {"work": work, "victim": victim, "corpus": corpus, "tmp": tmp_path}


def _snapshot(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


NAMES = [("../../victim", "is a path, not a folder name"), ("{victim}", "is a path, not a folder name"),
         ("..", "names no folder of its own"), (".", "names no folder of its own"),
         ("a/b", "is a path, not a folder name"), (".hidden", "starts with '.'"),
         ("a\nb", "holds a control character")]


@pytest.mark.parametrize("name,fragment", NAMES, ids=[n for n, _ in NAMES])
def test_index_name_outside_the_root_is_refused(place, cli, name, fragment):
    before = _snapshot(place["tmp"])
    res = cli("index", "--collection", str(place["corpus"]), "--name", name.format(victim=place["victim"]),
              "--overwrite", "--kind", "dense")
    assert res.exit_code == 2, res.output
    assert "`index.name`" in res.output and fragment in res.output.replace("\n", " ")
    assert _snapshot(place["tmp"]) == before  # nothing written, nothing removed


def test_overwrite_never_removes_a_folder_that_is_not_an_index(place, cli):
    mine = place["work"] / "indexes" / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    res = cli("index", "--collection", str(place["corpus"]), "--name", "mine", "--overwrite", "--kind", "dense")
    assert res.exit_code == 1, res.output
    assert "is not an index embedctl wrote" in res.output and "nothing was changed" in res.output
    assert (mine / "notes.txt").read_text() == "mine\n"


def test_overwrite_refuses_a_file_in_the_index_place(place, cli):
    (place["work"] / "indexes" / "afile").write_text("x\n")
    res = cli("index", "--collection", str(place["corpus"]), "--name", "afile", "--overwrite", "--kind", "dense")
    assert res.exit_code == 2, res.output
    assert "is a file" in res.output and (place["work"] / "indexes" / "afile").read_text() == "x\n"


def test_index_root_as_the_name_of_a_parent_is_never_the_default_name():
    """`--collection ..` (a token cache one level up) names the index after that folder, never `..`."""
    from embedctl.index.build import default_name

    assert default_name("..") == Path("..").resolve().name or default_name("..") == "index"
    assert default_name("data/..") not in ("..", ".", "")
    assert default_name(".hidden.tsv") == "hidden"
    assert default_name("/") == "index"


def test_index_add_on_a_parent_path_is_not_a_dotdot_name(place, cli):
    """`--index x/..` means the folder x/.. (here work/), which is no index: refused without writing."""
    before = _snapshot(place["tmp"])
    res = cli("index", "add", "--index", "indexes/..", "--collection", str(place["corpus"]))
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert _snapshot(place["tmp"]) == before


def _fake_outputs(tmp: Path) -> dict[str, Path]:
    """Folders as other commands leave them: each holds the file its command writes last (or its ledger)."""
    made = {}
    for name, marker in (("cache", "ledger.json"), ("batches", "metadata.json"), ("index", "embedctl_index.json"),
                         ("indexes", "LATEST")):
        folder = tmp / name
        folder.mkdir()
        (folder / marker).write_text("{}\n")
        made[name] = folder
    return made


@pytest.mark.parametrize("what", ["cache", "batches", "index", "indexes"])
def test_training_into_another_commands_output_is_refused(place, cli, what):
    outputs = _fake_outputs(place["tmp"])
    before = _snapshot(outputs[what])
    res = cli("train", "data.path=/nonexistent-batches", f"output.dir={outputs[what]}")
    assert res.exit_code == 2, res.output
    assert f"output.dir {outputs[what]} holds" in res.output and "nothing was written" in res.output
    assert _snapshot(outputs[what]) == before


def test_training_into_its_own_data_is_refused(place, cli):
    data = place["tmp"] / "batches"
    data.mkdir()
    res = cli("train", f"data.path={data}", f"output.dir={data / 'run'}")
    assert res.exit_code == 2, res.output
    assert "is inside the input data.path" in res.output
    assert not (data / "run").exists()


def test_an_edited_latest_never_leads_a_writer_out_of_the_root(place, cli):
    root = place["work"] / "indexes"
    (root / "LATEST").write_text("../../victim\n")
    res = cli("index", "compact", f"index.root={root}")
    assert res.exit_code == 1, res.output
    assert "not an index folder under" in res.output
    assert (place["victim"] / "keep.txt").read_text() == "precious\n"


def test_train_overwrite_never_clears_a_folder_it_did_not_write(place, cli):
    """A user's folder with a `final/` of its own (no resolved_config.yaml: not a run folder)."""
    out = place["tmp"] / "mine"
    (out / "final").mkdir(parents=True)
    (out / "final" / "weights.bin").write_text("mine\n")
    res = cli("train", "data.path=/nonexistent-batches", f"output.dir={out}", "output.overwrite=true")
    assert res.exit_code == 2, res.output
    assert "not a run folder embedctl wrote" in res.output
    assert (out / "final" / "weights.bin").read_text() == "mine\n"


def test_prebatch_overwrite_removes_only_what_prebatch_wrote(tmp_path):
    from embedctl.prebatch.build import _prepare_output

    out = tmp_path / "batches"
    (out / "batch_00000000").mkdir(parents=True)
    (out / "batch_00000000" / "queries.parquet").write_text("old\n")
    for name in ("metadata.json", "report.json", "batch_notes.txt", "notes.md"):
        (out / name).write_text("{}\n")
    _prepare_output(str(out), overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["batch_notes.txt", "notes.md"]


def test_an_index_is_never_written_into_its_collection(place, cli):
    cache = place["tmp"] / "cache"
    cache.mkdir()
    (cache / "notes.txt").write_text("x\n")
    for args in (["--root", str(cache)], ["--root", str(place["tmp"]), "--name", "cache", "--overwrite"]):
        res = cli("index", "--collection", str(cache), *args, "--kind", "dense")
        assert res.exit_code == 2, res.output
        assert "the input --collection" in res.output and "nothing was written" in res.output
    assert sorted(p.name for p in cache.iterdir()) == ["notes.txt"]
