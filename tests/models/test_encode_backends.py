"""Encode backends (embedctl.models.encode_backends) against the reference, on the bundled model: bi-encoder
and ColBERT, queries and documents, per-vector cosine >= 0.999 for every backend `auto` may choose; what
`auto` picks for many texts and for few; the ONNX graph cached once per model identity; the backend
recorded in the index, refused on a resume with another one (kept when the resume asks for `auto`);
search encodes queries as the index's documents were unless told otherwise."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from embedctl.config.sections.model import ModelConfig
from embedctl.errors import ConfigError, EmbedctlError
from embedctl.index.ledger import BackendMismatch, BuildLedger
from embedctl.models import encode_backends, onnx_graph
from embedctl.models.encoder import load_encoder

pytest.importorskip("onnxruntime")

COSINE_BOUND = 0.999
NATIVE_BF16 = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
AMX = torch.cpu._is_amx_tile_supported()
TEXTS = [
    "Vitamin C deficiency causes scurvy, a disease of collagen synthesis.",
    "0-dimensional biomaterials show inductive properties.",
    "A short one.",
    "Microstructural development of human newborn cerebral white matter assessed in vivo by diffusion tensor "
    "magnetic resonance imaging. Alterations of architecture of cerebral white matter in the developing human "
    "brain can affect cortical development and result in functional disabilities; a line scan diffusion-weighted "
    "MRI sequence with diffusion tensor analysis was applied to measure the apparent diffusion coefficient.",
    "What causes the aurora borealis?",
]


@pytest.fixture(scope="module", autouse=True)
def graph_cache(module_tmp):
    old = os.environ.get("EMBEDCTL_CACHE_DIR")
    os.environ["EMBEDCTL_CACHE_DIR"] = str(module_tmp("cache"))
    yield
    if old is None:
        os.environ.pop("EMBEDCTL_CACHE_DIR", None)
    else:
        os.environ["EMBEDCTL_CACHE_DIR"] = old


@pytest.fixture
def onnx_bulk(monkeypatch):
    """``auto``'s bulk choice is ONNX, as on a CPU without native bfloat16 (where ``bf16`` can run, auto
    prefers it): the tests of auto's ONNX choices hold on every host."""
    monkeypatch.setattr(encode_backends, "AUTO", {"bulk": ("onnx",), "few": ("reference",)})


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    keep = np.linalg.norm(a, axis=1) > 0
    return (a[keep] * b[keep]).sum(1) / np.linalg.norm(a[keep], axis=1) / np.linalg.norm(b[keep], axis=1)


@pytest.mark.parametrize("kind", ["colbert", "biencoder"])
def test_onnx_matches_the_reference(kind):
    ref = load_encoder(ModelConfig(kind=kind, encoder_backend="reference"), device="cpu")
    fast = load_encoder(ModelConfig(kind=kind, encoder_backend="onnx"), device="cpu")
    assert ref.backend_name == "reference" and fast.backend_name == "onnx"
    assert fast.model_cfg.encoder_backend == "onnx"
    q_ref, q_fast = ref.encode_queries(TEXTS), fast.encode_queries(TEXTS)
    assert q_ref.shape == q_fast.shape
    assert np.array_equal(np.abs(q_ref).sum(-1) > 0, np.abs(q_fast).sum(-1) > 0)  # same vectors kept
    assert _cosines(q_ref, q_fast).min() >= COSINE_BOUND
    d_ref, d_fast = ref.encode_documents(TEXTS, batch_size=2), fast.encode_documents(TEXTS, batch_size=2)
    if kind == "colbert":
        assert np.array_equal(d_ref[1], d_fast[1])  # same doclens
        d_ref, d_fast = d_ref[0], d_fast[0]
    assert d_ref.shape == d_fast.shape and _cosines(d_ref, d_fast).min() >= COSINE_BOUND


