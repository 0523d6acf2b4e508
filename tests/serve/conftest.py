import shutil

import pytest
from support.serving import build_tiny


@pytest.fixture(scope="session")
def tiny_built(tmp_path_factory):
    """The 40-document indexes, built once per session and kind (never written: see ``tiny``)."""
    built = {}

    def make(kind: str):
        if kind not in built:
            built[kind] = build_tiny(tmp_path_factory.mktemp(f"serve-built-{kind}"), kind)
        return built[kind]

    return make


@pytest.fixture(scope="module")
def tiny(tiny_built, module_tmp):
    """``tiny(kind)``: this module's own copy of a 40-document index of that kind (servers write into it)."""
    copies = {}

    def make(kind: str):
        if kind not in copies:
            copies[kind] = shutil.copytree(tiny_built(kind), module_tmp(f"serve-{kind}") / kind)
        return copies[kind]

    return make
