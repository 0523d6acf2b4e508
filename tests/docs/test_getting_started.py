"""docs/getting-started.md's "your own data" block, run as written on a small SciFact slice.

The commands are parsed from the doc (the block after the `own-data` marker), so the doc cannot drift
from what works: only the sizes are shrunk (batches of 8 queries, 2 negatives, 1 training step) and
`embedctl` is this checkout's interpreter. A newcomer's road broke here twice (batches pretokenized
with the model's own 256-token queries refused by a config training with 64; a batch that did not fit).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "getting-started.md"
MARKER = "<!-- own-data:"

# sizes only: the doc's numbers are for a real collection
SHRINK = {"--queries-per-batch": "8", "--negatives-per-query": "2"}
EXTRA = {"train": ["train.max_steps=1"]}


def own_data_commands(text: str) -> list[list[str]]:
    """The `embedctl ...` commands of the fenced block after the own-data marker, one argv each."""
    block = text[text.index(MARKER):]
    block = block[block.index("```\n") + 4:]
    block = block[:block.index("```")]
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            assert argv[0] == "embedctl", f"getting-started own-data block: not an embedctl command: {line}"
            commands.append(argv[1:])
    return commands


def test_block_is_parsed():
    commands = own_data_commands(DOC.read_text(encoding="utf-8"))
    verbs = [c[0] for c in commands]
    assert verbs[:3] == ["pretokenize"] * 3 and "train" in verbs and verbs[-1] == "evaluate"
    # one config for every step that tokenizes, mines or trains (the route's one rule)
    for argv in commands:
        if argv[0] in ("pretokenize", "prebatch", "train", "index"):
            assert argv[1] == "configs/minilm_scifact.yaml", argv


def _write_slice(dest: Path, scifact: Path, train_queries: int = 10, test_queries: int = 4, filler: int = 20) -> None:
    (dest / "qrels").mkdir(parents=True)
    wanted: set[str] = set()
    qids: set[str] = set()
    for split, n in (("train", train_queries), ("test", test_queries)):
        rows = [r.split("\t") for r in (scifact / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]]
        chosen = list(dict.fromkeys(r[0] for r in rows))[:n]
        rows = [r for r in rows if r[0] in chosen]
        wanted |= {r[1] for r in rows}
        qids |= set(chosen)
        (dest / "qrels" / f"{split}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join("\t".join(r) + "\n" for r in rows))
    docs = []
    with open(scifact / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if json.loads(line)["_id"] in wanted or len(docs) < filler:
                docs.append(line)
    (dest / "corpus.jsonl").write_text("".join(docs), encoding="utf-8")
    with open(scifact / "queries.jsonl", encoding="utf-8") as fh:
        queries = [line for line in fh if json.loads(line)["_id"] in qids]
    (dest / "queries.jsonl").write_text("".join(queries), encoding="utf-8")
    # the single-file inputs of the block: ColBERT TSVs
    tsv = lambda rows: "".join(f"{r['_id']}\t{' '.join(r['text'].split())}\n" for r in map(json.loads, rows))  # noqa: E731
    (dest.parent / "docs.tsv").write_text(tsv(docs), encoding="utf-8")
    (dest.parent / "queries.tsv").write_text(tsv(queries), encoding="utf-8")


def _shrink(argv: list[str]) -> list[str]:
    out = list(argv)
    for flag, value in SHRINK.items():
        if flag in out:
            out[out.index(flag) + 1] = value
    return out + EXTRA.get(argv[0], [])


@pytest.mark.slow
def test_own_data_route_runs_as_written(tmp_path, scifact):
    _write_slice(tmp_path / "my_beir_folder", scifact)
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="80")
    outputs = {}
    for argv in own_data_commands(DOC.read_text(encoding="utf-8")):
        argv = _shrink(argv)
        done = subprocess.run([sys.executable, "-m", "embedctl", *argv], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"`embedctl {shlex.join(argv)}` failed:\n{done.stdout}\n{done.stderr}"
        outputs.setdefault(argv[0], []).append(done.stdout)
    assert (tmp_path / "runs/my/files/documents").is_dir() and (tmp_path / "runs/my/files/queries").is_dir()
    assert (tmp_path / "runs/my/model/final").is_dir()
    # one query from the command line: 10 hits (search.query_k; the config's search.k is the batch depth),
    # as TSV since stdout is a pipe here
    single = [line for line in outputs["search"][0].splitlines() if "\t" in line]
    assert single[0] == "rank\tid\tscore\ttext" and len(single) == 11, single
    metrics = json.loads(outputs["evaluate"][0][outputs["evaluate"][0].index("{"):])
    assert metrics, metrics