def test_int8_runs_says_why_it_is_off_by_default_and_auto_never_picks_it(capsys, onnx_bulk):
    assert encode_backends.resolve_backend("auto") == "reference"
    assert encode_backends.resolve_backend("auto", texts=encode_backends.LONG_LIVED) == "onnx"
    enc = load_encoder(ModelConfig(kind="colbert", encoder_backend="onnx-int8"), device="cpu")
    assert enc.backend_name == "onnx-int8"
    assert "off by default" in capsys.readouterr().err
    ref = load_encoder(ModelConfig(kind="colbert"), device="cpu")
    assert ref.backend_name == "reference"
    cos = _cosines(ref.encode_queries(TEXTS), enc.encode_queries(TEXTS))
    assert cos.mean() > 0.9  # close, but not within the bound: why it is off by default
    assert "onnx-int8" in encode_backends.OFF_BY_DEFAULT


def test_auto_picks_onnx_for_many_texts_and_the_reference_for_few(monkeypatch, onnx_bulk):
    many = encode_backends.AUTO_MIN_TEXTS
    assert encode_backends.resolve_backend("auto", texts=many - 1) == "reference"
    assert encode_backends.resolve_backend("auto", texts=many) == "onnx"
    assert encode_backends.resolve_backend("reference", texts=many) == "reference"
    bulk = load_encoder(ModelConfig(kind="colbert"), device="cpu", texts=many)
    assert (bulk.backend_name, bulk.backend_asked, bulk.model_cfg.encoder_backend) == ("onnx", "auto", "onnx")
    few = load_encoder(ModelConfig(kind="colbert"), device="cpu")
    assert (few.backend_name, few.backend_asked, few.model_cfg.encoder_backend) == ("reference", "auto", "reference")
    # where onnx cannot run (a GPU, no onnxruntime...), auto is the reference, without an error
    monkeypatch.setattr(encode_backends, "unavailable_reason", lambda name, encoder: "not on this machine")
    assert load_encoder(ModelConfig(kind="colbert"), device="cpu", texts=many).backend_name == "reference"
    with pytest.raises(ConfigError):
        load_encoder(ModelConfig(kind="colbert", encoder_backend="onnx"), device="cpu")


def test_a_resumed_build_asked_for_auto_keeps_the_backend_it_started_with(tmp_path, onnx_bulk):
    bulk = load_encoder(ModelConfig(kind="colbert"), device="cpu", texts=encode_backends.AUTO_MIN_TEXTS)
    assert bulk.backend_name == "onnx"
    ledger = BuildLedger(request={}, folder=tmp_path)
    ledger.keep_encode_backend(bulk)  # a fresh build: nothing recorded, nothing changed
    assert bulk.backend_name == "onnx"
    ledger.use_backend({"name": "native", "precision": "int16", "encoder": "reference"})  # started before
    ledger.keep_encode_backend(bulk)
    assert bulk.backend_name == "reference" and bulk._runner is None
    ledger.use_backend({"name": "native", "precision": "int16", "encoder": bulk.backend_name})  # not refused
    old = BuildLedger(request={}, backend={"name": "native", "precision": "int16"}, folder=tmp_path / "old")
    again = load_encoder(ModelConfig(kind="colbert"), device="cpu", texts=encode_backends.AUTO_MIN_TEXTS)
    old.keep_encode_backend(again)  # a ledger from before the encode backend: the reference
    assert again.backend_name == "reference"
    asked = load_encoder(ModelConfig(kind="colbert", encoder_backend="onnx"), device="cpu")
    ledger.keep_encode_backend(asked)  # asked for by name: kept (use_backend refuses the resume, naming the key)
    assert asked.backend_name == "onnx"


def test_graph_is_exported_once_per_model_and_again_after_training():
    enc = load_encoder(ModelConfig(kind="colbert", encoder_backend="onnx"), device="cpu")
    path = enc._runner.path
    assert path.parent == onnx_graph.cache_dir() and path.suffix == ".onnx"
    stamp = path.stat().st_mtime_ns
    again = load_encoder(ModelConfig(kind="colbert", encoder_backend="onnx"), device="cpu")
    assert again._runner.path == path and path.stat().st_mtime_ns == stamp  # cached, not re-exported
    assert not list(path.parent.glob(".*.tmp"))
    before = enc.encode_queries(TEXTS[:1])
    with torch.no_grad():  # an optimizer step: in-place update of a weight
        enc.linear.weight.mul_(-1.0)
    after = enc.encode_queries(TEXTS[:1])
    assert enc._runner.path != path  # another identity, another graph
    assert _cosines(before, -after).min() >= COSINE_BOUND


