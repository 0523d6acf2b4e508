"""What the hostile matrix (bench/trust_matrix.py) found, each fixed and kept fixed here: real subprocesses,
seconds each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from embedctl.util.console import PIPE_EXIT

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.mark.parametrize("args", [["--help"], ["index", "--help"], []])
def test_help_into_a_closed_pipe_exits_141_quietly(args):
    """`embedctl --help | head -1`: click answered the EPIPE with exit 1, so a pipeline with pipefail failed."""
    proc = subprocess.Popen([sys.executable, "-m", "embedctl", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == PIPE_EXIT, err
    assert err.decode() == ""


def test_serve_port_file_never_overwrites_a_users_file(tmp_path):
    """`serve --port-file corpus.jsonl` (a slip): the corpus used to be replaced by the port number. Refused
    before the index is opened (so no index is needed here), the file byte for byte as it was."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "a user\'s corpus"}\n')
    res = subprocess.run([sys.executable, "-m", "embedctl", "serve", "--index", str(tmp_path / "noindex"), "--port",
                          "0", "--port-file", str(corpus)], capture_output=True, text=True, env=ENV, timeout=120)
    assert res.returncode == 2, res.stderr
    assert f"--port-file {corpus} exists and is not a port file" in res.stderr and "how to fix" in res.stderr
    assert corpus.read_text() == '{"_id": "d1", "text": "a user\'s corpus"}\n'
    folder = tmp_path / "afolder"
    folder.mkdir()
    res = subprocess.run([sys.executable, "-m", "embedctl", "serve", "--index", str(tmp_path / "noindex"), "--port",
                          "0", "--port-file", str(folder)], capture_output=True, text=True, env=ENV, timeout=120)
    assert res.returncode == 2 and f"--port-file {folder} is a folder" in res.stderr, res.stderr


def test_serve_port_file_of_an_earlier_server_is_replaced(tmp_path):
    from embedctl.commands.serve import check_port_file

    earlier = tmp_path / "port"
    earlier.write_text("43123\n")
    check_port_file(str(earlier))  # no error: an earlier server's port file is replaced


@pytest.mark.parametrize("marker", ["documents/ledger.json", "queries/ledger.json", "corpus.jsonl"])
def test_training_into_a_beir_token_cache_is_refused(tmp_path, marker):
    """A BEIR folder's token cache has its ledgers one level down (documents/, queries/) and only config files at
    its top: `train output.dir=CACHE` used to train there, writing final/ and metrics.jsonl and replacing the
    cache's resolved_config.yaml."""
    cache = tmp_path / "cache"
    (cache / marker).parent.mkdir(parents=True, exist_ok=True)
    (cache / marker).write_text("{}\n")
    (cache / "resolved_config.yaml").write_text("pretokenize: {}\n")
    before = sorted((str(p), p.read_bytes()) for p in cache.rglob("*") if p.is_file())
    res = subprocess.run([sys.executable, "-m", "embedctl", "train", f"data.path={tmp_path / 'nobatches'}",
                          f"output.dir={cache}"], capture_output=True, text=True, env=ENV, timeout=300)
    assert res.returncode == 2, res.stderr
    assert f"output.dir {cache} holds" in res.stderr and f"({marker})" in res.stderr
    assert "nothing was written" in res.stderr and "how to fix" in res.stderr
    assert sorted((str(p), p.read_bytes()) for p in cache.rglob("*") if p.is_file()) == before


@pytest.mark.parametrize("measure", ["iprec_at_recall_2", "iprec_at_recall_0.5,1.5"])
def test_a_recall_level_outside_0_1_is_refused(tmp_path, measure):
    run, qrels = tmp_path / "run.tsv", tmp_path / "qrels.txt"
    run.write_text("q1\td1\t1\t2.0\n")
    qrels.write_text("q1 0 d1 1\n")
    res = subprocess.run([sys.executable, "-m", "embedctl", "evaluate", "--run", str(run), "--qrels", str(qrels),
                          "-m", measure], capture_output=True, text=True, env=ENV, timeout=120)
    assert res.returncode == 1, res.stderr
    assert f"measure {measure!r}" in res.stderr and "from 0 to 1" in res.stderr and "how to fix" in res.stderr


