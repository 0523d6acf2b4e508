"""Shared fixtures: the repo root, the SciFact folder beside the checkout, a CLI runner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def scifact_dir() -> Path | None:
    candidates = [REPO.parent / "shared" / "data" / "scifact"]
    if os.environ.get("EMBEDCTL_SCIFACT"):
        candidates.insert(0, Path(os.environ["EMBEDCTL_SCIFACT"]))
    candidates.append(Path("/work/shared/data/scifact"))
    return next((c for c in candidates if (c / "corpus.jsonl").is_file()), None)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def scifact() -> Path:
    path = scifact_dir()
    if path is None:
        pytest.skip("SciFact not found beside the checkout (../shared/data/scifact) nor in $EMBEDCTL_SCIFACT")
    return path


@pytest.fixture()
def cli():
    """Invoke the typer app in-process; returns the click Result."""
    from typer.testing import CliRunner

    from embedctl.cli.main import app

    runner = CliRunner()

    def invoke(*args: str, **kwargs):
        return runner.invoke(app, list(args), catch_exceptions=False, **kwargs)

    return invoke