def test_unknown_and_unrunnable_backends_name_the_key():
    with pytest.raises(ConfigError) as bad:
        encode_backends.resolve_backend("fast")
    assert "model.encoder_backend" in str(bad.value)
    with pytest.raises(EmbedctlError) as refused:  # the transformers forward is not exported
        load_encoder(ModelConfig(kind="colbert", native_bert=False, encoder_backend="onnx"), device="cpu")
    assert "model.encoder_backend" in str(refused.value) and "native" in str(refused.value)


def test_config_rejects_an_unknown_backend(cli):
    res = cli("config", "show", "model.encoder_backend=fast")
    assert res.exit_code == 2 and "model.encoder_backend" in res.output


def test_resume_with_another_encode_backend_is_refused(tmp_path):
    ledger = BuildLedger(request={}, folder=tmp_path)
    ledger.use_backend({"name": "native", "precision": "int16", "encoder": "reference"})
    with pytest.raises(BackendMismatch) as refused:
        ledger.use_backend({"name": "native", "precision": "int16", "encoder": "onnx"})
    text = f"{refused.value} {refused.value.hint}"
    assert "encoder reference" in text and "encoder onnx" in text and "model.encoder_backend=reference" in text
    ledger.use_backend({"name": "native", "precision": "int16", "encoder": "onnx"}, overwrite=True)
    old = BuildLedger(request={}, backend={"name": "native", "precision": "int16"}, folder=tmp_path)
    old.use_backend({"name": "native", "precision": "int16", "encoder": "reference"})  # a ledger from before



class _Named:
    """What with_encoder reads of an encoder: its backend's name."""

    def __init__(self, backend_name: str):
        self.backend_name = backend_name


@pytest.mark.parametrize("amx", [False, True])
def test_the_bf16_encoder_on_amx_records_its_threads_and_a_resume_on_others_is_refused(tmp_path, monkeypatch, amx):
    """oneDNN's AMX products split their sums by thread count (measured on a 16-core AMX Xeon, stop 49): there a
    bf16 build records torch's thread count, and a resume or a rank on another count is refused, naming
    index.threads; elsewhere (and for every other encode backend) nothing is recorded."""
    from embedctl.index.kinds.base import with_encoder

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        record = with_encoder({"name": "native", "precision": "bf16"}, _Named("bf16"))
        assert record.get("encoder_threads") == (2 if amx else None)
        assert "encoder_threads" not in with_encoder({"name": "native", "precision": "bf16"}, _Named("onnx"))
        ledger = BuildLedger(request={}, folder=tmp_path)
        ledger.use_backend(record)
        torch.set_num_threads(1)
        again = with_encoder({"name": "native", "precision": "bf16"}, _Named("bf16"))
        if not amx:
            ledger.use_backend(again)  # the same record: resumed
            return
        with pytest.raises(BackendMismatch) as refused:
            ledger.use_backend(again)
        text = f"{refused.value} {refused.value.hint}"
        assert "encoder bf16 on 2 threads" in text and "encoder bf16 on 1 thread)" in text
        assert "index.threads=2" in text and "--overwrite" in text
        old = BuildLedger(request={}, backend={"name": "native", "precision": "bf16", "encoder": "bf16"},
                          folder=tmp_path)
        old.use_backend(again)  # a ledger from before the count was recorded: resumed, the count recorded now
        assert old.backend["encoder_threads"] == 1
    finally:
        torch.set_num_threads(before)

