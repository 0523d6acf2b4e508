"""The demo's ColBERT track trains with the ColBERT route's tuned loss settings (temperature 1.0 for MaxSim
sums, one InfoNCE row per query), not the bi-encoders' 0.05."""

from __future__ import annotations

from pathlib import Path

from embedctl.config import load_config

REPO = Path(__file__).resolve().parents[2]


def test_demo_colbert_track_uses_the_tuned_temperature(monkeypatch):
    monkeypatch.chdir(REPO)
    demo = load_config(str(REPO / "demo" / "colbert.yaml")).cfg
    route = load_config(str(REPO / "configs" / "colbert_scifact.yaml")).cfg
    assert demo.model.kind == "colbert"
    assert demo.train.temperature == route.train.temperature == 1.0
    assert demo.train.positives == route.train.positives
