"""PLAID indexer: layout, encode-once sample reuse, duplicates, the build ledger (resume after an interruption
in-process and after kill -9 of a real process, fresh start on another request, refusal of another backend),
refusals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.ledgerwatch import recorded_chunks, wait_for_chunks
from support.synthetic import SyntheticEncoder

from embedctl.config.sections.index import IndexConfig
from embedctl.errors import EmbedctlError, InputError
from embedctl.index import files as fmt
from embedctl.index import meta as M
from embedctl.index import plaid_indexer as indexer_mod
from embedctl.index.build import build_plaid_index
from embedctl.index.encoding import encode_with_progress
from embedctl.index.kinds import plaid as plaid_kind_mod
from embedctl.index.ledger import LEDGER_FILE, BuildLedger
from embedctl.index.plaid import native_backend
from embedctl.index.plaid.reference import Backend
from embedctl.index.plaid_files import open_plaid
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


class Interrupted(Exception):
    pass


class InterruptedEncoder(SyntheticEncoder):
    """The synthetic encoder, stopping the build when asked to encode a document of ``stop_at``."""

    def __init__(self, stop_at: set[str]):
        super().__init__(dim=64, num_topics=128, mean_len=30)
        self.stop_at = stop_at

    def encode_documents(self, items, **kw):
        if self.stop_at.intersection(items):
            raise Interrupted
        return super().encode_documents(items, **kw)


def interrupted_build(tmp_path: Path, name: str, stop_chunk: int = 2, **cfg) -> Path:
    """A build of ``small_docs`` stopped when chunk ``stop_chunk`` encodes its first document outside the
    k-means sample (default: chunks 0 and 1 finished); returns its build folder."""
    docs = small_docs()
    pids = np.setdiff1d(np.arange(100 * stop_chunk, 100 * stop_chunk + 100), indexer_mod.sample_pids(300, 0, 120))
    with pytest.raises(Interrupted):
        build(tmp_path, docs, name=name, enc=InterruptedEncoder({docs[p] for p in pids}), **cfg)
    assert not (tmp_path / name).exists()
    return M.building_dir(tmp_path, name)


def arrays(index_dir: Path) -> dict[str, np.ndarray]:
    return {p.name: np.load(p, allow_pickle=False) for p in sorted((index_dir / fmt.PLAID_DIR).glob("*.npy"))}


def assert_same_arrays(a_dir: Path, b_dir: Path) -> None:
    a, b = arrays(a_dir), arrays(b_dir)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_layout_and_metadata(tmp_path):
    enc, summary = build(tmp_path, small_docs())
    d = tmp_path / "idx"
    meta = json.loads((d / M.META_FILE).read_text())
    assert meta["format"] == M.FORMAT and meta["format_version"] == M.FORMAT_VERSION and meta["kind"] == "plaid"
    plaid = meta["plaid"]
    assert plaid["num_docs"] == 300 and plaid["num_chunks"] == 3 and summary["num_chunks"] == 3
    assert not M.building_dir(tmp_path, "idx").exists(), "the build folder (ledger, sample spill) is gone once complete"
    # the one build driver's folder: documents (ids "0".."299") and id table too, so it can be changed later
    assert sorted(p.name for p in d.iterdir()) == sorted([M.DOCS_FILE, M.META_FILE, fmt.IDS_FILE, fmt.PLAID_DIR])
    assert [p.name for p in d.rglob("*.json")] == [M.META_FILE], "one metadata file, no per-chunk or plaid/ JSON"
    assert plaid["sample_docs"] == 120 and plaid["sample_embeddings"] > plaid["heldout"] > 0 < plaid["kmeans_points"]
    assert meta["backend"] == summary["backend"] and set(meta["backend"]) == {"name", "precision"}
    a = d / fmt.PLAID_DIR
    doclens = np.concatenate([np.load(a / f"doclens.{i}.npy") for i in range(3)])
    codes = np.concatenate([np.load(a / f"{i}.codes.npy") for i in range(3)])
    res = np.concatenate([np.load(a / f"{i}.residuals.npy") for i in range(3)])
    assert doclens.sum() == plaid["num_embeddings"] == len(codes) == len(res)
    assert res.dtype == np.uint8 and res.shape[1] == 64 * 2 // 8 and codes.dtype == np.int32
    assert 0 <= codes.min() and codes.max() < plaid["num_partitions"]
    cent = np.load(a / "centroids.npy")
    assert cent.dtype == np.float16
    np.testing.assert_allclose(np.linalg.norm(cent.astype(np.float32), axis=1), 1, atol=2e-3)
    assert [c["embedding_offset"] for c in plaid["chunks"]] == [0, int(doclens[:100].sum()), int(doclens[:200].sum())]
    # exact duplicate: same vectors, stored identically
    off = np.concatenate([[0], np.cumsum(doclens)])
    np.testing.assert_array_equal(codes[off[3]:off[4]], codes[off[5]:off[6]])
    assert 4 + 16 <= summary["bytes_per_vector"] < 4 + 16 + 40  # codes + residuals + small overheads
    loaded = open_plaid(d)
    assert loaded.plaid == plaid and loaded.centroids.dtype == np.float32 and len(loaded.doclens) == 300
    np.testing.assert_array_equal(loaded.doclens, doclens)
    assert loaded.chunk_emb_starts.tolist() == [0, int(doclens[:100].sum()), int(doclens[:200].sum()), len(codes)]


def test_sample_is_encoded_once(tmp_path):
    enc, summary = build(tmp_path, small_docs())
    # 300 docs, one exact duplicate outside the sample is reused, sample vectors are never re-encoded
    assert summary["encoded_docs"] <= 300
    assert summary["encoded_docs"] >= 298


def test_each_document_is_read_once_before_its_final_encode(tmp_path):
    """Fingerprint, sample and duplicate check share one pass: every document is read once after it."""
    class CountingDocs(list):
        reads = 0

        def __getitem__(self, item):
            CountingDocs.reads += 1
            return list.__getitem__(self, item)

    docs = CountingDocs(small_docs())
    enc, summary = build(tmp_path, docs)
    assert CountingDocs.reads == summary["encoded_docs"] <= 299  # the duplicate (pid 5) is never read


def test_sample_and_other_documents_are_compressed_from_the_same_float16_vectors(tmp_path):
    """Every document, sampled (its vectors from the float16 spill) or not (encoded at its chunk), is
    compressed from its vectors rounded to float16: its codes and residuals do not depend on the sample."""
    docs = small_docs()
    build(tmp_path, docs, sample_docs=120)
    index = open_plaid(tmp_path / "idx")
    codec = indexer_mod.codec_mod.Codec(np.asarray(index.centroids, np.float16), index.avg_residual,
                                        index.bucket_cutoffs, index.bucket_weights, 2)
    vecs, lens = SyntheticEncoder(dim=64, num_topics=128, mean_len=30).encode_documents(docs)
    np.testing.assert_array_equal(lens, index.doclens)
    codes, packed = codec.compress(indexer_mod.float16_rounded(vecs), backend=indexer_mod.plaid_backend(IndexConfig()))
    sample = indexer_mod.sample_pids(300, 0, 120)
    in_sample = np.repeat(np.isin(np.arange(300), sample), lens)
    assert in_sample.any() and not in_sample.all()
    np.testing.assert_array_equal(np.concatenate(index.codes), codes)
    np.testing.assert_array_equal(np.concatenate(index.residuals), packed)


def test_progress_advances_every_encode_batch():
    class Recorder:
        def __init__(self):
            self.steps = []

        def advance(self, n, info=None):
            self.steps.append(n)

    enc, bar = SyntheticEncoder(dim=16), Recorder()
    docs = small_docs(100)
    vecs, lens = encode_with_progress(enc, docs, 32, bar)
    assert bar.steps == [32, 32, 32, 4]
    whole_vecs, whole_lens = enc.encode_documents(docs)
    np.testing.assert_array_equal(lens, whole_lens)
    np.testing.assert_array_equal(vecs, whole_vecs)


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
    """In-process: a build stopped while encoding chunk 2, chunk 1's arrays then lost; the rerun redoes
    chunks 1 and 2 only and ends with the same arrays as an uninterrupted build."""
    build(tmp_path, small_docs(), name="clean")
    folder = interrupted_build(tmp_path, "broken")
    assert recorded_chunks(folder) == [0, 1]
    (folder / fmt.PLAID_DIR / "1.codes.npy").unlink()
    enc, summary = build(tmp_path, small_docs(), name="broken")
    assert summary["resumed_chunks"] == 1 and not summary["already_complete"]
    assert_same_arrays(tmp_path / "clean", tmp_path / "broken")


def test_resume_rereads_finished_chunks_and_redoes_a_damaged_one(tmp_path):
    """In-process: a build stopped while encoding chunk 2; chunk 0's residuals then damaged in place (same
    size, same header): the rerun checks every finished chunk's sha256, redoes chunk 0 and ends identical."""
    build(tmp_path, small_docs(), name="clean")
    folder = interrupted_build(tmp_path, "broken")
    victim = folder / fmt.PLAID_DIR / "0.residuals.npy"
    data = bytearray(victim.read_bytes())
    data[-16:] = bytes(255 - b for b in data[-16:])
    victim.write_bytes(bytes(data))
    enc, summary = build(tmp_path, small_docs(), name="broken")
    assert summary["resumed_chunks"] == 1, "only chunk 1 was trusted"
    assert_same_arrays(tmp_path / "clean", tmp_path / "broken")