@pytest.mark.slow
def test_index_records_the_backend_and_search_follows_it(tmp_path, cli, monkeypatch, onnx_bulk):
    docs = tmp_path / "corpus.jsonl"
    docs.write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(encode_backends, "AUTO_MIN_TEXTS", len(TEXTS))  # this build counts as a bulk one
    res = cli("index", "--collection", str(docs), "model.kind=colbert",  # model.encoder_backend=auto
              "model.doc_max_length=64", "index.num_partitions=4")
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "indexes" / "corpus" / "embedctl_index.json").read_text())
    assert meta["backend"]["encoder"] == "onnx" and "encoder_backend" not in meta["model"]["config"]
    res = cli("search", "what causes scurvy", "-k", "2", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["backend"]["encoder"] == {"index": "onnx", "search": "onnx"} and "note" not in out["backend"]
    assert set(out["timings_ms"]) == {"encode", "retrieve"} and out["hits"][0]["id"] == "d0"
    res = cli("search", "what causes scurvy", "-k", "2", "--json", "model.encoder_backend=reference")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["backend"]["encoder"] == {"index": "onnx", "search": "reference"}
    assert "model.encoder_backend" in out["backend"]["note"] and out["hits"][0]["id"] == "d0"
    # auto set for a search: the fast path for a queries file of AUTO_MIN_TEXTS queries, the reference for one
    from embedctl.api import Index

    queries = tmp_path / "queries.tsv"
    queries.write_text("".join(f"q{i}\t{t}\n" for i, t in enumerate(TEXTS)))
    many = Index.open(overrides=["model.encoder_backend=auto"])
    assert [qid for qid, _ in many.rank_file(queries, 2)] == [f"q{i}" for i in range(len(TEXTS))]
    assert many.session.encoder.backend_name == "onnx"
    one = Index.open(overrides=["model.encoder_backend=auto"])
    assert one.search("what causes scurvy", 2)[0].id == "d0" and one.session.encoder.backend_name == "reference"
    # the index's backend cannot run here (e.g. a GPU machine): the reference, with a warning
    monkeypatch.setattr(encode_backends, "unavailable_reason", lambda name, encoder: "not on this machine")
    res = cli("search", "what causes scurvy", "-k", "2", "--json")
    assert res.exit_code == 0, res.output
    assert "not on this machine" in res.stderr and "reference instead" in res.stderr
    assert json.loads(res.stdout)["backend"]["encoder"] == {"index": "onnx", "search": "reference"}


@pytest.mark.parametrize("kind", ["colbert", "biencoder"])
def test_length_bucketed_index_encoding_returns_input_order(kind):
    from embedctl.index.encoding import encode_with_progress
    from embedctl.util.progress import Progress

    enc = load_encoder(ModelConfig(kind=kind, doc_max_length=48), device="cpu")
    texts = [t[: (i * 53) % len(t) + 3] for i, t in enumerate(TEXTS * 3)]  # lengths out of order
    one = enc.encode_documents(texts, batch_size=4)
    with Progress(len(texts), "encoding", enabled=False) as bar:
        bucketed = encode_with_progress(enc, texts, 4, bar)
    per_doc = [enc.encode_documents([t]) for t in texts]
    if kind == "colbert":
        assert np.array_equal(one[1], bucketed[1]) and np.array_equal(one[0], bucketed[0])
        alone = np.concatenate([p[0] for p in per_doc])
        assert np.array_equal(bucketed[1], [p[1][0] for p in per_doc])
        assert _cosines(alone, bucketed[0]).min() >= 0.99999
    else:
        assert np.array_equal(one, bucketed)
        assert _cosines(np.concatenate(per_doc), bucketed).min() >= 0.99999


def test_a_training_encoder_stays_in_training_mode_and_helpers_keep_the_backend():
    from embedctl.prebatch.helper_models import helper_model_config

    enc = load_encoder(ModelConfig(kind="colbert", encoder_backend="onnx"), device="cpu", train=True)
    assert enc.backend_name == "onnx" and all(m.training for m in enc.modules())
    enc.encode_queries(TEXTS[:1])  # inference in eval mode, then back to training
    assert all(m.training for m in enc.modules())
    cfg = ModelConfig(kind="colbert", encoder_backend="onnx")
    assert helper_model_config(cfg, "minilm").encoder_backend == "onnx"
    assert helper_model_config(cfg, "/elsewhere").encoder_backend == "onnx"


@pytest.mark.skipif(not NATIVE_BF16, reason="this CPU has no native bfloat16 (AVX512_BF16 or AMX)")
@pytest.mark.parametrize("kind", ["colbert", "biencoder"])
def test_bf16_matches_the_reference_and_auto_prefers_it_for_many_texts(kind):
    ref = load_encoder(ModelConfig(kind=kind, encoder_backend="reference"), device="cpu")
    fast = load_encoder(ModelConfig(kind=kind, encoder_backend="bf16"), device="cpu")
    assert fast.backend_name == "bf16" and fast.model_cfg.encoder_backend == "bf16"
    q_ref, q_fast = ref.encode_queries(TEXTS), fast.encode_queries(TEXTS)
    assert q_fast.dtype == q_ref.dtype and q_ref.shape == q_fast.shape
    assert np.array_equal(np.abs(q_ref).sum(-1) > 0, np.abs(q_fast).sum(-1) > 0)
    assert _cosines(q_ref, q_fast).min() >= COSINE_BOUND
    d_ref, d_fast = ref.encode_documents(TEXTS, batch_size=2), fast.encode_documents(TEXTS, batch_size=2)
    if kind == "colbert":
        assert np.array_equal(d_ref[1], d_fast[1])
        d_ref, d_fast = d_ref[0], d_fast[0]
    assert _cosines(d_ref, d_fast).min() >= COSINE_BOUND
    assert encode_backends.resolve_backend("auto", texts=encode_backends.AUTO_MIN_TEXTS, encoder=ref) == "bf16"
    assert encode_backends.resolve_backend("auto", texts=1, encoder=ref) == "reference"


@pytest.mark.skipif(not NATIVE_BF16, reason="this CPU has no native bfloat16 (AVX512_BF16 or AMX)")
@pytest.mark.parametrize("kind", ["colbert", "biencoder"])
def test_bf16_runs_a_large_batch_in_slices_with_the_same_vectors(kind, monkeypatch):
    """A batch of more token rows than ``slice_tokens`` runs as slices of whole sequences: the vectors of one
    forward over the batch up to the products' rounding (oneDNN may block a product of few rows otherwise)."""
    fast = load_encoder(ModelConfig(kind=kind, encoder_backend="bf16"), device="cpu")
    texts = TEXTS * 4
    whole = fast.encode_documents(texts, batch_size=len(texts))
    calls = []
    real = encode_backends.Bf16Stack.__call__
    monkeypatch.setattr(encode_backends.Bf16Stack, "__call__", lambda self, ids, mask: calls.append(ids.shape[0])
                        or real(self, ids, mask))
    monkeypatch.setattr(type(fast._runner), "slice_tokens", 3 * 64)  # 3 sequences of the batch's <= 64 tokens
    sliced = fast.encode_documents(texts, batch_size=len(texts))
    width = fast.tokenizer.pad(fast.tokenizer.encode(texts, "document"), "document")[0].shape[1]
    assert calls and max(calls) == max(1, 3 * 64 // width) and sum(calls) == len(texts)
    if kind == "colbert":
        assert np.array_equal(whole[1], sliced[1])
        whole, sliced = whole[0], sliced[0]
    assert _cosines(np.asarray(whole), np.asarray(sliced)).min() >= 0.9999


@pytest.mark.skipif(not NATIVE_BF16, reason="this CPU has no native bfloat16 (AVX512_BF16 or AMX)")
@pytest.mark.parametrize("kind", ["colbert", "biencoder"])
def test_bf16_pre_cast_weights_give_autocast_bits_and_follow_weight_updates(kind):
    """The runner's bfloat16 copy of the Linear weights computes exactly what autocast over the fp32 module
    computes (bit for bit; on AMX tiles within one bfloat16 rounding), and is made again after an optimizer-style in-place update of a weight. Its attention on SDPA
    and its GELU after the rounded product, as autocast's: the attention kernel and the fused GELU (each
    within a bfloat16 rounding) are tested on their own."""
    from embedctl.models.native_bert import FusedQKVAttention

    enc = load_encoder(ModelConfig(kind=kind, encoder_backend="bf16"), device="cpu")
    runner = enc._runner

    def sdpa_runner(ids, mask):
        for module in runner._backbone().modules():  # the twin as made now (again after a weight update)
            if isinstance(module, FusedQKVAttention):
                module.attention_kernel = False
            if isinstance(module, encode_backends.PackedBf16GeluLinear):
                module.fused = False
        return runner(ids, mask)

    ids = torch.randint(1000, 20000, (3, 24))
    mask = torch.ones_like(ids)
    mask[1, 17:] = 0

    def autocast_original():
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = enc.backbone(input_ids=ids, attention_mask=mask).last_hidden_state
        return enc._head(hidden.float(), mask)

    def assert_autocast_bits(got, want):
        if not AMX:
            assert torch.equal(got, want)
            return
        # on AMX tiles oneDNN's packed kernel sums a K = 1536 product (the feed-forward's output) in another order
        # than autocast's matmul: one bfloat16 rounding apart there (measured: cosine >= 0.99998, max 1.1e-3)
        cos = torch.nn.functional.cosine_similarity(got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1]),
                                                    dim=-1)
        assert cos.min() >= 0.9999 and (got - want).abs().max() <= 4e-3

    with torch.inference_mode():
        assert_autocast_bits(sdpa_runner(ids, mask), autocast_original())
    shared = {id(p) for p in enc.backbone.parameters()} & {id(p) for p in runner._backbone().parameters()}
    assert shared and all(p.dtype == torch.float32 for p in enc.backbone.parameters())  # embeddings shared
    with torch.no_grad():  # what an optimizer step does
        next(m for m in enc.backbone.modules() if isinstance(m, torch.nn.Linear)).weight.mul_(1.5)
    with torch.inference_mode():
        assert_autocast_bits(sdpa_runner(ids, mask), autocast_original())