def test_a_length_beyond_the_models_positions_exits_2(tmp_path):
    """A config value out of the model's range: exit 2 like every other config error (it was 1)."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "one"}\n')
    res = subprocess.run([sys.executable, "-m", "embedctl", "index", "--collection", str(corpus), "--root",
                          str(tmp_path / "ix"), "model.doc_max_length=100000"], capture_output=True, text=True,
                         env=ENV, timeout=300)
    assert res.returncode == 2, res.stderr
    assert "`model.doc_max_length` = 100000 is more than the model's 512 positions" in res.stderr


# an embedctl folder (what `train` writes: its card decides the settings) loads through another path than a
# sentence-transformers folder: both must name the damaged file, not only the folder
CARD = {"format": 1, "kind": "biencoder", "base_model": "minilm", "dim": 384, "hidden_size": 384, "pooling": "mean",
        "normalize": True, "query_max_length": 32, "doc_max_length": 256, "query_prefix": "", "doc_prefix": "",
        "matryoshka_dims": []}


@pytest.mark.parametrize("layout", ["sentence-transformers", "embedctl"])
def test_a_truncated_weights_file_is_named_without_the_library_error(tmp_path, layout):
    """A model folder whose model.safetensors was cut short: the message said `SafetensorError: ...`, then
    (an embedctl folder) named the folder but not model.safetensors."""
    import json
    import shutil

    from embedctl.models.checkpoint import _fail

    err = _fail(tmp_path / "m", type("SafetensorError", (Exception,), {})("Error while deserializing header: "
                                                                           "incomplete metadata"), "could not load")
    assert "SafetensorError" not in str(err) and "damaged or incomplete" in str(err) and "how to fix" in str(err)


    from embedctl.models.hub import resolve_model_path

    src = Path(resolve_model_path("minilm"))
    model = tmp_path / "m"
    shutil.copytree(src, model)
    if layout == "embedctl":
        (model / "embedctl_model.json").write_text(json.dumps(CARD))
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    res = _index_one_document(tmp_path, model)
    assert res.returncode == 1, res.stderr
    assert f"{weights} is damaged or incomplete" in res.stderr or f"{weights}: the .safetensors file is damaged" \
        in res.stderr, res.stderr
    assert "how to fix" in res.stderr and "SafetensorError" not in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("marker", ["embedctl_index.json", "documents/ledger.json", "checkpoints", "corpus.jsonl"])
def test_prebatch_into_another_commands_output_is_refused(tmp_path, marker):
    """`prebatch --output INDEX --overwrite` wrote its resolved_config.yaml / overrides.yaml over the index's."""
    from embedctl.errors import EmbedctlError
    from embedctl.prebatch.build import _prepare_output

    out = tmp_path / "other"
    (out / marker).parent.mkdir(parents=True, exist_ok=True)
    (out / marker).mkdir() if marker == "checkpoints" else (out / marker).write_text("{}\n")
    (out / "resolved_config.yaml").write_text("theirs\n")
    with pytest.raises(EmbedctlError) as caught:
        _prepare_output(str(out), overwrite=True)
    assert caught.value.exit_code == 2 and f"({marker})" in str(caught.value) and "nothing was written" in str(
        caught.value)
    assert (out / "resolved_config.yaml").read_text() == "theirs\n"


@pytest.mark.parametrize("row,fragment", [("q1\td1\t1\tnan\n", "score 'nan' is not a finite number"),
                                          ("q1\td1\t1\tinf\n", "score 'inf' is not a finite number"),
                                          ("q1\td1\tfirst\t2.0\n", "rank 'first' is not an integer")])
def test_a_bad_ranking_row_says_how_to_fix_it(tmp_path, row, fragment):
    run, qrels = tmp_path / "run.tsv", tmp_path / "qrels.txt"
    run.write_text(row)
    qrels.write_text("q1 0 d1 1\n")
    res = subprocess.run([sys.executable, "-m", "embedctl", "evaluate", "--run", str(run), "--qrels", str(qrels)],
                         capture_output=True, text=True, env=ENV, timeout=120)
    assert res.returncode == 1, res.stderr
    assert f"{run}:1: {fragment}" in res.stderr and "how to fix" in res.stderr


@pytest.mark.parametrize("args,fragment", [(["config", "show", "{tmp}/nope.yaml"], "config file not found: {tmp}/nope.yaml"),
                                           (["data", "inspect", "{tmp}/nothing"], "{tmp}/nothing: no such folder")])
def test_a_missing_config_or_data_folder_says_how_to_fix_it(tmp_path, args, fragment):
    res = subprocess.run([sys.executable, "-m", "embedctl", *[a.format(tmp=tmp_path) for a in args]],
                         capture_output=True, text=True, env=ENV, timeout=120)
    assert res.returncode in (1, 2), res.stderr
    assert fragment.format(tmp=tmp_path) in res.stderr and ("fix: check the path" in res.stderr
                                                            or "how to fix" in res.stderr), res.stderr


