"""Where a training run may write: ``output.dir`` is a run folder of its own, never another command's output
or input. A run writes ``checkpoints/``, ``final/`` and ``metrics.jsonl`` there, and ``output.overwrite``
removes those: inside a token cache, a pre-batched folder, an index or the training data itself they would
mix with (and, overwritten, remove parts of) what another command wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedctl.errors import EmbedctlError
from embedctl.index.files import META_FILE as INDEX_META
from embedctl.util.fs import refuse_output_in_inputs

# what marks a folder another embedctl command wrote (the file each writes last, or its ledger)
_OTHER_OUTPUTS = (
    (INDEX_META, "an index (`embedctl index`)"),
    ("ledger.json", "a token cache (`embedctl pretokenize`) or an index being built"),
    # a BEIR folder's cache: one side per subfolder, only config and versions files at its top
    ("documents/ledger.json", "a token cache (`embedctl pretokenize` of a BEIR folder)"),
    ("queries/ledger.json", "a token cache (`embedctl pretokenize` of a BEIR folder)"),
    ("corpus.jsonl", "a collection (a BEIR folder)"),
    ("metadata.json", "pre-batched data (`embedctl prebatch`)"),
    ("LATEST", "a folder of indexes (index.root)"),
)


def check_output_dir(cfg: Any) -> None:
    """Refuse (exit 2, before any write) an ``output.dir`` that is, or is inside, the training data, the
    eval set or the model folder, or that holds another command's output."""
    out = cfg.output.dir
    inputs = {"data.path": cfg.data.path, "eval.path": cfg.eval.path}
    model = Path(cfg.model.name_or_path)
    if model.is_dir():
        inputs["model.name_or_path"] = str(model)
    refuse_output_in_inputs(out, "output.dir", inputs)
    folder = Path(out)
    if cfg.output.overwrite and _holds_training_output(folder) and not (folder / "resolved_config.yaml").is_file():
        raise EmbedctlError(f"output.dir {out} holds checkpoints/, final/ or metrics.jsonl but no resolved_config.yaml: "
                            "it is not a run folder embedctl wrote, so output.overwrite will not remove them; "
                            "nothing was written", hint="choose a new run folder, e.g. --output runs/NAME", exit_code=2)
    for marker, what in _OTHER_OUTPUTS:
        if (folder / marker).is_file():
            raise EmbedctlError(f"output.dir {out} holds {what} ({marker}): a training run writes checkpoints/, "
                                "final/ and metrics.jsonl into its own folder; nothing was written",
                                hint="choose a new run folder, e.g. --output runs/NAME", exit_code=2)


def _holds_training_output(folder: Path) -> bool:
    return any((folder / name).exists() for name in ("checkpoints", "final", "metrics.jsonl"))
