"""S3 round trip against a local S3-protocol server (moto), as s3fs's own test-suite does: read a
compressed BEIR folder from s3://, write the token cache and the batches to s3://, read them back."""

from __future__ import annotations

import gzip
import hashlib

import pytest
from support.datahelpers import scifact_slice

from embedctl.config import load_config
from embedctl.data.batches import BatchStream, read_batch
from embedctl.data.pretokenize import run_pretokenize
from embedctl.data.token_cache import open_token_cache
from embedctl.errors import InputError
from embedctl.prebatch.build import run_prebatch

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")


@pytest.fixture(scope="module")
def s3(monkeypatch_module):
    import fsspec

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for k, v in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch_module.setenv(k, v)
    monkeypatch_module.setitem(fsspec.config.conf, "s3", {"key": "x", "secret": "x",
                                                          "client_kwargs": {"endpoint_url": endpoint}})
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("embedctl-test")
    yield fs
    fsspec.filesystem("s3").clear_instance_cache()
    server.stop()


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _digest(fs, paths) -> dict[str, str]:
    return {p.rsplit("/", 2)[-2] + "/" + p.rsplit("/", 1)[-1]: hashlib.sha256(fs.cat_file(p)).hexdigest() for p in paths}


def test_round_trip(s3, tmp_path):
    import fsspec

    src = scifact_slice(tmp_path / "scifact", n_queries=6, extra_docs=8)
    s3.put_file(str(src / "queries.jsonl"), "embedctl-test/scifact/queries.jsonl")
    s3.put_file(str(src / "qrels" / "train.tsv"), "embedctl-test/scifact/qrels/train.tsv")
    with s3.open("embedctl-test/scifact/corpus.jsonl.gz", "wb") as fh:
        fh.write(gzip.compress((src / "corpus.jsonl").read_bytes()))
    common = ["pretokenize.rows_per_chunk=5", "model.doc_max_length=40"]
    run_pretokenize(load_config(None, ["pretokenize.input=s3://embedctl-test/scifact",
                                       "pretokenize.output=s3://embedctl-test/tokens", *common]))
    run_pretokenize(load_config(None, [f"pretokenize.input={src}", f"pretokenize.output={tmp_path / 'local'}", *common]))
    remote = open_token_cache("s3://embedctl-test/tokens", "documents")
    local = open_token_cache(str(tmp_path / "local"), "documents")
    assert remote.ids == local.ids and remote.fingerprint["input"]["etag"]
    assert [t.tolist() for t in remote.token_lists()] == [t.tolist() for t in local.token_lists()]
    s3.invalidate_cache()
    remote_chunks = _digest(s3, sorted(s3.find("embedctl-test/tokens/documents/chunks")))
    local_fs = fsspec.filesystem("file")
    assert remote_chunks == _digest(local_fs, sorted(str(p) for p in (tmp_path / "local" / "documents" / "chunks").iterdir()))
    assert s3.exists("embedctl-test/tokens/resolved_config.yaml")

    run_prebatch(load_config(None, ["prebatch.input=s3://embedctl-test/tokens",
                                    "prebatch.qrels=s3://embedctl-test/scifact/qrels/train.tsv",
                                    "prebatch.output=s3://embedctl-test/batches", "prebatch.queries_per_batch=4"]))
    stream = BatchStream("s3://embedctl-test/batches", shuffle=False, prefetch=1)
    first = next(iter(stream))
    assert first.num_queries == 4 and (first.relevance > 0).any(axis=1).all()
    again = read_batch("s3://embedctl-test/batches/batch_00000001")
    assert again.num_queries == 2


def test_unreadable_s3_url(s3):
    with pytest.raises(InputError, match="no such file"):
        run_pretokenize(load_config(None, ["pretokenize.input=s3://embedctl-test/missing.jsonl",
                                           "pretokenize.output=s3://embedctl-test/out"]))
    assert not s3.exists("embedctl-test/out/documents/ledger.json")