@pytest.mark.parametrize("marker", ["embedctl_index.json", "metadata.json", "checkpoints"])
def test_pretokenize_into_another_commands_output_is_refused(tmp_path, marker):
    """`pretokenize --output INDEX --overwrite` was accepted and added chunks beside the index's files."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "scurvy"}\n')
    out = tmp_path / "other"
    out.mkdir()
    (out / marker).mkdir() if marker == "checkpoints" else (out / marker).write_text("{}\n")
    before = sorted(p.name for p in out.iterdir())
    res = subprocess.run([sys.executable, "-m", "embedctl", "pretokenize", "--input", str(corpus), "--output", str(out),
                          "--overwrite"], capture_output=True, text=True, timeout=300, env=ENV)
    assert res.returncode == 2, res.stderr
    assert f"--output {out} holds" in res.stderr and f"({marker}); nothing was written" in res.stderr
    assert "how to fix" in res.stderr and sorted(p.name for p in out.iterdir()) == before


@pytest.mark.parametrize("bad", ["d\x1b[31m", "x\x00y", "a\x85b"])
def test_an_ids_file_with_a_control_character_is_refused_naming_the_line(tmp_path, bad):
    """`index delete --ids FILE` took such an id as unknown (exit 0) instead of naming file:line."""
    from embedctl.errors import InputError
    from embedctl.index.update import read_id_file

    ids = tmp_path / "ids.txt"
    ids.write_text(f"d1\r\n\n{bad}\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"ids.txt:3: the id .* holds a control character") as caught:
        read_id_file(ids)
    assert caught.value.hint
    ids.write_text("d1\r\n\nd2\n", encoding="utf-8")
    assert read_id_file(ids) == ["d1", "d2"]


def test_a_filter_error_names_search_filter_and_where_it_was_set(tmp_path):
    """`search --filter "year >> 2"` said `filter: expected a value ...`: neither the key nor the flag. The syntax
    is checked before the index is opened (so no index is needed here), exit 2."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text('search:\n  filter: "year >> 2"\n')
    for args, where in ((["--filter", "year >> 2"], "`search.filter` (--filter)"),
                        ([str(cfg)], f"`search.filter` (set in file {cfg})")):
        res = subprocess.run([sys.executable, "-m", "embedctl", "search", "--index", str(tmp_path / "noindex"),
                              "scurvy", *args], capture_output=True, text=True, env=ENV, timeout=120)
        assert res.returncode == 2, res.stderr
        assert f"{where}: expected a value (a number, a quoted string, true or false) at column 7" in res.stderr
        assert "how to fix: see docs/filters.md" in res.stderr and str(tmp_path / "noindex") not in res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["tokenizer.json", "vocab.txt", "config.json"])
def test_a_damaged_model_file_is_named(tmp_path, damage):
    """A model folder with tokenizer.json or config.json cut short, or an empty vocab.txt: the messages named the
    folder with the library's error (`JSONDecodeError`, `OSError`), or ended in "an unexpected error"
    (`WordPiece error: Missing [UNK] token`)."""
    from embedctl.models.hub import resolve_model_path

    src = Path(resolve_model_path("minilm"))
    model = tmp_path / "m"
    model.mkdir()
    for p in src.iterdir():
        if p.is_file():  # the weights linked (90 MB), the small files copied: the damage stays in the copy
            (model / p.name).symlink_to(p) if p.name == "model.safetensors" else (model / p.name).write_bytes(
                p.read_bytes())
    damaged = model / damage
    if damage == "vocab.txt":
        damaged.write_text("")
        (model / "tokenizer.json").unlink()
    else:
        damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    res = _index_one_document(tmp_path, model)
    assert res.returncode == 1, res.stderr
    said = f"{damaged} is empty" if damage == "vocab.txt" else f"{damaged} is damaged or incomplete (not valid JSON"
    assert said in res.stderr and "how to fix" in res.stderr, res.stderr
    assert "unexpected error" not in res.stderr and "OSError" not in res.stderr and "Traceback" not in res.stderr


def _index_one_document(tmp_path: Path, model: Path) -> subprocess.CompletedProcess:
    """`embedctl index` of a one-document collection with ``model``, as a user would run it."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "one"}\n')
    return subprocess.run([sys.executable, "-m", "embedctl", "index", "--collection", str(corpus), "--root",
                           str(tmp_path / "ix"), "--model", str(model), "--kind", "dense"], capture_output=True,
                          text=True, env=ENV, timeout=300)
