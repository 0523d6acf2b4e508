"""The index kinds behind one seam (embedctl.index.kinds): no module outside the registry branches on a
kind's name, and every registered kind has a retriever and a place in the metadata's kinds."""

from __future__ import annotations

import re
from pathlib import Path

from embedctl.index import meta as M
from embedctl.index.kinds import KINDS, IndexKind, kind_for
from embedctl.search.retrievers import RETRIEVERS

PACKAGE = Path(__file__).resolve().parents[1] / "embedctl"
KIND_NAMES = "|".join(KINDS)
# `x == "plaid"`, `"dense" != x`, `x in ("plaid", ...)`: a branch on a kind's name
BRANCH = re.compile(rf"""(==|!=)\s*["']({KIND_NAMES})["']|["']({KIND_NAMES})["']\s*(==|!=)|\bin\s*[(\[{{]\s*["']({KIND_NAMES})["']""")


def test_no_branch_on_a_kind_name_outside_the_registry():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "kinds" in path.relative_to(PACKAGE).parts:
            continue
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            if BRANCH.search(line):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}")
    assert not found, "ask embedctl.index.kinds instead of comparing kind names:\n" + "\n".join(found)


def test_every_kind_is_complete():
    assert set(KINDS) == set(M.KINDS) == set(RETRIEVERS)
    for name, kind in KINDS.items():
        assert isinstance(kind, IndexKind) and kind.name == name and kind.model_kind and kind.model_label
        for method in ("plan", "build", "follow", "write_segment", "merge_segments"):
            assert getattr(type(kind), method) is not getattr(IndexKind, method), f"{name} lacks {method}"
        assert kind_for("auto", kind.model_kind) is kind
