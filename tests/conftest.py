"""Shared fixtures: the repo root, the SciFact folder beside the checkout, a CLI runner, module folders."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
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


@pytest.fixture(scope="module")
def module_tmp(request, tmp_path_factory) -> Iterator[Callable[[str], Path]]:
    """``module_tmp(name)``: a fresh folder for a module's shared fixtures, removed when the module is done.

    Why: the suite writes gigabytes of checkpoints (each minilm step is ~270 MB with Adam's moments), and
    pytest keeps module folders until the session ends. Function folders go as each test passes
    (``tmp_path_retention_policy = "failed"`` in pyproject.toml); these go with their module, unless one of
    its tests failed, so a failure's files stay for a look.
    """
    made: list[Path] = []
    failed_before = request.session.testsfailed

    def mktemp(name: str) -> Path:
        made.append(tmp_path_factory.mktemp(name))
        return made[-1]

    yield mktemp
    if request.session.testsfailed == failed_before:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
