"""Checkpoint round trips: embedctl folders, sentence-transformers, Stanford ColBERT layout (built here)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from embedctl.config.sections.model import ModelConfig
from embedctl.errors import EmbedctlError
from embedctl.models.checkpoint import save_stanford
from embedctl.models.encoder import Encoder, load_encoder
from embedctl.models.hub import resolve_model_path
from embedctl.models.tokenization import TOKENIZER_FILES, TextTokenizer

TEXTS = ["Hello, world!", "A cell is the smallest unit of life.", "statins and heart disease"]


@pytest.fixture(scope="module")
def minilm() -> Path:
    return Path(resolve_model_path("minilm"))


@pytest.fixture(scope="module")
def col():
    return load_encoder(ModelConfig(kind="colbert", doc_max_length=64))


def _with(encoder: Encoder, **changes) -> Encoder:
    cfg = dataclasses.replace(encoder.model_cfg, **changes)
    return Encoder(encoder.backbone, TextTokenizer(cfg, encoder.tokenizer.model_path), cfg, encoder.linear)


def _link_model(src: Path, dst: Path, sub: str = "") -> None:
    """A model folder of symlinks to the MiniLM files (no 90 MB copies)."""
    (dst / sub).mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "model.safetensors", *TOKENIZER_FILES):
        if (src / name).is_file():
            (dst / sub / name).symlink_to(src / name)


@pytest.mark.slow
def test_biencoder_round_trip_and_sentence_transformers(tmp_path):
    from sentence_transformers import SentenceTransformer

    enc = _with(load_encoder(ModelConfig()), pooling="cls", query_prefix="query: ")
    enc.save(str(tmp_path / "bi"))
    card = json.loads((tmp_path / "bi" / "embedctl_model.json").read_text())
    assert card["kind"] == "biencoder" and card["pooling"] == "cls" and card["query_prefix"] == "query: "
    assert (tmp_path / "bi" / "model.safetensors").is_file() and (tmp_path / "bi" / "modules.json").is_file()
    loaded = load_encoder(ModelConfig(name_or_path=str(tmp_path / "bi")))  # config says mean: the card decides
    assert loaded.model_cfg.pooling == "cls" and loaded.model_cfg.query_prefix == "query: "
    assert loaded.tokenizer.fingerprint() == enc.tokenizer.fingerprint()  # token caches stay valid
    ours_q, ours_d = enc.encode_queries(TEXTS), enc.encode_documents(TEXTS)
    np.testing.assert_allclose(loaded.encode_queries(TEXTS), ours_q, atol=1e-6)
    st = SentenceTransformer(str(tmp_path / "bi"), device="cpu")
    np.testing.assert_allclose(st.encode(TEXTS), ours_d, atol=1e-5)
    np.testing.assert_allclose(st.encode(TEXTS, prompt_name="query"), ours_q, atol=1e-5)


def test_save_replaces_an_existing_folder_cleanly(tmp_path, col):
    target = tmp_path / "ck"
    col.save(str(target))
    col.save(str(target))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    # ColBERT folders carry no bi-encoder sentence-transformers files (pooling), only PyLate's modules
    assert not (target / "1_Pooling").exists()
    modules = json.loads((target / "modules.json").read_text())
    assert [m["type"] for m in modules] == ["sentence_transformers.models.Transformer", "pylate.models.Dense.Dense"]


def test_colbert_round_trip_card_decides_lengths_from_config(tmp_path, col):
    enc = _with(col, query_marker="[unused3]")
    with torch.no_grad():
        enc.linear.weight.mul_(1.5)  # not the seeded projection any more
    try:
        enc.save(str(tmp_path / "col"))
    finally:
        with torch.no_grad():
            enc.linear.weight.div_(1.5)
    assert (tmp_path / "col" / "colbert_linear.safetensors").is_file()
    loaded = load_encoder(ModelConfig(name_or_path=str(tmp_path / "col"), kind="biencoder", doc_max_length=40))
    assert loaded.kind == "colbert" and loaded.dim == 128 and loaded.model_cfg.doc_max_length == 40
    assert loaded.model_cfg.query_marker == "[unused3]" and loaded.tokenizer.encode_queries(["x"])[0][1] == 4
    torch.testing.assert_close(loaded.linear.weight, col.linear.weight * 1.5)
    enc_q = _with(col, query_marker="[unused3]")
    with torch.no_grad():
        enc_q.linear.weight.mul_(1.5)
        expected = enc_q.encode_queries(TEXTS)
        enc_q.linear.weight.div_(1.5)
    np.testing.assert_allclose(loaded.encode_queries(TEXTS), expected, atol=1e-6)


def _legacy_layer_norm_names(key: str) -> str:
    """What colbert-ai checkpoints converted from older BERT code carry: LayerNorm gamma/beta."""
    if "LayerNorm" in key:
        return key.removesuffix(".weight") + ".gamma" if key.endswith(".weight") else key.removesuffix(".bias") + ".beta"
    return key


def _stanford_folder(minilm: Path, folder: Path, fmt: str, legacy_names: bool = False) -> torch.Tensor:
    """Build a Stanford ColBERT checkpoint by hand: `bert.*` backbone weights + `linear.weight` [96, 384]."""
    from safetensors.torch import load_file, save_file

    folder.mkdir()
    rename = _legacy_layer_norm_names if legacy_names else (lambda k: k)
    state = {f"bert.{rename(k)}": v for k, v in load_file(str(minilm / "model.safetensors")).items()}
    weight = torch.randn(96, 384, generator=torch.Generator().manual_seed(5)) / 20
    state["linear.weight"] = weight
    if fmt == "safetensors":
        save_file(state, str(folder / "model.safetensors"))
    else:
        torch.save(state, folder / "pytorch_model.bin")
    config = json.loads((minilm / "config.json").read_text())
    config["architectures"] = ["HF_ColBERT"]
    (folder / "config.json").write_text(json.dumps(config))
    for name in TOKENIZER_FILES:
        if (minilm / name).is_file():
            shutil.copyfile(minilm / name, folder / name)
    return weight


@pytest.mark.parametrize("fmt", ["safetensors", "bin", "legacy-names"])
def test_stanford_layout_loads_as_colbert(tmp_path, minilm, col, fmt):
    weight = _stanford_folder(minilm, tmp_path / "stanford", "safetensors" if fmt == "legacy-names" else fmt,
                              legacy_names=fmt == "legacy-names")
    loaded = load_encoder(ModelConfig(name_or_path=str(tmp_path / "stanford")))  # kind biencoder in the config
    assert loaded.kind == "colbert" and loaded.dim == 96 and loaded.model_cfg.dim == 96
    torch.testing.assert_close(loaded.linear.weight, weight)
    reference = Encoder(col.backbone, col.tokenizer, col.model_cfg, torch.nn.Linear(384, 96, bias=False))
    with torch.no_grad():
        reference.linear.weight.copy_(weight)
    np.testing.assert_allclose(loaded.encode_queries(TEXTS), reference.encode_queries(TEXTS), atol=1e-5)


def test_stanford_export_round_trip(tmp_path, col):
    save_stanford(col, str(tmp_path / "export"))
    from safetensors import safe_open

    with safe_open(str(tmp_path / "export" / "model.safetensors"), framework="pt") as fh:
        keys = set(fh.keys())
    assert "linear.weight" in keys and all(k == "linear.weight" or k.startswith("bert.") for k in keys)
    loaded = load_encoder(ModelConfig(name_or_path=str(tmp_path / "export"), doc_max_length=64))
    v1, l1 = loaded.encode_documents(TEXTS)
    v2, l2 = col.encode_documents(TEXTS)
    assert l1.tolist() == l2.tolist()
    np.testing.assert_allclose(v1, v2, atol=1e-5)


class _Evil:
    def __reduce__(self):
        return (Path.touch, (Path("/tmp/embedctl-models-evil-pickle-ran"),))


def test_pickled_objects_are_never_run(tmp_path):
    marker = Path("/tmp/embedctl-models-evil-pickle-ran")
    marker.unlink(missing_ok=True)
    folder = tmp_path / "evil"
    folder.mkdir()
    shutil.copyfile(Path(resolve_model_path("minilm")) / "config.json", folder / "config.json")
    torch.save({"bert.x": torch.zeros(1), "linear.weight": torch.zeros(1), "payload": _Evil()},
               folder / "pytorch_model.bin")
    with pytest.raises(EmbedctlError, match=r"(?s)model\.name_or_path.*Unsupported global.*never arbitrary pickles"):
        load_encoder(ModelConfig(name_or_path=str(folder)))
    assert not marker.exists()


@pytest.mark.parametrize("pooling_json, expected", [
    ({"word_embedding_dimension": 384, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
    ({"embedding_dimension": 384, "pooling_mode": "lasttoken"}, "last"),
])
def test_sentence_transformers_folder_pooling(tmp_path, minilm, pooling_json, expected):
    folder = tmp_path / "st"
    _link_model(minilm, folder, sub="0_Transformer")  # the old layout: weights in a subfolder
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling_json))
    (folder / "config.json").symlink_to(minilm / "config.json")
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]))
    enc = load_encoder(ModelConfig(name_or_path=str(folder)))
    assert enc.model_cfg.pooling == expected
    assert enc.encode_documents(["a cell"]).shape == (1, 384)


def test_save_to_an_fsspec_url(col):
    import fsspec

    col.save("memory://embedctl-test/ck")
    fs = fsspec.filesystem("memory")
    names = {Path(p).name for p in fs.find("/embedctl-test/ck")}
    assert {"model.safetensors", "colbert_linear.safetensors", "embedctl_model.json", "vocab.txt"} <= names
    fs.rm("/embedctl-test", recursive=True)


def test_bad_card_and_missing_projection_name_the_key(tmp_path, col):
    col.save(str(tmp_path / "ck"))
    (tmp_path / "ck" / "colbert_linear.safetensors").unlink()
    with pytest.raises(EmbedctlError, match=r"model\.name_or_path.*colbert_linear"):
        load_encoder(ModelConfig(name_or_path=str(tmp_path / "ck")))
    (tmp_path / "ck" / "embedctl_model.json").write_text(json.dumps({"format": 99}))
    with pytest.raises(EmbedctlError, match=r"model\.name_or_path.*format 99"):
        load_encoder(ModelConfig(name_or_path=str(tmp_path / "ck")))


def test_pylate_folder_loads_as_colbert(tmp_path, minilm, col):
    """A PyLate-format folder (sentence-transformers + bias-free Dense + prefixes), written by hand here."""
    from safetensors.torch import save_file

    folder = tmp_path / "pylate"
    _link_model(minilm, folder)
    (folder / "1_Dense").mkdir()
    weight = torch.randn(64, 384, generator=torch.Generator().manual_seed(9)) / 20
    save_file({"linear.weight": weight}, str(folder / "1_Dense" / "model.safetensors"))
    (folder / "1_Dense" / "config.json").write_text(json.dumps(
        {"in_features": 384, "out_features": 64, "bias": False,
         "activation_function": "torch.nn.modules.linear.Identity"}))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"},
    ]))
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"query_prefix": "[unused0]", "document_prefix": "[unused1]", "query_length": 32, "document_length": 180,
         "attend_to_expansion_tokens": False, "do_query_expansion": True}))
    loaded = load_encoder(ModelConfig(name_or_path=str(folder)))
    assert loaded.kind == "colbert" and loaded.dim == 64 and loaded.model_cfg.attend_to_mask_tokens is False
    torch.testing.assert_close(loaded.linear.weight, weight)
    assert loaded.tokenizer.encode_queries(["x"])[0][:2] == [101, 1]
    (folder / "1_Dense" / "config.json").write_text(json.dumps({"activation_function": "torch.nn.Tanh"}))
    with pytest.raises(EmbedctlError, match=r"model\.name_or_path.*not a bias-free linear projection"):
        load_encoder(ModelConfig(name_or_path=str(folder)))


def _trained_colbert() -> Encoder:
    """A ColBERT whose weights are not the fresh ones (as after training), colbert-ai's query attention."""
    enc = load_encoder(ModelConfig(kind="colbert", dim=48, doc_max_length=64, query_max_length=24,
                                   attend_to_mask_tokens=False))
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        enc.linear.weight.add_(torch.randn(enc.linear.weight.shape, generator=g) / 50)
        layer = enc.backbone.encoder.layer[0].attention.self.query.weight
        layer.add_(torch.randn(layer.shape, generator=g) / 50)
    return enc


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    keep = np.linalg.norm(a, axis=1) > 0
    return (a[keep] * b[keep]).sum(1) / (np.linalg.norm(a[keep], axis=1) * np.linalg.norm(b[keep], axis=1))


