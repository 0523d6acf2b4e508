"""Outputs stay parseable: an id holding a tab, a newline or another control character is refused at input
(file:line); JSON output never holds NaN; document text, ids and messages shown on a terminal have their
control characters escaped and no markup."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from embedctl.data.sources import iter_texts
from embedctl.errors import InputError
from embedctl.util.atomic import finite, json_bytes, json_text
from embedctl.util.console import printable

REPO = Path(__file__).resolve().parents[2]
BAD_IDS = ["a\tb", "a\nb", "a\rb", "d\x1b[31mX", "x\x00y", "del\x7f", "c1\x9b31m", "nel\x85x", "ls\u2028x",
           "ps\u2029x"]


@pytest.mark.parametrize("bad", BAD_IDS, ids=[repr(b) for b in BAD_IDS])
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_an_id_with_a_control_character_is_refused_naming_file_and_line(tmp_path, bad, fmt):
    rows = [{"_id": "ok", "text": "fine"}, {"_id": bad, "text": "the bad one"}]
    if fmt == "jsonl":
        path = tmp_path / "corpus.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = tmp_path / "corpus.parquet"
        pq.write_table(pa.table({"_id": [r["_id"] for r in rows], "text": [r["text"] for r in rows]}), path)
    with pytest.raises(InputError) as caught:
        list(iter_texts(str(path)))
    assert f"{path}:2:" in str(caught.value) and "control character" in str(caught.value)


def test_skip_mode_skips_such_a_row(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"_id": "a\tb", "text": "x"}) + "\n" + json.dumps({"_id": "c", "text": "y"}) + "\n")
    assert [r.id for r in iter_texts(str(path), on_error="skip")] == ["c"]


def test_pretokenize_refuses_it_with_exit_1_and_no_traceback(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"_id": "q\n1", "text": "x"}) + "\n")
    res = cli("pretokenize", "--input", str(path), "--output", str(tmp_path / "cache"), "--side", "queries")
    assert res.exit_code == 1, res.output
    assert f"{path}:1:" in res.output and "'q\\n1'" in res.output
    assert not (tmp_path / "cache").exists()  # a refused run leaves nothing behind, not even empty folders


def test_json_never_holds_nan():
    record = {"loss": float("nan"), "lr": float("inf"), "ok": 1.5, "nested": [float("-inf"), {"x": float("nan")}]}
    text = json_text(record)
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"loss": None, "lr": None, "ok": 1.5, "nested": [None, {"x": None}]}
    json.loads(json_bytes(record), parse_constant=lambda c: pytest.fail(c))
    assert finite(2.0) == 2.0 and finite(math.nan) is None


def test_evaluate_json_of_a_nan_metric_is_null(capsys):
    from embedctl.eval.evaluate import print_comparison, print_metrics

    print_metrics({"nDCG@10": float("nan"), "MRR@10": 0.5}, as_json=True)
    print_comparison({"a": {"x": float("inf")}}, as_json=True)
    lines = capsys.readouterr().out.splitlines()
    assert json.loads(lines[0]) == {"nDCG@10": None, "MRR@10": 0.5}
    assert json.loads(lines[1]) == {"a": {"x": None}}


def test_metrics_log_never_writes_nan(tmp_path):
    from embedctl.train.metrics_log import MetricsLog

    log = MetricsLog(tmp_path / "metrics.jsonl", enabled=True, after_step=0)
    log.write({"step": 1, "loss": float("nan")})
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"step": 1, "loss": None}


@pytest.mark.parametrize("text,shown", [
    ("plain text", "plain text"),
    ("evil \x1b]0;PWNED\x07 title", "evil \\x1b]0;PWNED\\x07 title"),
    ("red \x1b[31mRED\x1b[0m", "red \\x1b[31mRED\\x1b[0m"),
    ("over\rwrite", "over\\rwrite"),
    ("c1 \x9b31m", "c1 \\x9b31m"),
    ("unicode é 漢字 stays", "unicode é 漢字 stays"),
])
def test_printable_escapes_control_characters(text, shown):
    assert printable(text) == shown


@pytest.fixture(scope="module")
def nasty_index(module_tmp):
    """A real dense index (the bundled MiniLM) of a document holding an escape sequence and rich markup."""
    from embedctl.api import Index

    root = module_tmp("nasty")
    corpus = root / "corpus.jsonl"
    rows = [{"_id": "d1", "text": "scurvy vitamin c \x1b]0;PWNED\x07 evil \x1b[31mRED\x1b[0m [bold red]markup[/] end"},
            {"_id": "d2", "text": "another document about vitamins"}]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    Index.build(corpus, root / "indexes" / "nasty", overrides=["index.kind=dense"])
    return root / "indexes" / "nasty"


def test_the_search_table_shows_document_text_inert(nasty_index):
    """The single-query table, as a terminal gets it (real subprocess, colours forced on): the document's
    escape sequences arrive escaped, its `[bold red]` as text."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400", "FORCE_COLOR": "1", "TTY_COMPATIBLE": "1"}
    res = subprocess.run([sys.executable, "-m", "embedctl", "search", "--index", str(nasty_index),
                          "scurvy [b]vitamin[/b]"], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    assert "\x1b]0;" not in res.stdout and "\x07" not in res.stdout and "\x1b[31mRED" not in res.stdout
    assert "\\x1b]0;PWNED\\x07" in res.stdout and "[bold red]markup[/]" in res.stdout
    assert "scurvy [b]vitamin[/b]" in res.stdout


def test_search_json_keeps_the_text_exact(nasty_index):
    res = subprocess.run([sys.executable, "-m", "embedctl", "search", "--index", str(nasty_index), "scurvy",
                          "--json"], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr
    hits = json.loads(res.stdout, parse_constant=lambda c: pytest.fail(c))["hits"]
    assert "\x1b]0;PWNED\x07" in hits[0]["text"]  # JSON escapes it; a program reading it gets the text


def test_an_error_quoting_an_input_escapes_its_control_characters(capsys):
    from embedctl.cli.common import report

    report(InputError("bad row \x1b[2J here", path="f.tsv", line=3))
    err = capsys.readouterr().err
    assert "\x1b[2J" not in err and "\\x1b[2J" in err


def test_search_output_replaces_a_ranking_but_never_another_file(nasty_index, tmp_path):
    """`search -o FILE` replaces an earlier ranking (as any output file), but a file that is not a ranking
    (a corpus named by a slip) is refused, exit 2, and left byte for byte."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\tscurvy\n")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "d1", "text": "a user\'s own corpus"}\n')
    args = [sys.executable, "-m", "embedctl", "search", "--index", str(nasty_index), "-q", str(queries), "-o"]
    res = subprocess.run([*args, str(corpus)], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 2, res.stderr
    assert f"--output {corpus} exists and is not a ranking" in res.stderr and "how to fix" in res.stderr
    assert corpus.read_text() == '{"_id": "d1", "text": "a user\'s own corpus"}\n'
    ranking = tmp_path / "run.tsv"
    ranking.write_text("q1\told\t1\t0.5\n")
    res = subprocess.run([*args, str(ranking)], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    assert [line.split("\t")[1] for line in ranking.read_text().splitlines()][:2] == ["d1", "d2"]
