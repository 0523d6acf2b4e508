"""PLAID indexer: layout, encode-once sample reuse, duplicates, resume (kill -9 of a real process), refusals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from embedctl.config.sections.index import IndexConfig
from embedctl.errors import EmbedctlError, InputError
from embedctl.index.plaid import build_plaid_index
from embedctl.index.plaid import format as fmt
from support.synthetic import SyntheticEncoder
from embedctl.search.plaid import PlaidSearcher

REPO = Path(__file__).resolve().parents[2]


def small_docs(n: int = 300) -> list[str]:
    docs = [f"document number {i}" for i in range(n)]
    docs[5] = docs[3]  # an exact duplicate inside chunk 0
    return docs


def build(tmp_path: Path, docs, name="idx", enc=None, sample_docs=120, **cfg):
    """Synthetic vectors (64-d), chunks of 100 documents, a 120-document k-means sample."""
    enc = enc or SyntheticEncoder(dim=64, num_topics=128, mean_len=30)
    conf = IndexConfig(**{"nbits": 2, "chunk_size": 100, **cfg})
    return enc, build_plaid_index(enc, docs, tmp_path / name, conf, progress=False, sample_docs=sample_docs)


def arrays(index_dir: Path) -> dict[str, np.ndarray]:
    return {p.name: np.load(p, allow_pickle=False) for p in sorted(index_dir.glob("*.npy"))}


def test_layout_and_metadata(tmp_path):
    enc, summary = build(tmp_path, small_docs())
    d = tmp_path / "idx"
    meta = json.loads((d / "metadata.json").read_text())
    assert meta["format"] == fmt.FORMAT_NAME and meta["format_version"] == fmt.FORMAT_VERSION
    assert meta["num_docs"] == 300 and meta["num_chunks"] == 3 and summary["num_chunks"] == 3
    assert not (d / fmt.WORK).exists(), "the sample spill is removed once the index is complete"
    assert (d / "plan.json").is_file()
    doclens = np.concatenate([np.load(d / f"doclens.{i}.npy") for i in range(3)])
    codes = np.concatenate([np.load(d / f"{i}.codes.npy") for i in range(3)])
    res = np.concatenate([np.load(d / f"{i}.residuals.npy") for i in range(3)])
    assert doclens.sum() == meta["num_embeddings"] == len(codes) == len(res)
    assert res.dtype == np.uint8 and res.shape[1] == 64 * 2 // 8 and codes.dtype == np.int32
    assert 0 <= codes.min() and codes.max() < meta["num_partitions"]
    cent = np.load(d / "centroids.npy")
    assert cent.dtype == np.float16
    np.testing.assert_allclose(np.linalg.norm(cent.astype(np.float32), axis=1), 1, atol=2e-3)
    assert [c["embedding_offset"] for c in meta["chunks"]] == [0, int(doclens[:100].sum()), int(doclens[:200].sum())]
    # exact duplicate: same vectors, stored identically
    off = np.concatenate([[0], np.cumsum(doclens)])
    np.testing.assert_array_equal(codes[off[3]:off[4]], codes[off[5]:off[6]])
    assert 4 + 16 <= summary["bytes_per_vector"] < 4 + 16 + 40  # codes + residuals + small overheads


def test_sample_is_encoded_once(tmp_path):
    enc, summary = build(tmp_path, small_docs())
    # 300 docs, one exact duplicate outside the sample is reused, sample vectors are never re-encoded
    assert summary["encoded_docs"] <= 300
    assert summary["encoded_docs"] >= 298


def test_rerun_of_complete_index_is_a_no_op_and_foreign_resume_is_refused(tmp_path):
    build(tmp_path, small_docs())
    before = arrays(tmp_path / "idx")
    _, again = build(tmp_path, small_docs())
    assert again["already_complete"] and again["encoded_docs"] == 0
    other = small_docs()
    other[7] = "something else entirely"
    with pytest.raises(EmbedctlError, match="another collection or settings"):
        build(tmp_path, other)
    with pytest.raises(EmbedctlError, match="another collection or settings"):
        build(tmp_path, small_docs(), nbits=4)
    _, replaced = build(tmp_path, other, overwrite=True)
    assert replaced["encoded_docs"] > 0
    assert not all(np.array_equal(before[k], v) for k, v in arrays(tmp_path / "idx").items() if k in before)


def test_resume_after_lost_chunks_is_identical(tmp_path):
    """In-process: drop finished chunks and the final files, rerun, compare with an uninterrupted build."""
    build(tmp_path, small_docs(), name="clean")
    build(tmp_path, small_docs(), name="broken")
    d = tmp_path / "broken"
    for name in ("metadata.json", "ivf.npy", "ivf_lengths.npy", "2.metadata.json", "2.codes.npy", "1.metadata.json"):
        (d / name).unlink()
    enc, summary = build(tmp_path, small_docs(), name="broken")
    assert summary["resumed_chunks"] == 1 and not summary["already_complete"]
    a, b = arrays(tmp_path / "clean"), arrays(d)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_empty_collection_and_bad_nbits(tmp_path):
    enc = SyntheticEncoder(dim=64)
    with pytest.raises(InputError, match="empty"):
        build_plaid_index(enc, [], tmp_path / "x", IndexConfig(), progress=False)
    with pytest.raises(EmbedctlError, match="1, 2 or 4"):
        build_plaid_index(enc, ["a"], tmp_path / "x", IndexConfig(nbits=3), progress=False)
    with pytest.raises(EmbedctlError, match="kmeans_points_per_centroid"):
        build_plaid_index(enc, ["a"], tmp_path / "x", IndexConfig(kmeans_points_per_centroid=0), progress=False)
    assert not (tmp_path / "x" / "metadata.json").exists()


def test_searcher_refuses_missing_unfinished_and_other_versions(tmp_path):
    with pytest.raises(EmbedctlError, match="no index at"):
        PlaidSearcher(tmp_path / "nope")
    build(tmp_path, small_docs())
    d = tmp_path / "idx"
    meta = json.loads((d / "metadata.json").read_text())
    (d / "metadata.json").write_text(json.dumps({**meta, "format_version": 99}))
    with pytest.raises(EmbedctlError, match="format version 99"):
        PlaidSearcher(d)
    (d / "metadata.json").write_text(json.dumps({**meta, "format": "colbert-ai"}))
    with pytest.raises(EmbedctlError, match="not an embedctl PLAID index"):
        PlaidSearcher(d)
    (d / "metadata.json").unlink()
    with pytest.raises(EmbedctlError, match="rerun the same"):
        PlaidSearcher(d)


@pytest.mark.slow
def test_kill_9_mid_index_then_resume_is_identical(tmp_path, scifact):
    """A real `python -m embedctl.index.plaid build` with the minilm ColBERT encoder, killed with SIGKILL
    after two finished chunks; the rerun skips them and ends with the same arrays as an uninterrupted build."""
    def cmd(out: Path) -> list[str]:
        return [sys.executable, "-m", "embedctl.index.plaid", "build", "--collection", str(scifact / "corpus.jsonl"),
                "--out", str(out), "--limit", "64", "--chunk-size", "8", "--sample-docs", "16",
                "--doc-max-length", "64", "--threads", "1", "--no-progress"]

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    clean = subprocess.run(cmd(tmp_path / "clean"), env=env, capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr
    out = tmp_path / "killed"
    proc = subprocess.Popen(cmd(out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not (out / "1.metadata.json").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / "metadata.json").exists(), "killed before the end"
    finished = sorted(p.name for p in out.glob("*.metadata.json"))
    assert finished and len(finished) < 8
    first = (out / "0.metadata.json").stat().st_mtime_ns
    rerun = subprocess.run(cmd(out), env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert summary["resumed_chunks"] == len(finished) >= 2
    assert (out / "0.metadata.json").stat().st_mtime_ns == first, "finished chunks are not rewritten"
    a, b = arrays(tmp_path / "clean"), arrays(out)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    ma, mb = (json.loads((p / "metadata.json").read_text()) for p in (tmp_path / "clean", out))
    assert ma == mb


def test_kmeans_points_per_centroid_key_sets_the_training_sample(tmp_path):
    """`index.kmeans_points_per_centroid` caps the k-means training vectors (recorded in plan.json)."""
    docs = small_docs()
    _, few = build(tmp_path, docs, "few", num_partitions=16, kmeans_points_per_centroid=4)
    _, many = build(tmp_path, docs, "many", num_partitions=16, kmeans_points_per_centroid=64)
    plan_few = json.loads((tmp_path / "few" / fmt.METADATA).read_text())["identity"]
    assert plan_few["kmeans_points_per_centroid"] == 4
    assert few["num_partitions"] == many["num_partitions"] == 16
    assert not np.array_equal(np.load(tmp_path / "few" / fmt.CENTROIDS), np.load(tmp_path / "many" / fmt.CENTROIDS))


def test_sample_spill_round_trip_matches_numpy_float16(tmp_path):
    from embedctl.index.plaid.sample import GROUP_DOCS, SampleSpill

    rng = np.random.default_rng(0)
    n_docs = GROUP_DOCS + 37  # two groups, the second ragged
    lens = rng.integers(1, 6, size=n_docs)
    vecs = (rng.normal(size=(int(lens.sum()), 8)) * [1, 1e-3, 1e3, 1e-6, 1e4, 1, 1, 1]).astype(np.float32)
    starts = np.concatenate([[0], np.cumsum(lens)])

    def encode(items):
        return np.concatenate([vecs[starts[i]:starts[i + 1]] for i in items]), lens[items]

    spill = SampleSpill(tmp_path, np.arange(n_docs))
    spill.fill(list(range(n_docs)), encode)
    expect = vecs.astype(np.float16).astype(np.float32)  # numpy's rounding, subnormals included
    gathered = np.sort(rng.choice(len(vecs), 500, replace=False))
    np.testing.assert_array_equal(spill.rows(gathered), expect[gathered])
    np.testing.assert_array_equal(spill.rows(np.arange(len(vecs))), expect)  # contiguous ranges: sliced, not gathered
    got, got_lens = spill.doc_vectors(np.array([3, 4, 5, n_docs - 1]))
    np.testing.assert_array_equal(got_lens, lens[[3, 4, 5, n_docs - 1]])
    np.testing.assert_array_equal(got, np.concatenate([expect[starts[i]:starts[i + 1]] for i in (3, 4, 5, n_docs - 1)]))
