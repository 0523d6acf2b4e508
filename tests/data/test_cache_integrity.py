"""Token caches and batch folders that are mixed or damaged are never accepted: one writer at a time (a lock
that kill -9 cannot leave stuck), the fingerprint checked again at commit, every file recorded (size +
sha256) and checked on open (sizes) and on demand / after a resume (sha256), missing chunks rebuilt by a
rerun, per-side provenance, and an output inside its input refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.datahelpers import REPO, scifact_slice
from support.ledgerwatch import kill_after_cache_chunks

from embedctl.config import load_config
from embedctl.data import pretokenize as pretokenize_engine
from embedctl.data.pretokenize import run_pretokenize
from embedctl.data.token_cache import open_token_cache
from embedctl.errors import EmbedctlError, InputError
from embedctl.util.lock import read_holder


def pretok(inp, out, *overrides: str):
    return run_pretokenize(load_config(None, [f"pretokenize.input={inp}", f"pretokenize.output={out}", *overrides]))


def cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "embedctl", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def finish(proc: subprocess.Popen, timeout: float = 180) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def hashes(root: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.parquet"))}


@pytest.fixture(scope="module")
def beir(module_tmp) -> Path:
    return scifact_slice(module_tmp("sf") / "scifact", n_queries=6, extra_docs=20)


@pytest.fixture(scope="module")
def reference(beir, module_tmp) -> Path:
    out = module_tmp("ref") / "tokens"
    pretok(beir, out, "pretokenize.rows_per_chunk=7")
    return out


@pytest.mark.slow
def test_two_concurrent_writers_with_other_settings_never_both_succeed(beir, tmp_path):
    out = tmp_path / "tokens"
    corpus = str(beir / "corpus.jsonl")
    procs = {n: cli("pretokenize", "--input", corpus, "--output", str(out), "--max-length", str(n),
                    "pretokenize.rows_per_chunk=4") for n in (64, 128)}
    results = {n: finish(p) for n, p in procs.items()}
    ok = [n for n, (rc, _) in results.items() if rc == 0]
    assert len(ok) <= 1, results
    for rc, err in results.values():
        if rc != 0:
            assert rc == 1 and "Traceback" not in err
            assert "another writer holds" in err or "other settings" in err, err
    if ok:  # the cache that is accepted holds one setting throughout
        cache = open_token_cache(str(out), "documents")
        assert cache.fingerprint["tokenizer"]["doc_max_length"] == ok[0]
        assert cache.verify(full=True) == []
        assert max(cache.lengths()) <= ok[0]
    # sharded writers take per-shard locks; the commit-time fingerprint check still refuses the mix
    out2 = tmp_path / "sharded"
    procs = {n: cli("pretokenize", "--input", corpus, "--output", str(out2), "--max-length", str(n),
                    "--num-shards", "2", "--shard-index", str(i), "pretokenize.rows_per_chunk=4")
             for i, n in enumerate((64, 128))}
    results = {n: finish(p) for n, p in procs.items()}
    assert sum(rc == 0 for rc, _ in results.values()) <= 1, results
    with pytest.raises(InputError):  # never a finished cache mixing both
        open_token_cache(str(out2), "documents")


def test_commit_refuses_when_another_run_wrote_other_settings_meanwhile(beir, tmp_path, monkeypatch):
    out = tmp_path / "tokens"
    original = pretokenize_engine.SideWriter._run_here

    def run_here_then_intrude(self, wanted, record):
        original(self, wanted, record)
        intruder = json.loads(Path(self.ledger_path).read_text())
        intruder["fingerprint"] = {**intruder["fingerprint"], "num_shards": 2}
        (Path(self.path) / "shards" / "ledger-00001-of-00002.json").write_text(json.dumps(intruder))

    monkeypatch.setattr(pretokenize_engine.SideWriter, "_run_here", run_here_then_intrude)
    with pytest.raises(EmbedctlError, match="another `embedctl pretokenize` wrote .* with other settings"):
        pretok(beir / "corpus.jsonl", out)
    assert not (out / "documents" / "ledger.json").exists()
    assert not json.loads((out / "documents" / "shards" / "ledger-00000-of-00001.json").read_text())["finished"]
    assert not (tmp_path / "tokens.lock").exists()  # released on the way out


@pytest.mark.parametrize("kind", ["chunks", "ids"])
def test_deleted_chunk_is_named_by_readers_and_rebuilt_by_a_rerun(beir, reference, tmp_path, kind):
    import shutil

    out = tmp_path / "tokens"
    shutil.copytree(reference, out)
    want = hashes(out)
    victim = out / "documents" / kind / "chunk-000001.parquet"
    victim.unlink()
    with pytest.raises(InputError, match=f"{kind}/chunk-000001.parquet: missing"):
        open_token_cache(str(out), "documents")
    proc = cli("data", "inspect", str(out))
    rc, err = finish(proc)
    assert rc == 1 and f"{kind}/chunk-000001.parquet: missing" in err and "Traceback" not in err
    assert "rerun the same `embedctl pretokenize`" in err
    pretok(beir, out, "pretokenize.rows_per_chunk=7")  # not "already finished": rebuilds the chunk
    assert hashes(out) == want
    assert open_token_cache(str(out), "documents").verify(full=True) == []


def test_checksums_recorded_and_verified_on_demand(beir, reference, tmp_path):
    import shutil

    out = tmp_path / "tokens"
    shutil.copytree(reference, out)
    ledger = json.loads((out / "documents" / "ledger.json").read_text())
    files = ledger["chunks"]["000000"]["files"]
    assert set(files) == {"chunks/chunk-000000.parquet", "ids/chunk-000000.parquet"}
    from embedctl.util.io import file_record

    assert files["chunks/chunk-000000.parquet"] == file_record(out / "documents" / "chunks" / "chunk-000000.parquet")
    proc = cli("data", "inspect", "--verify", str(out))
    rc, err = finish(proc)
    assert rc == 0, err
    victim = out / "documents" / "chunks" / "chunk-000002.parquet"
    victim.write_bytes(os.urandom(victim.stat().st_size))  # same size: only the sha256 tells
    open_token_cache(str(out), "documents")  # the cheap check (sizes) passes
    rc, err = finish(cli("data", "inspect", "--verify", str(out)))
    assert rc == 1 and "chunk-000002.parquet: content differs from the recorded sha256" in err
    victim.write_bytes(victim.read_bytes()[:100])  # truncated: the cheap check on open names it
    with pytest.raises(InputError, match="chunk-000002.parquet: 100 bytes, recorded"):
        open_token_cache(str(out), "documents")


@pytest.mark.slow
def test_kill_9_leaves_a_stale_lock_and_the_resume_checks_every_sha256(tmp_path):
    src = scifact_slice(tmp_path / "sf", n_queries=5, extra_docs=120)
    corpus = src / "corpus.jsonl"
    ref, out = tmp_path / "ref", tmp_path / "out"
    args = ["pretokenize", "--input", str(corpus), "--output", str(out), "pretokenize.rows_per_chunk=1",
            "model.doc_max_length=64"]
    pretok(corpus, ref, "pretokenize.rows_per_chunk=1", "model.doc_max_length=64")
    ledger = out / "documents" / "shards" / "ledger-00000-of-00001.json"
    proc = cli(*args)
    assert kill_after_cache_chunks(proc, ledger, 5) is not None, "the run finished before it could be killed"
    lock = tmp_path / "out.lock"
    assert read_holder(lock)["pid"] == proc.pid  # stale: its holder is gone
    victim = out / "documents" / "chunks" / "chunk-000001.parquet"
    victim.write_bytes(os.urandom(victim.stat().st_size))  # damaged without changing its size
    rc, err = finish(cli(*args), 120)
    assert rc == 0, err
    assert "rebuilding chunk 000001" in err and "content differs" in err
    assert hashes(out) == hashes(ref) and not lock.exists()


def test_side_runs_keep_their_own_provenance(tmp_path):
    docs, queries = tmp_path / "d.tsv", tmp_path / "q.tsv"
    docs.write_text("d1\tfirst document\nd2\tsecond document\n")
    queries.write_text("q1\ta query\n")
    out = tmp_path / "tokens"
    pretok(docs, out, "pretokenize.side=documents", "model.doc_max_length=40")
    pretok(queries, out, "pretokenize.side=queries", "model.query_max_length=20")
    d = yaml.safe_load((out / "documents" / "resolved_config.yaml").read_text())
    q = yaml.safe_load((out / "queries" / "resolved_config.yaml").read_text())
    assert d["pretokenize"]["input"] == str(docs) and d["pretokenize"]["side"] == "documents"
    assert q["pretokenize"]["input"] == str(queries) and q["pretokenize"]["side"] == "queries"
    root = yaml.safe_load((out / "resolved_config.yaml").read_text())
    assert root["pretokenize"]["input"] == str(docs)  # the first run's; the queries run did not replace it


def test_prebatch_output_inside_its_input_is_refused_before_any_work(beir, reference, tmp_path):
    import shutil

    from embedctl.commands.prebatch import run as prebatch

    cache = tmp_path / "tokens"
    shutil.copytree(reference, cache)
    before = {p: p.read_bytes() for p in cache.rglob("*") if p.is_file()}
    qrels = str(beir / "qrels" / "train.tsv")
    for output in (cache, cache / "batches", cache / "documents"):
        loaded = load_config(None, [f"prebatch.input={cache}", f"prebatch.qrels={qrels}", f"prebatch.output={output}",
                                    "prebatch.overwrite=true"])
        with pytest.raises(EmbedctlError, match="is (inside )?the input --input") as err:
            prebatch(loaded)
        assert err.value.exit_code == 2
    assert {p: p.read_bytes() for p in cache.rglob("*") if p.is_file()} == before
    assert not (cache / "batches").exists()


def test_batch_metadata_records_every_file_and_damage_is_named(beir, reference, tmp_path):
    from embedctl.commands.prebatch import run as prebatch
    from embedctl.data.batches import BatchStream
    from embedctl.util.io import file_record

    out = tmp_path / "batches"
    loaded = load_config(None, [f"prebatch.input={reference}", f"prebatch.qrels={beir / 'qrels' / 'train.tsv'}",
                                f"prebatch.output={out}", "prebatch.queries_per_batch=2"])
    meta = prebatch(loaded)
    first = meta["batches"][0]
    assert first["files"]["queries.parquet"] == file_record(out / first["name"] / "queries.parquet")
    assert not (tmp_path / "batches.lock").exists()
    rc, err = finish(cli("data", "inspect", "--verify", str(out)))
    assert rc == 0 and "Traceback" not in err, err
    victim = out / first["name"] / "documents.parquet"
    victim.write_bytes(os.urandom(victim.stat().st_size))
    rc, err = finish(cli("data", "inspect", "--verify", str(out)))
    assert rc == 1 and "documents.parquet: content differs from the recorded sha256" in err
    with pytest.raises(InputError, match="documents.parquet: content differs from the recorded sha256") \
            as refused:  # training reads each batch against its sha256 too (opening checks sizes only)
        next(iter(BatchStream(str(out), shuffle=False, prefetch=0)))
    assert "embedctl prebatch --overwrite" in refused.value.hint
    victim.unlink()
    with pytest.raises(InputError, match="documents.parquet: missing"):
        BatchStream(str(out))


@pytest.mark.parametrize("kind", ["chunks", "ids"])
def test_same_size_corruption_of_a_chunk_is_refused_by_prebatch(beir, reference, tmp_path, kind):
    """A flipped byte keeps the size the cheap check on open compares: the reader checks each chunk's sha256
    as it reads it, so prebatch refuses instead of batching wrong tokens (or ids)."""
    import shutil

    from embedctl.commands.prebatch import run as prebatch

    out = tmp_path / "tokens"
    shutil.copytree(reference, out)
    victim = out / "documents" / kind / "chunk-000001.parquet"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit, same length
    victim.write_bytes(bytes(data))
    loaded = load_config(None, [f"prebatch.input={out}", f"prebatch.qrels={beir / 'qrels' / 'train.tsv'}",
                                f"prebatch.output={tmp_path / 'batches'}", "prebatch.queries_per_batch=2"])
    with pytest.raises(InputError) as err:
        prebatch(loaded)
    text = str(err.value) + str(err.value.hint)
    assert f"{kind}/chunk-000001.parquet: content differs from the recorded sha256" in text
    assert "rerun the same `embedctl pretokenize`" in text
    assert not any((tmp_path / "batches").glob("*/*.parquet"))  # nothing batched from it


def test_a_rerun_over_a_finished_cache_rebuilds_a_same_size_damaged_chunk(tmp_path):
    """`pretokenize` again over a finished local cache whose chunk was damaged without changing its size:
    it said "already finished" and kept the chunk; it now checks every sha256 and rebuilds that chunk."""
    corpus = tmp_path / "c.tsv"
    corpus.write_text("".join(f"d{i}\tdocument number {i} about scurvy\n" for i in range(12)))
    ref, out = tmp_path / "ref", tmp_path / "out"
    for folder in (ref, out):
        pretok(corpus, folder, "pretokenize.rows_per_chunk=4", "model.doc_max_length=16")
    victim = out / "documents" / "chunks" / "chunk-000001.parquet"
    victim.write_bytes(os.urandom(victim.stat().st_size))
    rc, err = finish(cli("pretokenize", "--input", str(corpus), "--output", str(out), "pretokenize.rows_per_chunk=4",
                         "model.doc_max_length=16"))
    assert rc == 0, err
    assert "rebuilding chunk 000001" in err and "content differs" in err
    assert hashes(out) == hashes(ref)