def test_chunk_is_finished_only_once_the_ledger_records_it(tmp_path, monkeypatch):
    """Killed between renaming chunk 1's arrays into place and recording it: the rerun rewrites chunk 1."""
    build(tmp_path, small_docs(), name="clean")
    record = BuildLedger.record_chunk

    def record_then_die(self, chunk):
        if chunk.index == 1:
            raise Interrupted
        record(self, chunk)

    monkeypatch.setattr(BuildLedger, "record_chunk", record_then_die)
    with pytest.raises(Interrupted):
        build(tmp_path, small_docs(), name="killed")
    folder = M.building_dir(tmp_path, "killed")
    assert (folder / fmt.PLAID_DIR / "1.codes.npy").is_file() and recorded_chunks(folder) == [0]
    monkeypatch.setattr(BuildLedger, "record_chunk", record)
    _, summary = build(tmp_path, small_docs(), name="killed")
    assert summary["resumed_chunks"] == 1 and summary["encoded_docs"] < 200
    assert_same_arrays(tmp_path / "clean", tmp_path / "killed")


def test_another_request_starts_the_build_afresh(tmp_path):
    folder = interrupted_build(tmp_path, "idx")
    ledger = json.loads((folder / LEDGER_FILE).read_text())
    assert ledger["request"]["index"]["nbits"] == 2 and len(ledger["plaid_chunks"]) == 2
    _, summary = build(tmp_path, small_docs(), nbits=4)
    assert summary["resumed_chunks"] == 0 and summary["nbits"] == 4
    build(tmp_path, small_docs(), name="clean", nbits=4)
    assert_same_arrays(tmp_path / "clean", tmp_path / "idx")


