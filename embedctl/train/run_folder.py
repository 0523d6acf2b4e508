"""Where a training run may write: ``output.dir`` is a run folder of its own, never another command's output
or input. A run writes ``checkpoints/``, ``final/`` and ``metrics.jsonl`` there, and ``output.overwrite``
removes those: inside a token cache, a pre-batched folder, an index or the training data itself they would
mix with (and, overwritten, remove parts of) what another command wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedctl.errors import EmbedctlError
from embedctl.util.fs import refuse_output_in_inputs, url_to_fs
from embedctl.util.outputs import TRAINING, other_output


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
    fs, path = url_to_fs(str(out))
    other = other_output(fs, path, own=(TRAINING,))
    if other is not None:
        marker, what = other
        raise EmbedctlError(f"output.dir {out} holds {what} ({marker}): a training run writes checkpoints/, "
                            "final/ and metrics.jsonl into its own folder; nothing was written",
                            hint="choose a new run folder, e.g. --output runs/NAME", exit_code=2)


def _holds_training_output(folder: Path) -> bool:
    return any((folder / name).exists() for name in ("checkpoints", "final", "metrics.jsonl"))
