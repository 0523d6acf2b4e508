"""What the hostile matrix (bench/trust_matrix.py) found, each fixed and kept fixed here: real subprocesses,
seconds each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from embedctl.util.console import PIPE_EXIT

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "400", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.mark.parametrize("args", [["--help"], ["index", "--help"], []])
def test_help_into_a_closed_pipe_exits_141_quietly(args):
    """`embedctl --help | head -1`: click answered the EPIPE with exit 1, so a pipeline with pipefail failed."""
    proc = subprocess.Popen([sys.executable, "-m", "embedctl", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=ENV)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == PIPE_EXIT, err
    assert err.decode() == ""
