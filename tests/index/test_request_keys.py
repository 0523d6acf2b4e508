"""The build's request is an allow-list (IndexConfig.SHAPING): an operation's new argument never
invalidates a resume, and every index.* key is placed in exactly one of the two lists."""

from __future__ import annotations

import dataclasses

from embedctl.config.sections.index import IndexConfig
from embedctl.index.ledger import request_of


def test_every_index_key_is_either_shaping_or_not():
    names = {f.name for f in dataclasses.fields(IndexConfig)}
    shaping, other = set(IndexConfig.SHAPING), set(IndexConfig.NOT_SHAPING)
    assert not shaping & other
    assert shaping | other == names, f"place these keys in SHAPING or NOT_SHAPING: {sorted(names - shaping - other)}"


def test_an_operation_argument_does_not_change_the_request():
    @dataclasses.dataclass
    class WithNewOption(IndexConfig):
        some_new_lock_policy: str = "wait"

    model, collection = {"kind": "colbert"}, {"size": 1}
    base = request_of(IndexConfig(), model, collection)
    assert request_of(WithNewOption(some_new_lock_policy="refuse"), model, collection) == base
    assert request_of(IndexConfig(lock_wait_s=5.0, drift_action="expand", name="x"), model, collection) == base
    assert request_of(IndexConfig(nbits=4), model, collection) != base