@pytest.mark.slow
def test_colbert_layouts_round_trip_same_vectors(tmp_path):
    """A trained ColBERT saved as embedctl (which is also a PyLate folder), exported as Stanford (colbert-ai)
    and as PyLate; each loads through our loader of that layout with the same query and document vectors."""
    from embedctl.models.checkpoint import save_pylate
    from embedctl.models.layout import detect_layout

    enc = _trained_colbert()
    enc.save(str(tmp_path / "embedctl"))
    save_stanford(enc, str(tmp_path / "stanford"))
    save_pylate(enc, str(tmp_path / "pylate"))
    shutil.copytree(tmp_path / "embedctl", tmp_path / "card-removed")
    (tmp_path / "card-removed" / "embedctl_model.json").unlink()  # what PyLate sees in our folder
    meta = json.loads((tmp_path / "stanford" / "artifact.metadata").read_text())
    assert meta["attend_to_mask_tokens"] is False and meta["query_token_id"] == "[unused0]"
    Q0 = enc.encode_queries(TEXTS)
    D0, L0 = enc.encode_documents(TEXTS)
    for name, layout in (("embedctl", "embedctl"), ("stanford", "stanford"), ("pylate", "pylate"),
                         ("card-removed", "pylate")):
        assert detect_layout(tmp_path / name) == layout
        # the Stanford layout keeps no markers or attention setting: they come from the config, as in colbert-ai
        loaded = load_encoder(ModelConfig(name_or_path=str(tmp_path / name), doc_max_length=64, query_max_length=24,
                                          attend_to_mask_tokens=False))
        assert loaded.kind == "colbert" and loaded.dim == 48, name
        Q1 = loaded.encode_queries(TEXTS)
        D1, L1 = loaded.encode_documents(TEXTS)
        assert L1.tolist() == L0.tolist(), name
        assert _cosines(Q0, Q1).min() >= 0.9999 and _cosines(D0, D1).min() >= 0.9999, name
        np.testing.assert_allclose(Q1, Q0, atol=1e-5)
        np.testing.assert_allclose(D1, D0, atol=1e-5)
