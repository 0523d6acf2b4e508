"""The registry of index kinds: the one place that knows which kinds exist (embedctl.index.kinds.base
says what a kind implements). Everything else asks it by name (the ``kind`` of the metadata) or by the
model to index.

    kind = index_kind(gen.kind)                      # PlaidKind() / DenseKind()
    kind = kind_for("auto", encoder.kind)            # the kind that indexes this model
"""

from __future__ import annotations

from embedctl.errors import ConfigError, EmbedctlError
from embedctl.index.kinds.base import BuildJob, IndexKind
from embedctl.index.kinds.dense import DenseKind
from embedctl.index.kinds.lexical import LexicalKind
from embedctl.index.kinds.plaid import PlaidKind

KINDS: dict[str, IndexKind] = {k.name: k for k in (PlaidKind(), DenseKind(), LexicalKind())}

__all__ = ["KINDS", "BuildJob", "DenseKind", "IndexKind", "LexicalKind", "PlaidKind", "index_kind", "kind_for"]


def index_kind(name: str) -> IndexKind:
    """The kind recorded as ``name`` in an index's metadata."""
    try:
        return KINDS[name]
    except KeyError:
        raise EmbedctlError(f"unknown index kind {name!r} (this embedctl knows {', '.join(sorted(KINDS))})",
                            hint="rebuild the index with this embedctl (`embedctl index ... --overwrite`)") from None


def kind_for(requested: str, model_kind: str) -> IndexKind:
    """``index.kind`` for a model of ``model_kind``: ``auto`` picks the kind that indexes it; a kind that
    indexes another model kind is refused, naming the keys that match; ``lexical`` indexes no model's output."""
    if requested == LexicalKind.name:
        return KINDS[requested]
    natural = next(k for k in KINDS.values() if k.model_kind == model_kind)
    kind = natural if requested == "auto" else index_kind(requested)
    if kind is not natural:
        raise ConfigError([f"`index.kind`: a {kind.name} index needs a {kind.model_label} model, but model.kind is "
                           f"{model_kind!r}; use index.kind={natural.name} or model.kind={kind.model_kind}"])
    return kind
