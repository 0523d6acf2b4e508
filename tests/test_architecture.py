"""The layering of embedctl (cli > commands > engines > core > base, no cycles) holds: `lint-imports` with
the contracts in .importlinter, the same check `make lint` runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _lint_imports() -> str:
    beside_python = Path(sys.executable).with_name("lint-imports")
    found = str(beside_python) if beside_python.is_file() else shutil.which("lint-imports")
    assert found, "lint-imports is missing: install the dev extras (pip install -e '.[dev]')"
    return found


def test_import_contracts_hold() -> None:
    result = subprocess.run([_lint_imports(), "--no-cache", "--no-logo"], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, f"import contracts broken (.importlinter):\n{result.stdout}{result.stderr}"
    assert "0 broken" in result.stdout, result.stdout