def test_resume_on_another_backend_is_refused(tmp_path, monkeypatch):
    folder = interrupted_build(tmp_path, "idx", backend="reference")
    assert json.loads((folder / LEDGER_FILE).read_text())["backend"] == {"name": "reference", "precision": "exact"}

    class PretendNative(Backend):
        name = "native"

    monkeypatch.setattr(plaid_kind_mod, "plaid_backend", lambda cfg, device=None: PretendNative("int16"))
    with pytest.raises(EmbedctlError) as refused:
        build(tmp_path, small_docs())
    text = f"{refused.value} {refused.value.hint}"
    assert "reference/exact" in text and "native/int16" in text
    assert "index.backend=reference" in text and "--overwrite" in text
    assert recorded_chunks(folder) == [0, 1], "nothing was changed"
    _, summary = build(tmp_path, small_docs(), overwrite=True)
    assert summary["resumed_chunks"] == 0 and summary["backend"] == {"name": "native", "precision": "int16"}


@pytest.mark.skipif("int16" not in native_backend.runnable_precisions("index"), reason="no int16 kernel here")
def test_a_resumed_build_asked_for_auto_keeps_the_assignment_it_started_with(tmp_path):
    """Started on int16 (say, before auto chose int8 on this CPU), resumed with auto: it resumes on int16 instead
    of being refused; asked for another precision by name, it is refused, naming the key."""
    folder = interrupted_build(tmp_path, "idx", assign_precision="int16")
    assert json.loads((folder / LEDGER_FILE).read_text())["backend"]["precision"] == "int16"
    others = [p for p in native_backend.runnable_precisions("index") if p != "int16"]
    with pytest.raises(EmbedctlError, match="index.assign_precision=int16"):
        build(tmp_path, small_docs(), assign_precision=others[0])
    _, summary = build(tmp_path, small_docs())  # index.assign_precision=auto
    assert summary["resumed_chunks"] == 2 and summary["backend"]["precision"] == "int16"
    build(tmp_path, small_docs(), name="clean")  # auto from the start: every exact precision, the same bytes
    assert_same_arrays(tmp_path / "clean", tmp_path / "idx")


