import pytest
from support.serving import build_tiny


@pytest.fixture(scope="module")
def tiny(module_tmp):
    """``tiny(kind)``: a 40-document index of that kind (built once per module and kind)."""
    built = {}

    def make(kind: str):
        if kind not in built:
            built[kind] = build_tiny(module_tmp(f"serve-{kind}"), kind)
        return built[kind]

    return make
