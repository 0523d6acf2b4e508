"""docs/troubleshooting.md's generator: every error has a concrete fix and belongs to a command."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("make_troubleshooting", REPO / "docs" / "make_troubleshooting.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_error_has_a_concrete_fix_and_a_command():
    gen = _generator()
    missing, vague = [], []
    for module, items in gen.collect().items():
        assert gen.command_of(module) in gen.ORDER, module
        for message, hint in items:
            fix = gen.fix_of(message, hint)
            if not fix:
                missing.append(f"{module}: {message}")
            elif fix.strip().lower() in {"see the message", "{...}"}:
                vague.append(f"{module}: {message}")
    assert not missing, "add a hint= to these raises, or an entry to FIXES in docs/make_troubleshooting.py:\n" + "\n".join(missing)
    assert not vague, vague


def test_fix_stated_in_the_message_is_used():
    gen = _generator()
    assert gen.fix_of("`search.k` = {...}: must be at least 1", "") == "pass `-k 10` (or more)"
    assert gen.fix_of("the thing is off; use index.kind=plaid", "") == "use index.kind=plaid"
    assert gen.fix_of("x", "the hint") == "the hint"