def test_bf16_where_it_cannot_run_names_the_key_and_auto_falls_back_to_onnx(monkeypatch):
    monkeypatch.setattr(encode_backends, "_bf16_unavailable", lambda encoder: "no native bfloat16 here")
    with pytest.raises(ConfigError, match="model.encoder_backend"):
        load_encoder(ModelConfig(kind="colbert", encoder_backend="bf16"), device="cpu")
    bulk = load_encoder(ModelConfig(kind="colbert"), device="cpu", texts=encode_backends.AUTO_MIN_TEXTS)
    assert bulk.backend_name == "onnx"


@pytest.mark.skipif(not NATIVE_BF16, reason="this CPU has no native bfloat16 (AVX512_BF16 or AMX)")
def test_training_evaluation_of_a_large_set_runs_on_bf16_and_leaves_training_on_torch(monkeypatch):
    from embedctl.train.evaluation import EvalSet, evaluate

    enc = load_encoder(ModelConfig(kind="colbert"), device="cpu", train=True)  # auto: the reference
    assert enc.backend_name == "reference"
    seen = []
    real = encode_backends.Bf16Runner.__call__
    monkeypatch.setattr(encode_backends.Bf16Runner, "__call__", lambda self, i, m: seen.append(1) or real(self, i, m))
    data = EvalSet(["q0", "q1"], TEXTS[:2], [f"d{i}" for i in range(len(TEXTS))], TEXTS, {"q0": {"d0": 1}, "q1": {"d1": 1}})
    small = evaluate(enc, data, batch_size=4)
    assert not seen  # fewer than AUTO_MIN_TEXTS texts: the reference, as before
    monkeypatch.setattr(encode_backends, "AUTO_MIN_TEXTS", 2)
    large = evaluate(enc, data, batch_size=4)
    assert seen and enc.backend_name == "reference" and enc._runner is None and enc.training
    assert abs(large["eval/nDCG@10"] - small["eval/nDCG@10"]) < 0.2


