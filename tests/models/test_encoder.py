"""Encoder with the real MiniLM weights: pooling, ColBERT head and masks, MaxSim, dropout, errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from embedctl.config.sections.model import ModelConfig
from embedctl.errors import EmbedctlError
from embedctl.models import colbert as colbert_module
from embedctl.models.encoder import colbert_scores, load_encoder, resolve_device
from embedctl.models.hub import resolve_model_path
from embedctl.models.pooling import pool

DOCS = ["Hello, world!", "A cell is the smallest unit of life; it divides.", "Statins lower cholesterol.", "x"]
QUERIES = ["what is a cell?", "do statins reduce heart disease risk in older adults"]


@pytest.fixture(scope="module")
def bi():
    return load_encoder(ModelConfig(kind="biencoder"))


@pytest.fixture(scope="module")
def col():
    return load_encoder(ModelConfig(kind="colbert", doc_max_length=64))


def test_biencoder_matches_sentence_transformers(bi):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(resolve_model_path("minilm"), device="cpu")
    ref = st.encode(DOCS + QUERIES, convert_to_numpy=True)
    ours = bi.encode_documents(DOCS + QUERIES)
    assert ours.shape == (6, 384) and ours.dtype == np.float32
    cos = (ours * ref).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.9999
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_encode_order_batching_and_token_ids_agree(bi, col):
    one_by_one = np.stack([bi.encode_documents([d])[0] for d in DOCS])
    np.testing.assert_allclose(bi.encode_documents(DOCS, batch_size=3), one_by_one, atol=1e-5)
    ids = bi.tokenizer.encode_documents(DOCS)
    np.testing.assert_allclose(bi.encode_documents([np.array(x, dtype=np.uint16) for x in ids]), one_by_one, atol=1e-5)
    vecs, lens = col.encode_documents(DOCS, batch_size=2)
    singles = [col.encode_documents([d]) for d in DOCS]
    assert lens.tolist() == [int(s[1][0]) for s in singles]
    np.testing.assert_allclose(vecs, np.concatenate([s[0] for s in singles]), atol=1e-5)


def test_queries_of_mixed_lengths_are_cut_into_batches_of_similar_lengths(bi):
    """Encoder._batches with QUERY_SPLIT: a long query and short ones in one call are encoded in two padded
    batches (less padding), and each vector equals the query encoded alone."""
    from embedctl.models.encoder import QUERY_SPLIT

    queries = [" ".join(["protein folding and the misfolded chaperone pathways of the cell"] * 3)] + \
              [f"short query {i}" for i in range(40)]
    ids = bi._ids(queries, "query")
    batches = [list(p) for p, _ in bi._batches(ids, 64, QUERY_SPLIT)]
    assert batches[0] == [0] + list(range(1, len(batches[0]))) and len(batches) >= 2 and sum(map(len, batches)) == 41
    assert [len(p) for p, _ in bi._batches(ids, 64)] == [41]  # documents: batch_size alone
    together = bi.encode_queries(queries, batch_size=64)
    alone = np.stack([bi.encode_queries([q])[0] for q in queries])
    np.testing.assert_allclose(together, alone, atol=1e-5)


@pytest.mark.parametrize("mode", ["cls", "mean", "last"])
def test_pooling_is_padding_side_independent(mode):
    torch.manual_seed(0)
    lengths, width, hidden = [3, 5, 1], 6, 4
    states = [torch.randn(n, hidden) for n in lengths]
    right, left = torch.zeros(3, width, hidden), torch.zeros(3, width, hidden)
    right_mask, left_mask = torch.zeros(3, width, dtype=torch.long), torch.zeros(3, width, dtype=torch.long)
    for i, s in enumerate(states):
        right[i, : len(s)], right_mask[i, : len(s)] = s, 1
        left[i, width - len(s):], left_mask[i, width - len(s):] = s, 1
    a, b = pool(right, right_mask, mode), pool(left, left_mask, mode)
    torch.testing.assert_close(a, b)
    expected = {"cls": [s[0] for s in states], "last": [s[-1] for s in states], "mean": [s.mean(0) for s in states]}
    torch.testing.assert_close(a, torch.stack(expected[mode]))


def test_colbert_query_shapes_and_norms(col):
    Q = col.encode_queries(QUERIES)
    assert Q.shape == (2, 32, 128) and Q.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(Q, axis=-1), 1.0, atol=1e-5)  # [MASK] positions are kept


def test_colbert_document_masks_padding_and_punctuation(col):
    ids = col.tokenizer.encode_documents(DOCS)
    input_ids, attention = col.tokenizer.pad(ids, "document")
    with torch.inference_mode():
        out = col(input_ids, attention, side="document")
    assert out.embeddings.shape == (4, input_ids.shape[1], 128) and out.mask.dtype == torch.bool
    punct = torch.isin(input_ids, torch.tensor([1010, 999, 1012, 1025]))  # , ! . ;
    assert punct.any()
    torch.testing.assert_close(out.mask, attention.bool() & ~punct)
    norms = out.embeddings.norm(dim=-1)
    torch.testing.assert_close(norms[out.mask], torch.ones(int(out.mask.sum())))
    assert norms[~out.mask].abs().max() == 0
    vecs, lens = col.encode_documents(DOCS[:1])
    assert lens.tolist() == [5] and vecs.shape == (5, 128)  # [CLS] [D] hello world [SEP]


def test_colbert_query_without_augmentation_zeroes_padding():
    enc = load_encoder(ModelConfig(kind="colbert", query_augmentation=False))
    Q = enc.encode_queries(QUERIES)
    n0 = len(enc.tokenizer.encode_queries(QUERIES[:1])[0])
    assert Q.shape == (2, 32, 128)
    assert np.abs(Q[0, n0:]).max() == 0 and np.allclose(np.linalg.norm(Q[0, :n0], axis=-1), 1.0, atol=1e-5)


def _naive_scores(Q, D, mask):
    out = torch.zeros(Q.shape[0], D.shape[0])
    for q in range(Q.shape[0]):
        for n in range(D.shape[0]):
            total = 0.0
            for i in range(Q.shape[1]):
                sims = [float(Q[q, i] @ D[n, j]) for j in range(D.shape[1]) if mask[n, j]]
                total += max(sims) if sims else 0.0
            out[q, n] = total
    return out


@pytest.mark.parametrize("block", [1 << 25, 16])
def test_colbert_scores_match_a_naive_loop(monkeypatch, block):
    monkeypatch.setattr(colbert_module, "_SCORE_BLOCK", block)
    g = torch.Generator().manual_seed(3)
    Q, D = torch.randn(3, 4, 8, generator=g), torch.randn(5, 6, 8, generator=g)
    mask = torch.rand(5, 6, generator=g) > 0.4
    mask[2] = False  # a document with nothing left scores 0
    Q.requires_grad_(True)
    scores = colbert_scores(Q, D, mask)
    torch.testing.assert_close(scores.detach(), _naive_scores(Q.detach(), D, mask), rtol=1e-5, atol=1e-5)
    D.requires_grad_(True)
    scores = colbert_scores(Q, D, mask)
    weights = torch.randn(scores.shape, generator=g)
    (scores * weights).sum().backward()
    # the gradient of the plain formula: per (query, doc, query token) the best unmasked doc token
    Q_ref, D_ref = Q.detach().clone().requires_grad_(True), D.detach().clone().requires_grad_(True)
    total = Q_ref.new_zeros(())
    for q in range(Q.shape[0]):
        for n in range(D.shape[0]):
            if mask[n].any():
                sims = (Q_ref[q] @ D_ref[n].T)[:, mask[n]]  # [Lq, unmasked]
                total = total + weights[q, n] * sims.max(dim=-1).values.sum()
    total.backward()
    torch.testing.assert_close(Q.grad, Q_ref.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(D.grad, D_ref.grad, rtol=1e-5, atol=1e-5)


def test_colbert_scores_on_encoder_output(col):
    Q = torch.from_numpy(col.encode_queries(QUERIES[:1]))
    ids = col.tokenizer.encode_documents(DOCS[1:3])
    with torch.inference_mode():
        out = col(*col.tokenizer.pad(ids, "document"), side="document")
    scores = colbert_scores(Q, out.embeddings, out.mask)
    assert scores.shape == (1, 2) and scores[0, 0] > scores[0, 1]  # the cell document wins for "what is a cell?"


def test_fresh_projection_is_seeded_and_leaves_global_rng_alone(col):
    torch.manual_seed(7)
    expected_next = torch.rand(1)
    torch.manual_seed(7)
    again = load_encoder(ModelConfig(kind="colbert", doc_max_length=64))
    assert torch.equal(again.linear.weight, col.linear.weight)
    assert torch.equal(torch.rand(1), expected_next)
    assert again.linear.bias is None and again.dim == 128 and again.model_cfg.dim == 128


def test_dropout_override():
    def rates(enc):
        return {m.p for m in enc.backbone.modules() if isinstance(m, torch.nn.Dropout)}

    kept = load_encoder(ModelConfig(), train=True)
    assert rates(kept) == {0.1} and kept.training
    off = load_encoder(ModelConfig(dropout=0.0), train=True)
    assert rates(off) == {0.0}
    ids, mask = off.tokenizer.pad(off.tokenizer.encode_documents(DOCS), "document")
    with torch.no_grad():
        torch.testing.assert_close(off(ids, mask, "document").embeddings, off(ids, mask, "document").embeddings)
    high = load_encoder(ModelConfig(dropout=0.3), train=True)
    assert rates(high) == {0.3}
    with torch.no_grad():
        assert not torch.equal(high(ids, mask, "document").embeddings, high(ids, mask, "document").embeddings)
    # encode_* always run in eval mode and give the model back in train mode
    np.testing.assert_allclose(high.encode_documents(DOCS), high.encode_documents(DOCS))
    assert high.training


def test_bad_model_paths_name_the_key(tmp_path):
    with pytest.raises(EmbedctlError, match=r"model\.name_or_path.*no such folder"):
        load_encoder(ModelConfig(name_or_path=str(tmp_path / "nope")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(EmbedctlError, match=r"model\.name_or_path.*no config\.json"):
        load_encoder(ModelConfig(name_or_path=str(tmp_path / "empty")))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    with pytest.raises(EmbedctlError, match=r"model\.name_or_path"):
        load_encoder(ModelConfig(name_or_path=str(broken)))


def test_lengths_beyond_the_model_and_device():
    with pytest.raises(EmbedctlError, match=r"model\.doc_max_length.*512"):
        load_encoder(ModelConfig(doc_max_length=600))
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(EmbedctlError, match=r"model\.device"):
        resolve_device("gpu-please")
    if not torch.cuda.is_available():
        with pytest.raises(EmbedctlError, match=r"model\.device.*no CUDA"):
            resolve_device("cuda")


@pytest.mark.parametrize("kind", ["biencoder", "colbert"])
def test_every_trainable_parameter_gets_a_gradient(kind):
    """DDP needs it: the unused BERT pooler is frozen, everything else is reached by the loss."""
    enc = load_encoder(ModelConfig(kind=kind, dropout=0.0), train=True)
    q = enc(*enc.tokenizer.pad(enc.tokenizer.encode_queries(QUERIES), "query"), side="query")
    d = enc(*enc.tokenizer.pad(enc.tokenizer.encode_documents(DOCS), "document"), side="document")
    scores = q.embeddings @ d.embeddings.T if kind == "biencoder" else colbert_scores(q.embeddings, d.embeddings, d.mask)
    torch.nn.functional.cross_entropy(scores / 0.05, torch.tensor([1, 2])).backward()
    trainable = [n for n, p in enc.named_parameters() if p.requires_grad]
    assert trainable and all(not n.startswith("backbone.pooler") for n in trainable)
    assert [n for n, p in enc.named_parameters() if p.requires_grad and p.grad is None] == []


def test_matryoshka_truncate():
    from embedctl.models.pooling import matryoshka_truncate

    emb = torch.nn.functional.normalize(torch.randn(3, 384), dim=-1)
    cut = matryoshka_truncate(emb, 128)
    assert cut.shape == (3, 128)
    torch.testing.assert_close(cut.norm(dim=-1), torch.ones(3))
    with pytest.raises(ValueError):
        matryoshka_truncate(emb, 0)


def test_unattended_mask_tokens_still_give_query_vectors(col):
    enc = load_encoder(ModelConfig(kind="colbert", attend_to_mask_tokens=False))
    Q = enc.encode_queries(QUERIES[:1])
    np.testing.assert_allclose(np.linalg.norm(Q, axis=-1), 1.0, atol=1e-5)
    n = len(enc.tokenizer.encode_queries(QUERIES[:1])[0])
    assert not np.allclose(Q[0, :n], col.encode_queries(QUERIES[:1])[0, :n], atol=1e-3)  # attention differs


@pytest.mark.parametrize("kind, attend", [("biencoder", True), ("colbert", True), ("colbert", False)])
def test_native_bert_matches_transformers(kind, attend):
    """The plain-torch BERT gives transformers' BertModel outputs, padded batches included."""
    from embedctl.models.native_bert import NativeBert

    cfg = ModelConfig(kind=kind, attend_to_mask_tokens=attend, doc_max_length=64)
    native, hf = load_encoder(cfg), load_encoder(dataclasses.replace(cfg, native_bert=False))
    assert isinstance(native.backbone, NativeBert) and not isinstance(hf.backbone, NativeBert)
    if kind == "biencoder":
        assert isinstance(load_encoder(cfg, train=True).backbone, NativeBert)  # training too (fast CPU dropout)
    texts = DOCS + QUERIES
    np.testing.assert_allclose(native.encode_queries(texts), hf.encode_queries(texts), atol=1e-5)
    a, b = native.encode_documents(texts, batch_size=3), hf.encode_documents(texts, batch_size=3)
    if kind == "colbert":
        assert a[1].tolist() == b[1].tolist()
        a, b = a[0], b[0]
    np.testing.assert_allclose(a, b, atol=1e-5)
    assert set(native.backbone.state_dict()) == set(hf.backbone.state_dict())


