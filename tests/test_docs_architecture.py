"""docs/architecture.md's package diagram is what embedctl's imports give today (docs/make_architecture.py)."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_architecture_diagram_is_current():
    proc = subprocess.run([sys.executable, str(REPO / "docs" / "make_architecture.py"), "--check"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, (f"{proc.stderr.strip()}\n(the imports changed: regenerate the diagram with "
                                  "`python docs/make_architecture.py` and commit docs/architecture.md)")