def test_build_stopped_before_its_rename_only_needs_the_rename(tmp_path):
    """Killed after embedctl_index.json and the ledger's removal, before the rename: the rerun renames."""
    build(tmp_path, small_docs())
    folder = M.building_dir(tmp_path, "idx")
    (tmp_path / "idx").rename(folder)
    stamp = (folder / fmt.PLAID_DIR / "0.codes.npy").stat().st_mtime_ns
    _, summary = build(tmp_path, small_docs())
    assert not folder.exists() and (tmp_path / "idx" / M.META_FILE).is_file()
    assert (tmp_path / "idx" / fmt.PLAID_DIR / "0.codes.npy").stat().st_mtime_ns == stamp, "nothing rebuilt"
    assert summary["num_docs"] == 300


def test_empty_collection_and_bad_nbits(tmp_path):
    enc = SyntheticEncoder(dim=64)
    with pytest.raises(InputError, match="empty"):
        build_plaid_index(enc, [], tmp_path / "x", IndexConfig(), progress=False)
    with pytest.raises(EmbedctlError, match="1, 2 or 4"):
        build_plaid_index(enc, ["a"], tmp_path / "x", IndexConfig(nbits=3), progress=False)
    with pytest.raises(EmbedctlError, match="kmeans_points_per_centroid"):
        build_plaid_index(enc, ["a"], tmp_path / "x", IndexConfig(kmeans_points_per_centroid=0), progress=False)
    assert not (tmp_path / "x" / M.META_FILE).exists() and not list(tmp_path.iterdir()), "nothing written"


def test_searcher_refuses_missing_unfinished_damaged_and_other_versions(tmp_path):
    with pytest.raises(EmbedctlError, match="no index at"):
        PlaidSearcher(tmp_path / "nope")
    build(tmp_path, small_docs())
    d = tmp_path / "idx"
    meta = json.loads((d / M.META_FILE).read_text())
    (d / M.META_FILE).write_text(json.dumps({**meta, "format_version": 99}))
    with pytest.raises(EmbedctlError, match="format version 99"):
        PlaidSearcher(d)
    (d / M.META_FILE).write_text(json.dumps({**meta, "format": "colbert-ai"}))
    with pytest.raises(EmbedctlError, match="not an embedctl index"):
        PlaidSearcher(d)
    (d / M.META_FILE).write_text(json.dumps(M.seal({**meta, "kind": "dense"})))
    with pytest.raises(EmbedctlError, match="not an embedctl PLAID index"):
        PlaidSearcher(d)
    (d / M.META_FILE).write_text(json.dumps(meta))
    codes = np.load(d / fmt.PLAID_DIR / "1.codes.npy")
    np.save(d / fmt.PLAID_DIR / "1.codes.npy", codes[:-1])
    with pytest.raises(EmbedctlError, match=r"1\.codes\.npy: \d+ bytes, recorded \d+"):  # the file records first
        PlaidSearcher(d)
    (d / M.META_FILE).write_text(json.dumps(M.seal({k: v for k, v in meta.items() if k != "files"})))  # no records
    with pytest.raises(EmbedctlError, match="1.codes.npy: int32"):  # the loader's dtype / shape check
        PlaidSearcher(d)
    (d / M.META_FILE).write_text(json.dumps(meta))
    (d / fmt.PLAID_DIR / "1.codes.npy").unlink()
    with pytest.raises(EmbedctlError, match="1.codes.npy: missing"):
        PlaidSearcher(d)
    interrupted_build(tmp_path, "half")
    with pytest.raises(EmbedctlError, match="rerun the same"):
        PlaidSearcher(tmp_path / "half")