def test_native_bert_training_matches_transformers():
    """Without dropout, a training forward/backward on the native BERT gives transformers' loss and gradients."""
    import torch

    cfg = ModelConfig(doc_max_length=64, dropout=0.0)
    native = load_encoder(cfg, train=True)
    hf = load_encoder(dataclasses.replace(cfg, native_bert=False), train=True)
    ids, att = native.tokenizer.pad(native.tokenizer.encode_documents(DOCS + QUERIES), "document")
    grads = []
    for enc in (native, hf):
        emb = enc(ids, att, side="document").embeddings
        (emb @ emb.T).logsumexp(-1).sum().backward()
        grads.append({k: p.grad for k, p in enc.backbone.named_parameters() if p.grad is not None})
    assert set(grads[0]) == set(grads[1])
    for name, grad in grads[0].items():
        torch.testing.assert_close(grad, grads[1][name], atol=2e-5, rtol=1e-3, msg=name)


def test_fast_dropout_statistics_and_gradient():
    """The fast CPU dropout drops ~p of the elements, keeps the mean, is seeded, and back-propagates its mask."""
    import torch

    from embedctl.models.dropout import FastDropout, dropout

    x = torch.ones(400, 1000, requires_grad=True)
    torch.manual_seed(0)
    y = dropout(x, 0.1, True)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.005
    assert abs(y.mean().item() - 1.0) < 0.01
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # d y / d x is the scaled mask itself
    torch.manual_seed(0)
    assert torch.equal(dropout(x.detach(), 0.1, True), y.detach())  # same seed, same mask
    assert dropout(x, 0.1, False) is x and dropout(x, 0.0, True) is x
    layer = FastDropout(0.25).eval()
    assert torch.equal(layer(x), x)
    layer.train()
    assert abs((layer(x.detach()) != 0).float().mean().item() - 0.75) < 0.005


