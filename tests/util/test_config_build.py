"""The config loader builds plain configs without OmegaConf (a search's cold start): the same configs, types
included, as OmegaConf's structured merge builds, on every shipped config and recipe layer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from embedctl.config import loader
from embedctl.config.schema import RootConfig

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p for p in [*REPO.glob("configs/*.yaml"), *REPO.glob("recipes/**/*.yaml")])
OVERRIDES = ["optim.lr=1", "model.kind=colbert", "search.metrics=[ndcg_cut_10]", "optim.betas=[0.8,1]",
             "engine.deepspeed={zero_optimization: {stage: 2}, bf16: {enabled: true}}", "model.dropout=null"]


def typed(value):
    """A comparable form that tells 1 from 1.0 and a list from a tuple."""
    if dataclasses.is_dataclass(value):
        return type(value).__name__, tuple((f.name, typed(getattr(value, f.name))) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return "dict", tuple(sorted((k, typed(v)) for k, v in value.items()))
    if isinstance(value, list):
        return "list", tuple(typed(v) for v in value)
    return type(value).__name__, value


def _captured(monkeypatch, path, overrides):
    """(the mapping load_config resolved, the validated mapping it built the config from)."""
    seen: dict = {}
    resolve, build = loader._resolve_interpolations, loader.build
    monkeypatch.setattr(loader, "_resolve_interpolations",
                        lambda data, sources=None: seen.setdefault("raw", (data, resolve(data, sources)))[1])
    monkeypatch.setattr(loader, "build", lambda clean: seen.setdefault("clean", (clean, build(clean)))[1])
    loader.load_config(path, overrides, {"search.index": "/tmp/x"})
    return seen["raw"][0], seen["clean"][0]


@pytest.mark.parametrize("path,overrides", [(None, []), (None, OVERRIDES)] + [(str(p), []) for p in SHIPPED],
                         ids=lambda x: Path(x).name if isinstance(x, str) else None)
def test_plain_build_equals_omegaconf(monkeypatch, path, overrides):
    raw, clean = _captured(monkeypatch, path, overrides)
    if loader.is_plain(raw):
        assert raw == OmegaConf.to_container(OmegaConf.create(raw), resolve=True)
    assert loader.is_plain(clean)
    want = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RootConfig), clean))
    assert typed(loader._construct(RootConfig, clean)) == typed(want)


def test_what_is_not_plain_goes_through_omegaconf():
    assert not loader.is_plain({"a": "${model.kind}"})
    assert not loader.is_plain({"a": "???"})
    assert not loader.is_plain({"a": (1, 2)})
    assert not loader.is_plain({1: "x"})
    assert loader.is_plain({"a": [1, 2.5, None, True, "x"], "b": {"c": "text"}})
    loaded = loader.load_config(None, ["model.kind=colbert", "index.name=${model.kind}-sf"])
    assert loaded.cfg.index.name == "colbert-sf"