@pytest.mark.slow
def test_kill_9_mid_index_then_resume_is_identical(tmp_path, scifact):
    """A real `python bench/plaid_build.py build` with the minilm ColBERT encoder, killed with SIGKILL once
    its ledger records two finished chunks; the rerun skips them and ends with the same arrays and metadata
    as an uninterrupted build."""
    def cmd(out: Path) -> list[str]:
        return [sys.executable, str(REPO / "bench" / "plaid_build.py"), "build", "--collection",
                str(scifact / "corpus.jsonl"), "--out", str(out), "--limit", "64", "--chunk-size", "8",
                "--sample-docs", "16", "--doc-max-length", "64", "--threads", "1", "--no-progress"]

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    clean = subprocess.run(cmd(tmp_path / "clean"), env=env, capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr
    out = tmp_path / "killed"
    folder = M.building_dir(tmp_path, "killed")
    proc = subprocess.Popen(cmd(out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_chunks(folder, 2, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (out / M.META_FILE).exists() and not (folder / M.META_FILE).exists(), "killed before the end"
    finished = recorded_chunks(folder)
    assert len(finished) >= 2 and len(finished) < 8
    first = (folder / fmt.PLAID_DIR / "0.codes.npy").stat().st_mtime_ns
    rerun = subprocess.run(cmd(out), env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert summary["resumed_chunks"] == len(finished) >= 2
    assert (out / fmt.PLAID_DIR / "0.codes.npy").stat().st_mtime_ns == first, "finished chunks are not rewritten"
    assert_same_arrays(tmp_path / "clean", out)
    ma, mb = (json.loads((p / M.META_FILE).read_text()) for p in (tmp_path / "clean", out))
    run_facts = ("created", "timings", "build", M.SEAL_KEY)
    assert {k: v for k, v in ma.items() if k not in run_facts} == {k: v for k, v in mb.items() if k not in run_facts}


def test_kmeans_points_per_centroid_key_sets_the_training_sample(tmp_path):
    """`index.kmeans_points_per_centroid` caps the k-means training vectors (recorded in the metadata)."""
    docs = small_docs()
    _, few = build(tmp_path, docs, "few", num_partitions=16, kmeans_points_per_centroid=4)
    _, many = build(tmp_path, docs, "many", num_partitions=16, kmeans_points_per_centroid=64)
    plan_few = json.loads((tmp_path / "few" / M.META_FILE).read_text())["plaid"]
    assert plan_few["kmeans_points_per_centroid"] == 4
    assert few["num_partitions"] == many["num_partitions"] == 16
    assert not np.array_equal(arrays(tmp_path / "few")[fmt.CENTROIDS], arrays(tmp_path / "many")[fmt.CENTROIDS])


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
    # doc_vectors reuses one buffer: a larger call takes a new one, smaller ones write into it; each result is right
    for docs in (np.arange(n_docs), np.array([0, 7]), np.arange(GROUP_DOCS - 3, GROUP_DOCS + 3), np.array([n_docs - 1])):
        got, _ = spill.doc_vectors(docs)
        np.testing.assert_array_equal(got, np.concatenate([expect[starts[i]:starts[i + 1]] for i in docs]))
    assert spill.doc_vectors(np.array([1]))[0].base is spill.doc_vectors(np.array([2]))[0].base  # the same buffer


@pytest.mark.parametrize("dim", [3, 128])  # 128: a large output, from util.memory.scratch_empty
def test_input_order_puts_every_batch_document_in_its_place(dim):
    """encoding._input_order: documents encoded in a length order, in batches (empty documents among them), come
    back in input order with their doclens."""
    from embedctl.index.encoding import _input_order

    rng = np.random.default_rng(dim)
    lens = rng.integers(0, 400, 700)
    lens[::50] = 0
    per_doc = [rng.normal(size=(int(n), dim)).astype(np.float32) for n in lens]
    order = np.argsort(-lens, kind="stable")
    parts = [(np.concatenate([per_doc[j] for j in order[lo:lo + 32]]), lens[order[lo:lo + 32]])
             for lo in range(0, len(order), 32)]
    vectors, doclens = _input_order(parts, order)
    np.testing.assert_array_equal(doclens, lens)
    np.testing.assert_array_equal(vectors, np.concatenate(per_doc))
