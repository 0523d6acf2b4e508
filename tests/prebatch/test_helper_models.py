"""prebatch's helper models: the miner's and the teacher's kind comes from the model itself; teacher scores
are stored as relations.parquet's TEACHER_SCORE column for every pair of each batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from support.datahelpers import scifact_slice

from embedctl.config import load_config
from embedctl.config.sections.model import ModelConfig
from embedctl.data.batches import read_batch, split_batch
from embedctl.data.pretokenize import run_pretokenize
from embedctl.models.encoder import colbert_scores, load_encoder
from embedctl.prebatch.build import run_prebatch
from embedctl.prebatch.helper_models import helper_model_config

COLBERT = ["model.kind=colbert", "model.dim=32", "model.query_max_length=16", "model.doc_max_length=40"]


@pytest.fixture(scope="module")
def beir(module_tmp) -> Path:
    return scifact_slice(module_tmp("sf") / "scifact", n_queries=8, extra_docs=6)


@pytest.fixture(scope="module")
def colbert_tokens(beir, module_tmp) -> Path:
    out = module_tmp("tok") / "tokens"
    run_pretokenize(load_config(None, [f"pretokenize.input={beir}", f"pretokenize.output={out}", *COLBERT]))
    return out


@pytest.fixture(scope="module")
def colbert_checkpoint(module_tmp) -> Path:
    path = module_tmp("ckpt") / "colbert"
    load_encoder(ModelConfig(kind="colbert", dim=32)).save(str(path))
    return path


def test_helper_kind_comes_from_the_model_not_the_training_config(colbert_checkpoint):
    colbert_cfg = ModelConfig(kind="colbert", dim=32, query_max_length=16)
    # `minilm` is a plain sentence-transformers model: a bi-encoder, whatever model.kind says
    assert helper_model_config(colbert_cfg, "minilm").kind == "biencoder"
    assert helper_model_config(colbert_cfg, None).kind == "biencoder"
    assert helper_model_config(colbert_cfg, "minilm").query_max_length == 16  # lengths stay with the config
    assert load_encoder(helper_model_config(colbert_cfg, "minilm")).kind == "biencoder"
    # a ColBERT checkpoint says so in its card, even under a bi-encoder config
    assert load_encoder(helper_model_config(ModelConfig(), str(colbert_checkpoint))).kind == "colbert"


def _prebatch(tokens, beir, out, *extra):
    return run_prebatch(load_config(None, [f"prebatch.input={tokens}", f"prebatch.qrels={beir}/qrels/train.tsv",
                                           f"prebatch.output={out}", "prebatch.queries_per_batch=4", *COLBERT,
                                           *extra]))


def test_colbert_config_mines_with_the_bi_encoder_named(beir, colbert_tokens, tmp_path, capsys):
    meta = _prebatch(colbert_tokens, beir, tmp_path / "b", "prebatch.negatives_per_query=1",
                     "prebatch.mine_model=minilm", "prebatch.mine_depth=8")
    assert "with minilm (biencoder)" in capsys.readouterr().err
    assert meta["counts"]["mined_negatives"] > 0


@pytest.mark.slow
def test_teacher_scores_every_pair_bi_encoder_and_colbert(beir, colbert_tokens, colbert_checkpoint, tmp_path):
    for teacher, kind in (("minilm", "biencoder"), (str(colbert_checkpoint), "colbert")):
        out = tmp_path / kind
        meta = _prebatch(colbert_tokens, beir, out, f"prebatch.teacher={teacher}")
        assert meta["teacher"]["kind"] == kind
        enc = load_encoder(helper_model_config(ModelConfig(query_max_length=16, doc_max_length=40), teacher))
        for name in sorted(p.name for p in out.glob("batch_*")):
            table = pq.read_table(out / name / "relations.parquet")
            assert table.column_names == ["BATCH_QUERY_ID", "BATCH_DOCUMENT_ID", "RELEVANCE", "TEACHER_SCORE"]
            # an Arctic reader asking for its three columns still reads the file
            assert pq.read_table(out / name / "relations.parquet",
                                 columns=["BATCH_QUERY_ID", "BATCH_DOCUMENT_ID", "RELEVANCE"]).num_rows == table.num_rows
            batch = read_batch(str(out / name))
            assert table.num_rows == batch.num_queries * batch.num_documents  # every pair scored
            assert not np.isnan(batch.teacher_scores).any()
            want = _scores(enc, batch)
            np.testing.assert_allclose(batch.teacher_scores, want, rtol=1e-4, atol=1e-4)
            parts = split_batch(batch, 2)
            for part in parts:
                for i, q in enumerate(part.query_ids):
                    for j, d in enumerate(part.document_ids):
                        qi, dj = list(batch.query_ids).index(q), list(batch.document_ids).index(d)
                        assert part.teacher_scores[i, j] == batch.teacher_scores[qi, dj]


def _scores(enc, batch) -> np.ndarray:
    """The teacher's scores recomputed from the texts of the batch's ids (the cache is ColBERT-tokenized)."""
    from embedctl.models.tokenization import TextTokenizer

    tok = TextTokenizer(ModelConfig(kind="colbert", query_max_length=16, doc_max_length=40))
    plain = [tok.tokenizer.decode([int(i) for i in t], skip_special_tokens=True) for t in batch.query_tokens]
    queries = [t.replace("[unused0]", "").strip() for t in plain]
    docs = [tok.tokenizer.decode([int(i) for i in t], skip_special_tokens=True).replace("[unused1]", "").strip()
            for t in batch.document_tokens]
    Q = enc.encode_queries(queries)
    if enc.kind == "biencoder":
        return Q @ enc.encode_documents(docs).T
    vectors, doclens = enc.encode_documents(docs)
    D = torch.zeros((len(docs), int(doclens.max()), vectors.shape[1]))
    mask = torch.zeros(D.shape[:2], dtype=torch.bool)
    start = 0
    for i, n in enumerate(doclens.tolist()):
        D[i, :n] = torch.from_numpy(vectors[start:start + n])
        mask[i, :n] = True
        start += n
    return colbert_scores(torch.from_numpy(Q), D, mask).numpy()
