"""A model folder's own settings are the `model.*` defaults unless a config says otherwise, and
`embedctl config show` says where each value came from (issue 18, section 2, first bullet)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from embedctl.config import load_config
from embedctl.models.hub import resolve_model_path

MINILM = Path(resolve_model_path("minilm"))


def _st_folder(tmp_path: Path, *, max_seq_length=128, pooling_cls=True, prompts=None, similarity=None) -> Path:
    """A sentence-transformers folder over the real MiniLM weights with its own settings."""
    folder = tmp_path / "st"
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "special_tokens_map.json"):
        (folder / name).symlink_to(MINILM / name)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 384, "pooling_mode_cls_token": pooling_cls, "pooling_mode_mean_tokens": not pooling_cls}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))
    st_cfg: dict = {}
    if prompts is not None:
        st_cfg["prompts"] = prompts
    if similarity is not None:
        st_cfg["similarity_fn_name"] = similarity
    (folder / "config_sentence_transformers.json").write_text(json.dumps(st_cfg))
    return folder


def test_minilm_biencoder_lengths_come_from_sentence_bert_config():
    loaded = load_config(None, [])
    m = loaded.cfg.model
    assert (m.query_max_length, m.doc_max_length, m.pooling) == (256, 256, "mean")
    assert loaded.origin("model.query_max_length").startswith("model file sentence_bert_config.json")
    assert loaded.origin("model.pooling").startswith("model file 1_Pooling/config.json")
    assert loaded.origin("model.normalize") == "default"


def test_a_config_value_wins_over_the_model_file():
    loaded = load_config(None, ["model.query_max_length=48"])
    assert (loaded.cfg.model.query_max_length, loaded.cfg.model.doc_max_length) == (48, 256)
    assert loaded.origin("model.query_max_length") == "command line"


def test_colbert_on_a_sentence_transformers_backbone_keeps_colbert_lengths():
    loaded = load_config(None, ["model.kind=colbert"])
    assert (loaded.cfg.model.query_max_length, loaded.cfg.model.doc_max_length) == (32, 256)
    assert loaded.origin("model.query_max_length") == "default"


def test_queries_are_no_longer_cut_at_32_tokens():
    from embedctl.models.tokenization import TextTokenizer

    tok = TextTokenizer(load_config(None, []).cfg.model)
    long_query = " ".join(["protein"] * 100)
    assert len(tok.encode_queries([long_query])[0]) == 102  # 100 words + [CLS] + [SEP], under 256


def test_sentence_transformers_folder_settings(tmp_path, capsys):
    folder = _st_folder(tmp_path, prompts={"query": "query: ", "passage": "passage: "}, similarity="dot")
    loaded = load_config(None, [f"model.name_or_path={folder}"])
    m = loaded.cfg.model
    assert (m.query_max_length, m.doc_max_length, m.pooling) == (128, 128, "cls")
    assert (m.query_prefix, m.doc_prefix, m.normalize) == ("query: ", "passage: ", False)
    assert loaded.origin("model.query_prefix").startswith("model file config_sentence_transformers.json")
    # the pooling is the folder's (embedctl.models.layout applies it): another value is said to be ignored
    loaded = load_config(None, [f"model.name_or_path={folder}", "model.pooling=mean"])
    err = capsys.readouterr().err
    assert "model.pooling='mean' (command line) is ignored" in err and "1_Pooling/config.json" in err
    assert loaded.origin("model.pooling").endswith("fixed by the model")


def test_pylate_and_stanford_lengths(tmp_path):
    pylate = tmp_path / "pylate"
    pylate.mkdir()
    (pylate / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"}]))
    (pylate / "config_sentence_transformers.json").write_text(json.dumps(
        {"query_prefix": "[Q] ", "document_prefix": "[D] ", "query_length": 48, "document_length": 300,
         "do_query_expansion": True, "attend_to_expansion_tokens": False}))
    m = load_config(None, [f"model.name_or_path={pylate}"]).cfg.model
    assert (m.kind, m.query_max_length, m.doc_max_length, m.query_marker, m.doc_marker) == \
        ("colbert", 48, 300, "[Q]", "[D]")

    stanford = tmp_path / "stanford"
    stanford.mkdir()
    (stanford / "artifact.metadata").write_text(json.dumps(
        {"query_maxlen": 40, "doc_maxlen": 220, "dim": 96, "query_token_id": "[unused0]", "doc_token_id": "[unused1]"}))
    loaded = load_config(None, [f"model.name_or_path={stanford}", "model.doc_max_length=180"])
    m = loaded.cfg.model
    assert (m.kind, m.query_max_length, m.doc_max_length, m.dim) == ("colbert", 40, 180, 96)
    assert loaded.origin("model.query_max_length").startswith("model file artifact.metadata")


def test_embedctl_checkpoint_lengths_from_its_card(tmp_path):
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "embedctl_model.json").write_text(json.dumps(
        {"format": 1, "kind": "biencoder", "pooling": "mean", "query_max_length": 77, "doc_max_length": 199}))
    m = load_config(None, [f"model.name_or_path={folder}"]).cfg.model
    assert (m.query_max_length, m.doc_max_length) == (77, 199)


def test_config_show_names_every_origin(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("defaults: [model/minilm]\ntrain:\n  max_steps: 9\n")
    res = subprocess.run([sys.executable, "-m", "embedctl", "config", "show", str(cfg), "optim.lr=1e-4",
                          "model.doc_max_length=128"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = {line.split(":")[0].strip(): line for line in res.stdout.splitlines()}
    assert lines["max_steps"].endswith(f"# file {cfg}")
    assert lines["lr"].endswith("# command line")
    assert lines["doc_max_length"].endswith("# command line")
    assert "# config layer " in lines["name_or_path"] and "recipes/model/minilm.yaml" in lines["name_or_path"]
    assert lines["normalize"].endswith("# default")
    res = subprocess.run([sys.executable, "-m", "embedctl", "config", "show"], capture_output=True, text=True,
                         timeout=120)
    assert "query_max_length: 256  # model file sentence_bert_config.json" in res.stdout


@pytest.mark.parametrize("similarity", [None, "cosine"])
def test_cosine_models_stay_normalized(tmp_path, similarity):
    folder = _st_folder(tmp_path, similarity=similarity)
    assert load_config(None, [f"model.name_or_path={folder}"]).cfg.model.normalize is True
