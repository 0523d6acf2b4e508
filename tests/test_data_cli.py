"""CLI front of the data pipeline: exit codes, messages, run info, `embedctl data inspect`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from datahelpers import REPO, scifact_slice


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
    res = cli("prebatch", "--input", str(tmp_path), "--qrels", "q.tsv", "--output", str(tmp_path / "pb"))
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
