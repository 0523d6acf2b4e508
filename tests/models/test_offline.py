"""The offline switch: a hub id missing from the local cache is never downloaded with EMBEDCTL_OFFLINE=1
(or HF_HUB_OFFLINE=1), and the error names the switch; the bundled alias and folders need no network."""

from __future__ import annotations

import pytest

from embedctl.errors import EmbedctlError
from embedctl.models.hub import offline, resolve_model_path


@pytest.mark.parametrize("name", ["EMBEDCTL_OFFLINE", "HF_HUB_OFFLINE"])
def test_cache_miss_offline_is_refused_naming_the_switch(monkeypatch, name):
    monkeypatch.delenv("EMBEDCTL_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv(name, "1")
    assert offline()
    with pytest.raises(EmbedctlError) as err:
        resolve_model_path("embedctl-tests/no-such-model-anywhere")
    assert "not downloaded because EMBEDCTL_OFFLINE or HF_HUB_OFFLINE is set" in str(err.value)
    assert "minilm" in err.value.hint


def test_switch_values(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("EMBEDCTL_OFFLINE", "0")
    assert not offline()
    monkeypatch.setenv("EMBEDCTL_OFFLINE", "true")
    assert offline()


def test_bundled_alias_needs_no_network(monkeypatch):
    monkeypatch.setenv("EMBEDCTL_OFFLINE", "1")
    assert resolve_model_path("minilm")
