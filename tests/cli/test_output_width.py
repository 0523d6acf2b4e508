"""Output that fits a terminal and a pipe: tables at COLUMNS=80 never cut a key's name, TSV when stdout is not
a terminal, an unknown `config keys` section is an error with a suggestion, swapped --run/--qrels named."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from embedctl.config.reference import reference_rows
from embedctl.util.tables import shorten_middle

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def embedctl(*args: str, terminal: bool = False, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="80", NO_COLOR="1")
    env.pop("TTY_COMPATIBLE", None)
    if terminal:
        env["TTY_COMPATIBLE"] = "1"  # rich's switch: format for a terminal though stdout is a pipe
    return subprocess.run([sys.executable, "-m", "embedctl", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


def test_config_keys_fit_80_columns_and_keep_every_key_whole():
    done = embedctl("config", "keys", terminal=True)
    assert done.returncode == 0, done.stderr
    text = ANSI.sub("", done.stdout)
    assert max(len(line) for line in text.splitlines()) <= 80
    words = set(re.findall(r"[\w.\-]+", text))
    missing = [r.key for r in reference_rows() if r.key not in words]
    assert not missing, f"keys cut or wrapped at 80 columns: {missing[:5]}"
    assert "…" not in "".join(line.split()[0] for line in text.splitlines() if line and not line.startswith(" "))


def test_config_keys_in_a_pipe_is_tsv():
    done = embedctl("config", "keys", "train")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "key\ttype\tdefault\tmeaning"
    rows = [line.split("\t") for line in lines[1:]]
    assert all(len(r) == 4 for r in rows)
    assert "train.grad_cache.chunk_size" in {r[0] for r in rows}
    assert "┃" not in done.stdout and "│" not in done.stdout


def test_unknown_section_is_an_error_with_a_suggestion():
    done = embedctl("config", "keys", "optm")
    assert done.returncode == 2
    assert "no key starts with 'optm'" in done.stderr and "did you mean 'optim'" in done.stderr
    assert done.stdout == ""


def test_shorten_middle_keeps_both_ends():
    assert shorten_middle("runs/demo/ranking-colbert-trained.tsv", 20) == "runs/demo/…ained.tsv"
    assert len(shorten_middle("x" * 100, 13)) == 13
    assert shorten_middle("short", 10) == "short"


def test_evaluate_with_run_and_qrels_swapped_says_so(tmp_path):
    ranking = tmp_path / "ranking.tsv"
    ranking.write_text("q1\td1\t1\t0.91\nq1\td2\t2\t0.26\nq2\td3\t1\t0.50\n")
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n")
    done = embedctl("evaluate", "--run", str(qrels), "--qrels", str(ranking))
    assert done.returncode == 2, done.stderr
    assert "look swapped" in done.stderr and f"--run {ranking} --qrels {qrels}" in done.stderr
    right = embedctl("evaluate", "--run", str(ranking), "--qrels", str(qrels), "--json")
    assert right.returncode == 0, right.stderr


def test_comparison_fits_80_columns_shortening_run_names_in_the_middle(tmp_path):
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t1\n")
    long = tmp_path / ("ranking-" + "colbert-trained-" * 5 + "final.tsv")
    short = tmp_path / "r.tsv"
    for path in (long, short):
        path.write_text("q1\td1\t1\t0.91\nq1\td2\t2\t0.26\nq2\td3\t1\t0.50\n")
    done = embedctl("evaluate", "--run", str(short), "--run", str(long), "--qrels", str(qrels), terminal=True)
    assert done.returncode == 0, done.stderr
    text = ANSI.sub("", done.stdout)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert all(m in text for m in ("nDCG@10", "MRR@10", "Recall@100"))
    assert "…" in text and "final.tsv" in text  # the run's end stays
    piped = embedctl("evaluate", "--run", str(short), "--run", str(long), "--qrels", str(qrels))
    assert str(long) in piped.stdout and piped.stdout.splitlines()[0].startswith("run\tnDCG@10")
