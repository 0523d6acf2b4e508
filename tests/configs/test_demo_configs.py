"""The demo's configs: the ColBERT track trains with the ColBERT route's tuned loss settings (temperature 1.0
for MaxSim sums, one InfoNCE row per query), not the bi-encoders' 0.05; and the settings that keep `make demo`
within its 10 minutes on 2 cores (docs/getting-started.md) stay what they were measured with."""

from __future__ import annotations

from pathlib import Path

import pytest

from embedctl.config import load_config

REPO = Path(__file__).resolve().parents[2]
DEMO_CONFIGS = ("configs/demo.yaml", "demo/colbert.yaml")
TRAIN_QUERIES = 240  # demo/data/scifact-mini/README.md


def test_demo_colbert_track_uses_the_tuned_temperature(monkeypatch):
    monkeypatch.chdir(REPO)
    demo = load_config(str(REPO / "demo" / "colbert.yaml")).cfg
    route = load_config(str(REPO / "configs" / "colbert_scifact.yaml")).cfg
    assert demo.model.kind == "colbert"
    assert demo.train.temperature == route.train.temperature == 1.0
    assert demo.train.positives == route.train.positives


@pytest.mark.parametrize("path", DEMO_CONFIGS)
def test_demo_encodes_on_autos_fast_backend(monkeypatch, path):
    """Mining, both indexes and the rankings encode 1,000 abstracts: bulk work, where model.encoder_backend=auto
    picks bf16 (native bfloat16 CPUs) or ONNX Runtime (~2x the reference's documents/s, within cosine 0.999);
    the ONNX export covers embedctl's native BERT forward, so that stays on."""
    from embedctl.models import encode_backends

    monkeypatch.chdir(REPO)
    model = load_config(str(REPO / path)).cfg.model
    assert model.encoder_backend == "auto" and model.native_bert
    assert encode_backends.resolve_backend("auto", texts=1000) in ("bf16", "onnx")  # the slice's 1,000 abstracts
    assert model.kind == "colbert" or model.pooling == "mean"


@pytest.mark.parametrize("path", DEMO_CONFIGS)
def test_demo_fine_tune_sees_every_train_query(monkeypatch, path):
    """Shortened for time, each fine-tune still passes over every train query of the slice at least once."""
    monkeypatch.chdir(REPO)
    cfg = load_config(str(REPO / path)).cfg
    assert cfg.train.max_steps * cfg.prebatch.queries_per_batch >= TRAIN_QUERIES
    assert cfg.prebatch.negatives_per_query >= 1  # hard negatives: what the fine-tune learns from
