"""A small real PLAID index (the embedded model `minilm` as a ColBERT) for the index lifecycle tests, and
searching it through the real search session with one shared encoder."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from typer.testing import CliRunner

from embedctl.cli.main import app
from embedctl.config import load_config
from embedctl.search.driver import SearchSession

COLBERT = ["model.kind=colbert", "model.doc_max_length=48", "index.batch_size=16"]
TOPICS = ["vitamin C and scurvy", "the BM25 ranking function", "faiss and dense vectors", "mitochondria in cells",
          "protein folding", "ocean tides and the moon", "volcanoes and lava", "jazz improvisation"]
# the tests of the incremental add (new documents compressed with the index's codec, a segment of their
# own) turn re-clustering off: their 40-document index would otherwise re-cluster on every add
# (index.recluster_below_docs, tests/index/test_recluster.py)
INCREMENTAL = ("index.recluster_below_docs=0",)
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def corpus_lines(n: int = 40) -> list[tuple[str, str]]:
    return [(f"d{i}", f"Document {i} is about {TOPICS[i % len(TOPICS)]}, part {i // len(TOPICS)}.") for i in range(n)]


def write_tsv(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("".join(f"{a}\t{b}\n" for a, b in rows), encoding="utf-8")
    return path


def build_base(work: Path, name: str = "base", extra: tuple[str, ...] = ()) -> Path:
    """`embedctl index` of the 40-document corpus under ``work/indexes/<name>``."""
    coll = write_tsv(work / "corpus.tsv", corpus_lines())
    res = invoke("index", "--collection", str(coll), "--root", str(work / "indexes"), "--name", name, *COLBERT, *extra)
    assert res.exit_code == 0, res.output
    return work / "indexes" / name


def copy_index(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


class Searcher:
    """Search index folders with the real session, loading the encoder once."""

    def __init__(self):
        self.encoder = None

    def session(self, index: Path, *overrides: str) -> SearchSession:
        loaded = load_config(None, [f"search.index={index}", "search.threads=1", *overrides])
        session = SearchSession.open(loaded)
        if self.encoder is None:
            self.encoder = session.encoder
        session._encoder = self.encoder
        return session

    def ids(self, index: Path, query: str, k: int = 10, *overrides: str) -> list[str]:
        return [doc_id for doc_id, _ in self.session(index, *overrides).search([query], k)[0]]

    def hits(self, index: Path, query: str, k: int = 10, *overrides: str) -> list[tuple[str, float]]:
        return self.session(index, *overrides).search([query], k)[0]


def tree_digest(folder: Path) -> dict[str, str]:
    """sha256 of every file of an index folder but run records (argv, times)."""
    skip = {"overrides.yaml", "versions.json", "resolved_config.yaml"}
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in skip and "runs" not in p.parts}
