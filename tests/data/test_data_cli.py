"""CLI front of the data pipeline: exit codes, messages, run info, `embedctl data inspect`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.datahelpers import REPO, scifact_slice


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "embedctl", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=180)


def test_bad_input_exit_code_and_message_subprocess(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"_id": "a", "text": "fine"}\n{"_id": "b", "text": ""}\n')
    res = run_cli("pretokenize", "--input", str(bad), "--output", str(tmp_path / "out"))
    assert res.returncode == 1
    assert f"{bad}:2: empty text for id 'b'" in res.stderr and "--on-error skip" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out" / "documents" / "ledger.json").exists()


def test_pipeline_through_the_cli(cli, tmp_path):
    src = scifact_slice(tmp_path / "sf", n_queries=5, extra_docs=5)
    toks, batches = tmp_path / "tok", tmp_path / "pb"
    res = cli("pretokenize", "--input", str(src), "--output", str(toks), "--max-length", "40", "--workers", "1")
    assert res.exit_code == 0, res.output
    for f in ("resolved_config.yaml", "overrides.yaml", "versions.json"):
        assert (toks / f).is_file()
    res = cli("prebatch", "--input", str(toks), "--qrels", str(src / "qrels" / "train.tsv"), "--output", str(batches),
              "--queries-per-batch", "2")
    assert res.exit_code == 0, res.output
    assert (batches / "metadata.json").is_file() and (batches / "resolved_config.yaml").is_file()
    res = cli("prebatch", "--input", str(toks), "--qrels", str(src / "qrels" / "train.tsv"), "--output", str(batches))
    assert res.exit_code == 1 and "--overwrite" in res.output
    res = cli("data", "inspect", str(batches), env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    out = res.output
    for words in ("QUERY_TOKEN_ID_LIST: large_list<element: uint16>", "RELEVANCE: int8", "document token lengths",
                  "relevance counts: 1:", "example from batch_00000000", "[CLS]", "[+1] doc"):
        assert words in out, words
    res = cli("data", "inspect", str(toks), env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    assert "token cache: documents" in res.output and "token cache: queries" in res.output
    assert "STRING_ID: string" in res.output and "example '" in res.output


def test_cli_errors(cli, tmp_path):
    res = cli("pretokenize")
    assert res.exit_code == 2 and "pretokenize.input" in res.output
    res = cli("pretokenize", "--input", str(tmp_path / "nope.jsonl"), "--output", str(tmp_path / "o"))
    assert res.exit_code == 1 and "nope.jsonl" in res.output and "no such file" in res.output
    res = cli("pretokenize", "--input", str(tmp_path), "--output", str(tmp_path / "o"), "pretokenize.num_shards=2",
              "pretokenize.shard_index=5")
    assert res.exit_code == 2 and "shard_index" in res.output
    res = cli("pretokenize", "--input", "x.jsonl", "--on-error", "ignore")
    assert res.exit_code == 2 and "on_error" in res.output
    (tmp_path / "not-a-cache").mkdir()  # the output beside it: one inside its input is refused (exit 2)
    res = cli("prebatch", "--input", str(tmp_path / "not-a-cache"), "--qrels", "q.tsv", "--output", str(tmp_path / "pb"))
    assert res.exit_code == 1 and "token cache" in res.output
    res = cli("data", "inspect", str(tmp_path))
    assert res.exit_code == 1 and "neither a token cache nor a pre-batched folder" in res.output


def test_skip_mode_reports(cli, tmp_path):
    src = tmp_path / "c.tsv"
    src.write_text("a\tgood text\nb\n\tno id\nc\tanother good one\nc\tdup\n")
    res = cli("pretokenize", "--input", str(src), "--output", str(tmp_path / "t"), "--on-error", "skip")
    assert res.exit_code == 0, res.output
    report = [json.loads(x) for x in (tmp_path / "t" / "documents" / "skipped.jsonl").read_text().splitlines()]
    assert [r["line"] for r in report] == [2, 3, 5]
    assert "skipped 3 bad row(s)" in res.output


BAD_INPUTS = [
    ("malformed.tsv", b"a\tok\nb has no tab\n", 2, "tab-separated"),
    ("malformed.jsonl", b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "x"\n', 2, "not valid JSON"),
    ("utf8.jsonl", b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "\xff"}\n', 2, "invalid UTF-8"),
    ("empty_text.tsv", b"a\tok\nb\t \n", 2, "empty text"),
    ("dup.jsonl", b'{"_id": "a", "text": "ok"}\n{"_id": "a", "text": "again"}\n', 2, "duplicate id 'a'"),
    ("empty.jsonl", b"", None, "no records"),
]


@pytest.mark.parametrize("name,data,line,words", BAD_INPUTS)
def test_bad_input_matrix(cli, tmp_path, name, data, line, words):
    src = tmp_path / name
    src.write_bytes(data)
    out = tmp_path / "out"
    res = cli("pretokenize", "--input", str(src), "--output", str(out))
    assert res.exit_code == 1, res.output
    where = f"{src}:{line}:" if line else f"{src}:"
    assert where in res.output and words in res.output
    assert not (out / "documents" / "ledger.json").exists()
    shard = out / "documents" / "shards" / "ledger-00000-of-00001.json"
    assert not shard.exists() or not json.loads(shard.read_text())["finished"]


def test_unknown_qrels_ids_exit_code(cli, tmp_path):
    src = tmp_path / "q.tsv"
    src.write_text("q1\twhat is up\n")
    docs = tmp_path / "d.tsv"
    docs.write_text("d1\tsomething\n")
    assert cli("pretokenize", "--input", str(src), "--output", str(tmp_path / "t"), "--side", "queries").exit_code == 0
    assert cli("pretokenize", "--input", str(docs), "--output", str(tmp_path / "t")).exit_code == 0
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("q1 0 d1 1\nq1 0 d9 1\n")
    res = cli("prebatch", "--input", str(tmp_path / "t"), "--qrels", str(qrels), "--output", str(tmp_path / "pb"))
    assert res.exit_code == 1 and f"{qrels}:2: unknown document id 'd9'" in res.output
    assert not (tmp_path / "pb" / "metadata.json").exists()
    res = cli("prebatch", "--input", str(tmp_path / "t"), "--qrels", str(qrels), "--output", str(tmp_path / "pb"),
              "--on-error", "skip")
    assert res.exit_code == 0 and (tmp_path / "pb" / "metadata.json").is_file()


def test_inspect_a_url(cli):
    import fsspec

    fs = fsspec.filesystem("memory")
    with fs.open("/cli-in/d.tsv", "wb") as fh:
        fh.write(b"d1\tsome document text\nd2\tanother one\n")
    assert cli("pretokenize", "--input", "memory://cli-in/d.tsv", "--output", "memory://cli-out/tok").exit_code == 0
    res = cli("data", "inspect", "memory://cli-out/tok", env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    assert "rows 2" in res.output and "example 'd1'" in res.output and "some document text" in res.output
