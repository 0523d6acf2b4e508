"""TextTokenizer with the real MiniLM tokenizer: specials, prefixes, ColBERT markers, truncation, padding."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from embedctl.config.sections.model import ModelConfig
from embedctl.errors import EmbedctlError
from embedctl.models.tokenization import TextTokenizer, fingerprint_differences, token_id_dtype

CLS, SEP, PAD, MASK, Q_MARK, D_MARK = 101, 102, 0, 103, 1, 2
LONG = "the cell divides and grows " * 80


@pytest.fixture(scope="module")
def bi() -> TextTokenizer:
    return TextTokenizer(ModelConfig(kind="biencoder", query_max_length=16, doc_max_length=24))


@pytest.fixture(scope="module")
def col() -> TextTokenizer:
    return TextTokenizer(ModelConfig(kind="colbert", query_max_length=32, doc_max_length=24))


def test_biencoder_ids_match_the_hf_tokenizer(bi):
    texts = ["Hello, world!", "Ünïcode façade — naïve café", "", LONG]
    ours = bi.encode_documents(texts)
    ref = bi.tokenizer(texts, truncation=True, max_length=24)["input_ids"]
    assert ours == [list(r) for r in ref]
    assert ours[0][0] == CLS and ours[0][-1] == SEP
    assert ours[2] == [CLS, SEP] and bi.text_length(ours[2], "document") == 0


def test_prefix_is_tokenized_in_front():
    tok = TextTokenizer(ModelConfig(query_prefix="query: ", doc_prefix="passage: "))
    q = tok.encode_queries(["cells"])[0]
    d = tok.encode_documents(["cells"])[0]
    assert tok.decode(q) == "[CLS] query : cells [SEP]"
    assert tok.decode(d) == "[CLS] passage : cells [SEP]"


def test_colbert_markers_follow_cls(col):
    q = col.encode_queries(["what is a cell?"])[0]
    d = col.encode_documents(["A cell."])[0]
    assert q[:2] == [CLS, Q_MARK] and q[-1] == SEP
    assert d[:2] == [CLS, D_MARK] and d[-1] == SEP
    assert col.decode(q) == "[CLS] [unused0] what is a cell? [SEP]"


@pytest.mark.parametrize("kind", ["biencoder", "colbert"])
def test_truncation_counts_special_tokens_and_keeps_sep(kind):
    tok = TextTokenizer(ModelConfig(kind=kind, query_max_length=10, doc_max_length=20))
    q, d = tok.encode_queries([LONG])[0], tok.encode_documents([LONG])[0]
    assert len(q) == 10 and len(d) == 20
    assert q[-1] == SEP and d[-1] == SEP and q[0] == CLS
    if kind == "colbert":
        assert q[1] == Q_MARK and d[1] == D_MARK


def test_query_padding_with_mask_tokens_attended(col):
    ids = col.encode_queries(["a cell", "what is the powerhouse of the cell"])
    input_ids, attention = col.pad(ids, "query")
    assert tuple(input_ids.shape) == (2, 32) and input_ids.dtype.is_floating_point is False
    assert input_ids[0, : len(ids[0])].tolist() == ids[0]
    assert (input_ids[0, len(ids[0]):] == MASK).all()
    assert attention.eq(1).all()


def test_padding_without_augmentation_uses_pad_and_longest():
    tok = TextTokenizer(ModelConfig(kind="colbert", query_augmentation=False))
    ids = tok.encode_queries(["a cell", "what is the powerhouse of the cell"])
    input_ids, attention = tok.pad(ids, "query")
    width = max(map(len, ids))
    assert tuple(input_ids.shape) == (2, width)
    assert input_ids[0, len(ids[0]):].eq(PAD).all() and attention[0, len(ids[0]):].eq(0).all()
    assert attention.sum(1).tolist() == [len(x) for x in ids]


def test_document_padding_right_and_left(bi):
    ids = [np.array(x, dtype=np.uint16) for x in bi.encode_documents(["a", "a longer document"])]
    right_ids, right_mask = bi.pad(ids, "document")
    assert right_ids[0].tolist() == [CLS, 1037, SEP, PAD, PAD] and right_mask[0].tolist() == [1, 1, 1, 0, 0]
    left = TextTokenizer(bi.model_cfg, bi.model_path)
    left.padding_side = "left"
    left_ids, left_mask = left.pad(ids, "document")
    assert left_ids[0].tolist() == [PAD, PAD, CLS, 1037, SEP] and left_mask[0].tolist() == [0, 0, 1, 1, 1]
    assert left_ids[1].tolist() == right_ids[1].tolist()


def test_fingerprint_is_json_and_tracks_id_settings(col):
    fp = col.fingerprint()
    assert json.loads(json.dumps(fp)) == fp
    assert set(fp["files"]) >= {"vocab.txt", "tokenizer.json"} and all(len(h) == 64 for h in fp["files"].values())
    assert TextTokenizer(col.model_cfg, col.model_path).fingerprint() == fp
    same = col.with_settings(mask_punctuation=False, query_augmentation=False)  # padding/masking only
    assert same.fingerprint() == fp
    for change in ({"kind": "biencoder"}, {"doc_max_length": 25}, {"query_max_length": 31},
                   {"query_prefix": "q: "}, {"doc_marker": "[unused2]"}):
        other = col.with_settings(**change).fingerprint()
        assert other != fp, change
        assert fingerprint_differences(fp, other)
    assert "doc_max_length: 24 != 25" in fingerprint_differences(fp, col.with_settings(doc_max_length=25).fingerprint())


def test_bad_marker_and_too_short_length_name_the_key():
    with pytest.raises(EmbedctlError, match=r"model\.query_marker"):
        TextTokenizer(ModelConfig(kind="colbert", query_marker="[no-such-token]"))
    with pytest.raises(EmbedctlError, match=r"model\.query_max_length.*at least 4"):
        TextTokenizer(ModelConfig(kind="colbert", query_max_length=3))


def test_bad_model_path_names_the_key(tmp_path):
    with pytest.raises(EmbedctlError, match=r"model\.name_or_path"):
        TextTokenizer(ModelConfig(name_or_path=str(tmp_path / "missing")))


def test_vocab_dtype_and_punctuation(col):
    assert col.vocab_size == 30522 and col.id_dtype == "uint16"
    assert token_id_dtype(65536) == "uint16" and token_id_dtype(65537) == "uint32"
    assert token_id_dtype(250002) == "uint32"
    punct = col.punctuation_ids()
    assert {1010, 1012, 999, 1029} <= set(punct)  # , . ! ?
    assert CLS not in punct and 2088 not in punct  # "world"


def test_mask_tokens_unattended_when_asked():
    tok = TextTokenizer(ModelConfig(kind="colbert", attend_to_mask_tokens=False))
    ids = tok.encode_queries(["a cell"])
    input_ids, attention = tok.pad(ids, "query")
    assert input_ids.shape == (1, 32) and (input_ids[0, len(ids[0]):] == MASK).all()
    assert attention[0].tolist() == [1] * len(ids[0]) + [0] * (32 - len(ids[0]))


def test_tokenizer_cache_skips_transformers_and_matches_it(tmp_path):
    """The first load builds the tokenizer with transformers and caches it; later processes never import it."""
    import os
    import subprocess
    import sys

    script = (
        "import sys, json\n"
        "from embedctl.config.sections.model import ModelConfig\n"
        "from embedctl.models.tokenization import TextTokenizer\n"
        "tok = TextTokenizer(ModelConfig(kind='colbert'))\n"
        "ids = tok.encode_documents(['Hello, world!', 'Ünïcode café — naïve 東京'])\n"
        "print(json.dumps({'ids': ids, 'transformers': 'transformers' in sys.modules,"
        " 'torch': 'torch' in sys.modules}))\n"
    )
    env = {**os.environ, "EMBEDCTL_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    runs = [json.loads(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                      check=True).stdout) for _ in range(2)]
    assert runs[0]["transformers"] and not runs[1]["transformers"] and not runs[1]["torch"]
    assert runs[0]["ids"] == runs[1]["ids"]
    assert len(list((tmp_path / "tokenizers").glob("*.json"))) == 1
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(TextTokenizer(ModelConfig()).model_path)
    ref = hf(["Hello, world!", "Ünïcode café — naïve 東京"])["input_ids"]
    assert [r[0:1] + [D_MARK] + r[1:] for r in ref] == runs[1]["ids"]
