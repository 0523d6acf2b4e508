"""Token cache: schema, reader API, determinism across workers and shards, fingerprint checks, crash
resume (kill -9 of a real subprocess), uint32 ids, bad input leaves nothing finished."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from support.datahelpers import REPO, scifact_slice
from support.ledgerwatch import kill_after_cache_chunks

from embedctl.config import load_config
from embedctl.data.pretokenize import run_pretokenize
from embedctl.data.token_cache import open_token_cache
from embedctl.errors import EmbedctlError, InputError


def pretok(inp, out, *overrides: str):
    loaded = load_config(None, [f"pretokenize.input={inp}", f"pretokenize.output={out}", *overrides])
    return run_pretokenize(loaded)


def tree_hashes(root: Path, subdirs=("chunks", "ids")) -> dict[str, str]:
    out = {}
    for sub in subdirs:
        for p in sorted(root.glob(f"*/{sub}/*.parquet")) + sorted(root.glob(f"{sub}/*.parquet")):
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def beir(module_tmp) -> Path:
    return scifact_slice(module_tmp("sf") / "scifact", n_queries=10, extra_docs=25)


@pytest.fixture(scope="module")
def reference(beir, module_tmp) -> Path:
    out = module_tmp("ref") / "tokens"
    pretok(beir, out, "pretokenize.rows_per_chunk=7")
    return out


def test_schema_layout_and_reader(beir, reference):
    docs = [json.loads(line) for line in (beir / "corpus.jsonl").read_text().splitlines()]
    for side, n in (("documents", len(docs)), ("queries", 10)):
        chunk = reference / side / "chunks" / "chunk-000000.parquet"
        schema = pq.read_schema(chunk)
        assert schema.names == ["ID", "TOKEN_ID_LIST"]
        assert str(schema.field("ID").type) == "uint64"
        assert str(schema.field("TOKEN_ID_LIST").type) == "large_list<element: uint16>"
        assert pq.read_schema(reference / side / "ids" / "chunk-000000.parquet").names == ["ID", "STRING_ID"]
        ledger = json.loads((reference / side / "ledger.json").read_text())
        assert ledger["finished"] and ledger["num_rows"] == n and ledger["format_version"] == 1
        fp = ledger["fingerprint"]
        assert fp["tokenizer"]["files"] and fp["input"]["size"] > 0 and fp["input"]["mtime"]
        assert (reference / "resolved_config.yaml").is_file() and (reference / "versions.json").is_file()
    cache = open_token_cache(str(reference), "documents")
    assert len(cache) == len(docs) and cache.ids == [d["_id"] for d in docs]
    lists = list(cache.token_lists())
    assert len(lists) == len(docs) and all(int(t[0]) == 101 and int(t[-1]) == 102 for t in lists)
    assert max(len(t) for t in lists) <= 256 and cache.token_dtype == "uint16"
    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.tokenization import TextTokenizer

    tok = TextTokenizer(ModelConfig())
    first = docs[0]["title"] + " " + docs[0]["text"]
    assert lists[0].tolist() == tok.encode_documents([first])[0]
    q = open_token_cache(str(reference / "queries"))
    assert q.side == "queries" and len(q) == 10


def test_rerun_is_a_no_op_and_mismatch_fails(beir, reference, tmp_path):
    before = tree_hashes(reference)
    pretok(beir, reference, "pretokenize.rows_per_chunk=7")
    assert tree_hashes(reference) == before
    with pytest.raises(EmbedctlError) as err:
        pretok(beir, reference, "pretokenize.rows_per_chunk=7", "model.doc_max_length=64")
    msg = str(err.value)
    assert "doc_max_length: 256 -> 64" in msg and "--overwrite" in msg
    assert tree_hashes(reference) == before  # nothing touched


def test_overwrite_rebuilds(beir, tmp_path):
    out = tmp_path / "t"
    pretok(beir / "queries.jsonl", out, "pretokenize.side=queries")
    pretok(beir / "queries.jsonl", out, "pretokenize.side=queries", "model.query_max_length=8", "pretokenize.overwrite=true")
    cache = open_token_cache(str(out), "queries")
    assert max(len(t) for t in cache.token_lists()) == 8


@pytest.mark.slow
def test_workers_and_shards_give_identical_bytes(beir, reference, tmp_path):
    want = tree_hashes(reference)
    for workers in (2, 4):
        out = tmp_path / f"w{workers}"
        pretok(beir, out, "pretokenize.rows_per_chunk=7", f"pretokenize.workers={workers}")
        assert tree_hashes(out) == want, workers
    out = tmp_path / "sharded"
    pretok(beir, out, "pretokenize.rows_per_chunk=7", "pretokenize.num_shards=3", "pretokenize.shard_index=1")
    with pytest.raises(InputError, match="not finished"):
        open_token_cache(str(out), "documents")
    pretok(beir, out, "pretokenize.rows_per_chunk=7", "pretokenize.num_shards=3", "pretokenize.shard_index=0")
    os.environ["WORLD_SIZE"], os.environ["RANK"] = "3", "2"  # the third shard from torchrun-style variables
    try:
        pretok(beir, out, "pretokenize.rows_per_chunk=7")
    finally:
        del os.environ["WORLD_SIZE"], os.environ["RANK"]
    assert tree_hashes(out) == want
    cache = open_token_cache(str(out), "documents")
    assert cache.ids == open_token_cache(str(reference), "documents").ids


def _run_cli(*args, env=None):
    return subprocess.Popen([sys.executable, "-m", "embedctl", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


@pytest.mark.slow
def test_kill_9_then_resume_is_byte_identical(tmp_path):
    src = scifact_slice(tmp_path / "sf", n_queries=5, extra_docs=120)
    corpus = src / "corpus.jsonl"
    ref, out = tmp_path / "ref", tmp_path / "out"
    args = ["pretokenize", "--input", str(corpus), "--output", str(out), "pretokenize.rows_per_chunk=1",
            "model.doc_max_length=64"]
    pretok(corpus, ref, "pretokenize.rows_per_chunk=1", "model.doc_max_length=64")
    ledger = out / "documents" / "shards" / "ledger-00000-of-00001.json"
    proc = _run_cli(*args)
    killed_at = kill_after_cache_chunks(proc, ledger, 5)
    assert killed_at is not None, "the run finished before it could be killed"
    state = json.loads(ledger.read_text())
    assert not state["finished"] and 5 <= len(state["chunks"]) < 120
    assert not (out / "documents" / "ledger.json").exists()
    with pytest.raises(InputError, match="not finished"):
        open_token_cache(str(out), "documents")
    rerun = _run_cli(*args)
    assert rerun.wait(120) == 0, rerun.stderr.read().decode()
    assert tree_hashes(out) == tree_hashes(ref)
    assert not list(out.rglob("*.tmp"))


def _big_vocab_model(folder: Path, size: int = 70000) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertConfig, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words = ["alpha", "beta", "gamma", "delta"]
    vocab = {t: i for i, t in enumerate(specials + [f"w{i}" for i in range(size - len(specials) - len(words))] + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")
    fast.save_pretrained(folder)
    BertConfig(vocab_size=size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=37).save_pretrained(folder)
    return folder


def test_uint32_ids_for_big_vocabularies(tmp_path):
    model = _big_vocab_model(tmp_path / "bigvocab")
    src = tmp_path / "c.tsv"
    src.write_text("a\talpha beta\nb\tdelta gamma alpha\n")
    out = tmp_path / "t"
    pretok(src, out, f"model.name_or_path={model}")
    schema = pq.read_schema(out / "documents" / "chunks" / "chunk-000000.parquet")
    assert str(schema.field("TOKEN_ID_LIST").type) == "large_list<element: uint32>"
    cache = open_token_cache(str(out), "documents")
    lists = [t.tolist() for t in cache.token_lists()]
    assert lists[1][1:-1] == [69999, 69998, 69996] and cache.token_dtype == "uint32"


def test_bad_input_leaves_nothing_finished(tmp_path):
    src = tmp_path / "c.jsonl"
    lines = [json.dumps({"_id": str(i), "text": f"text number {i}"}) for i in range(30)]
    lines[25] = '{"_id": "25", "text": '
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "t"
    with pytest.raises(InputError) as err:
        pretok(src, out, "pretokenize.rows_per_chunk=5")
    assert err.value.line == 26 and "c.jsonl" in str(err.value)
    led = json.loads((out / "documents" / "shards" / "ledger-00000-of-00001.json").read_text())
    assert not led["finished"] and not (out / "documents" / "ledger.json").exists()
    with pytest.raises(InputError, match="not finished"):
        open_token_cache(str(out))
    pretok(src, tmp_path / "s", "pretokenize.rows_per_chunk=5", "pretokenize.on_error=skip")
    cache = open_token_cache(str(tmp_path / "s"))
    assert len(cache) == 29 and "25" not in cache.ids
    report = [json.loads(x) for x in (tmp_path / "s" / "documents" / "skipped.jsonl").read_text().splitlines()]
    assert report[0]["line"] == 26 and "JSON" in report[0]["reason"]


def test_memory_url_input_and_output():
    import fsspec

    fs = fsspec.filesystem("memory")
    with fs.open("/in/q.tsv", "wb") as fh:
        fh.write(b"q1\thello world\nq2\tsecond query here\n")
    pretok("memory://in/q.tsv", "memory://out/tok", "pretokenize.side=queries")
    cache = open_token_cache("memory://out/tok", "queries")
    assert cache.ids == ["q1", "q2"] and len(list(cache.token_lists())) == 2
    assert fs.exists("/out/tok/resolved_config.yaml")


def test_require_tokenizer(reference):
    import dataclasses

    from embedctl.config import load_config
    from embedctl.models.tokenization import TextTokenizer

    cache = open_token_cache(str(reference), "documents")
    model_cfg = load_config(None).cfg.model  # the CLI's settings: minilm's own lengths (256)
    tok = TextTokenizer(model_cfg)
    cache.require_tokenizer(tok)
    with pytest.raises(EmbedctlError, match="doc_max_length"):
        cache.require_tokenizer(TextTokenizer(dataclasses.replace(model_cfg, doc_max_length=64)))


def test_parquet_and_zst_inputs_give_the_same_ids(beir, reference, tmp_path):
    import pyarrow as pa
    import zstandard

    rows = [json.loads(x) for x in (beir / "queries.jsonl").read_text().splitlines()]
    pq.write_table(pa.table({"id": [r["_id"] for r in rows], "text": [r["text"] for r in rows]}), tmp_path / "q.parquet")
    tsv = "".join(f"{r['_id']}\t{r['text']}\n" for r in rows).encode()
    (tmp_path / "q.tsv.zst").write_bytes(zstandard.ZstdCompressor().compress(tsv))
    want = [t.tolist() for t in open_token_cache(str(reference), "queries").token_lists()]
    for name in ("q.parquet", "q.tsv.zst"):
        out = tmp_path / f"t-{name}"
        pretok(tmp_path / name, out, "pretokenize.side=queries")
        cache = open_token_cache(str(out))
        assert cache.ids == [r["_id"] for r in rows]
        assert [t.tolist() for t in cache.token_lists()] == want


def test_shard_defaults_from_launchers(monkeypatch):
    from embedctl.data.pretokenize import shard_defaults

    for k in ("WORLD_SIZE", "RANK", "SLURM_NTASKS", "SLURM_PROCID"):
        monkeypatch.delenv(k, raising=False)
    assert shard_defaults(None, None) == (1, 0)
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_PROCID", "3")
    assert shard_defaults(None, None) == (4, 3)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert shard_defaults(None, None) == (2, 1)  # torchrun wins over SLURM
    assert shard_defaults(8, 5) == (8, 5)  # explicit flags win
    with pytest.raises(EmbedctlError, match="shard_index"):
        shard_defaults(2, 2)