@pytest.mark.parametrize("padded", [False, True])
def test_fused_qkv_attention_equals_the_three_projections(padded):
    """native_bert.fuse_qkv (the bf16 twin's attention) against the trained module it was made from, in fp32."""
    import copy

    from embedctl.models.native_bert import FusedQKVAttention, fuse_qkv

    enc = load_encoder(ModelConfig(kind="biencoder", encoder_backend="reference"), device="cpu")
    ids = torch.randint(1000, 20000, (2, 20))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, 13:] = 0
    twin = copy.deepcopy(enc.backbone)
    fuse_qkv(twin)
    assert sum(isinstance(m, FusedQKVAttention) for m in twin.modules()) == enc.backbone.config.num_hidden_layers
    with torch.inference_mode():
        want = enc.backbone(input_ids=ids, attention_mask=mask).last_hidden_state
        got = twin(input_ids=ids, attention_mask=mask).last_hidden_state
    keep = mask.bool()
    torch.testing.assert_close(got[keep], want[keep], rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not encode_backends.PackedBf16Linear.available(), reason="this torch build cannot pack bf16 weights")
@pytest.mark.parametrize("shape", [(1, 384), (32, 384), (2, 32, 384), (3, 181, 384)])
def test_packed_bf16_linear_gives_the_bits_of_a_bf16_linear(shape):
    """encode_backends.PackedBf16Linear (oneDNN's prepacked weight) against F.linear in bfloat16, fp32 input
    cast as autocast casts it; the bf16 runner's twin uses it for every Linear."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(384, 1152)
    packed = encode_backends.PackedBf16Linear(linear)
    x = torch.randn(*shape)
    with torch.inference_mode():
        want = torch.nn.functional.linear(x.bfloat16(), linear.weight.bfloat16(), linear.bias.bfloat16())
        assert torch.equal(packed(x), want) and packed(x).dtype == torch.bfloat16
    if NATIVE_BF16:
        enc = load_encoder(ModelConfig(kind="colbert", encoder_backend="bf16"), device="cpu")
        twin = enc._runner._backbone()
        assert not any(isinstance(m, torch.nn.Linear) for m in twin.modules())
        linears = sum(isinstance(m, torch.nn.Linear) for m in enc.backbone.modules())
        layers = enc.backbone.config.num_hidden_layers  # query, key and value fused: two fewer a layer
        assert sum(isinstance(m, encode_backends.PackedBf16Linear) for m in twin.modules()) == linears - 2 * layers


@pytest.mark.skipif(not encode_backends.PackedBf16GeluLinear.available(),
                    reason="this torch build's oneDNN linear takes no GELU post-op")
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", [(1, 32, 384), (3, 181, 384)])
def test_packed_bf16_gelu_linear_is_the_product_then_gelu_within_a_rounding(shape, approximate):
    """The fused product + GELU against the packed product rounded to bfloat16, then GELU: within one
    bfloat16 rounding of the result (the fused one applies GELU to the float32 sums)."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(384, 1536)
    fused = encode_backends.PackedBf16GeluLinear(encode_backends.PackedBf16Linear(linear), approximate)
    x = torch.randn(*shape)
    with torch.inference_mode():
        got = fused(x)
        fused.fused = False
        separate = fused(x)
        exact = torch.nn.functional.gelu(x.bfloat16().float() @ linear.weight.bfloat16().float().t()
                                         + linear.bias.bfloat16().float(), approximate=approximate)
    assert got.dtype == torch.bfloat16 and got.shape == separate.shape
    scale = exact.abs().max()
    assert (got.float() - exact).abs().max() <= 2.0 ** -7 * scale
    assert (got.float() - separate.float()).abs().max() <= 2.0 ** -6 * scale


