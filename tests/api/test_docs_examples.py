"""docs/python-api.md runs as written: its python blocks, in order, in one fresh folder, and each
``print(...)  # expected`` line prints what its comment says (the comment up to its first colon)."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

BLOCK = re.compile(r"```python\n(.*?)```", re.S)
PRINT = re.compile(r"^print\((.*)\)\s+#\s*(.*)$", re.M)


def _expect(show, expected: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        show()
    assert out.getvalue().strip() == expected.split(":")[0].strip()


@pytest.mark.slow
def test_python_api_page_runs_and_prints_what_it_says(repo_root, tmp_path, monkeypatch):
    page = (repo_root / "docs" / "python-api.md").read_text()
    blocks = BLOCK.findall(page)
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    scope: dict = {"_expect": _expect}
    checked = 0
    for block in blocks:
        code, n = PRINT.subn(lambda m: f"_expect(lambda: print({m.group(1)}), {m.group(2)!r})", block)
        checked += n
        exec(compile(code, "docs/python-api.md", "exec"), scope)
    assert checked >= 10