@pytest.mark.parametrize("padded", [False, True])
def test_fast_dropout_attention_matches_the_plain_formula(padded):
    """The native CPU attention with dropout (scale and padding mask inside one baddbmm) equals
    softmax(q k^T / sqrt(d), padding -> -inf), the same seeded dropout mask, @ v, and so do its gradients."""
    import torch

    from embedctl.models.dropout import dropout
    from embedctl.models.native_bert import _attention_with_fast_dropout

    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(3, 4, 7, 8, generator=gen, requires_grad=True) for _ in range(3))
    mask = None
    if padded:
        lengths = torch.tensor([7, 5, 2])
        mask = (torch.arange(7)[None, :] < lengths[:, None])[:, None, None, :]
    torch.manual_seed(11)
    fast = _attention_with_fast_dropout(q, k, v, mask, 0.2)
    grads_fast = torch.autograd.grad(fast.pow(2).sum(), (q, k, v))
    scores = q @ k.transpose(-1, -2) / 8 ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    torch.manual_seed(11)
    plain = dropout(scores.softmax(-1), 0.2, True) @ v
    grads_plain = torch.autograd.grad(plain.pow(2).sum(), (q, k, v))
    torch.testing.assert_close(fast, plain, atol=1e-5, rtol=1e-5)
    for a, b in zip(grads_fast, grads_plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