@pytest.mark.skipif(not NATIVE_BF16, reason="this CPU has no native bfloat16 (AVX512_BF16 or AMX)")
def test_the_bf16_twin_fuses_each_feed_forward_gelu():
    if not encode_backends.PackedBf16GeluLinear.available():
        pytest.skip("this torch build's oneDNN linear takes no GELU post-op")
    enc = load_encoder(ModelConfig(kind="colbert", encoder_backend="bf16"), device="cpu")
    fused = [m for m in enc._runner._backbone().modules() if isinstance(m, encode_backends.PackedBf16GeluLinear)]
    assert len(fused) == enc.backbone.config.num_hidden_layers and all(m.fused for m in fused)


@pytest.mark.skipif(not NATIVE_BF16, reason="this CPU has no native bfloat16 (AVX512_BF16 or AMX)")
def test_the_bf16_stack_gives_the_twins_bits_without_its_module_calls():
    """Bf16Stack: the twin's output under autocast bit for bit with torch's LayerNorms (queries, padded documents,
    and a sequence with no key to attend to, where the kernel declines and SDPA runs for that layer), and within
    cosine 0.9999 per token on the one-pass LayerNorm kernel (the default); None where it does not apply: the
    attention kernel or a fused GELU switched off, training mode, more than 512 tokens, enabled False, gradients
    on."""
    from embedctl.models import bf16_attention
    from embedctl.models.native_bert import FusedQKVAttention

    enc = load_encoder(ModelConfig(kind="colbert", encoder_backend="bf16"), device="cpu")
    runner = enc._runner
    twin, stack = runner._backbone(), runner._stack
    with torch.inference_mode():
        if not stack.applies(torch.zeros(1, 8, dtype=torch.long)):
            pytest.skip("the attention kernel or the fused GELU does not run here")

    def modules(ids, mask):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return twin(input_ids=ids, attention_mask=mask).last_hidden_state

    with torch.inference_mode():
        q_ids, q_mask = enc.tokenizer.pad(enc.tokenizer.encode(TEXTS, "query"), "query")
        d_ids, d_mask = enc.tokenizer.pad(enc.tokenizer.encode(TEXTS, "document"), "document")
        assert not bool(d_mask.all())
        no_key = d_mask.clone()
        no_key[2] = 0
        heads = twin.encoder.layer[0].attention.self.heads
        probe = torch.zeros(*d_ids.shape, twin.encoder.layer[0].attention.self.qkv.out_features, dtype=torch.bfloat16)
        assert bf16_attention.attend(probe, heads, bf16_attention.key_bytes(no_key[:, None, None, :].bool(),
                                                                             *d_ids.shape)) is None
        fused = {}
        for ids, mask in ((q_ids, q_mask), (d_ids, d_mask), (d_ids, no_key)):
            fused[id(mask)] = stack(ids, mask)
        stack.norm_kernel = False
        for ids, mask in ((q_ids, q_mask), (d_ids, d_mask), (d_ids, no_key)):
            got = stack(ids, mask)
            assert got is not None and got.dtype == torch.float32
            want = modules(ids, mask)
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
            kept = mask.bool() & ~torch.isnan(want).any(-1)
            assert F.cosine_similarity(fused[id(mask)][kept], want[kept], dim=-1).min() >= 0.9999
        assert torch.equal(runner(q_ids, q_mask), enc._head(modules(q_ids, q_mask).float(), q_mask))
        stack.norm_kernel = True
        assert stack(torch.randint(1000, 2000, (1, bf16_attention.MAX_LEN + 1)), None) is None
        layer = twin.encoder.layer[3]
        for module, flag in ((layer.attention.self, "attention_kernel"), (layer.intermediate, "fused")):
            assert isinstance(module, (FusedQKVAttention, encode_backends.PackedBf16GeluLinear))
            setattr(module, flag, False)
            assert stack(q_ids, q_mask) is None
            setattr(module, flag, True)
        twin.train()
        assert stack(q_ids, q_mask) is None
        twin.eval()
        stack.enabled = False
        assert stack(q_ids, q_mask) is None
        stack.enabled = True
        assert stack(q_ids, q_mask) is not None
    assert stack(q_ids, q_mask) is None  # gradients on: the modules (their attention then keeps SDPA)
