"""A resume never half-applies a change: the config a run folder recorded against the one asked for now.

A step checkpoint restores the optimizer (its learning rates), the schedule, the RNG and the data position,
while everything else is read from today's config: a new ``optim.lr`` would be silently ignored while a new
``train.temperature`` would be applied, and the recorded config would show values that never ran. So when
``train.resume`` continues a checkpoint, every training key (sections :data:`TRAINING_SECTIONS`) is compared
with the run's ``resolved_config.yaml``:

- keys in :data:`MAY_CHANGE` (how long to run and how often to log, save and evaluate, timeouts) are applied,
  named on stderr and appended to ``config_changes.jsonl`` in the run folder (the step they apply from, the
  old and new values); ``resolved_config.yaml`` is rewritten with what runs from there on;
- any other difference refuses the resume (exit 2) naming each key, its recorded and its new value, and the
  fix: set them back, or start a new run folder from the checkpoint's weights (a fresh optimizer and schedule).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import yaml

from embedctl.errors import EmbedctlError
from embedctl.util import atomic
from embedctl.util.console import stderr_console

TRAINING_SECTIONS = ("model", "data", "train", "optim", "engine", "eval")
# what a resumed run may change: its length (train.max_steps: a linear or cosine schedule then decays to the
# new end from the step resumed), its logging, saving and evaluation cadence, and waits; none changes the
# arithmetic of a step already taken
MAY_CHANGE = ("train.max_steps", "train.resume", "train.log_every", "train.save_every", "train.keep_checkpoints",
              "eval.every", "eval.max_queries", "eval.batch_size", "engine.timeout_s", "data.prefetch")
CHANGES_FILE = "config_changes.jsonl"


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): data}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def recorded_config(run_dir: Path) -> dict[str, Any] | None:
    """The training keys the run folder recorded (None when it has no resolved_config.yaml)."""
    path = run_dir / "resolved_config.yaml"
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise EmbedctlError(f"{path}: cannot read the run's recorded config ({exc})",
                            hint="restore the file, or start the run over in a new output.dir") from exc
    return {k: v for k, v in _flat(data).items() if k.split(".", 1)[0] in TRAINING_SECTIONS}


def check_resume_config(cfg: Any, checkpoint: Path, *, note: bool = True) -> dict[str, list[Any]]:
    """Compare ``cfg`` with the config recorded beside ``checkpoint`` (its run folder); refuse a change
    outside MAY_CHANGE, return the allowed changes ``{key: [recorded, now]}`` (noted on stderr; the caller
    records them with :func:`record_changes` once it writes)."""
    run_dir = checkpoint.resolve().parent.parent
    recorded = recorded_config(run_dir)
    if recorded is None:
        if note:
                stderr_console().print(f"note: {run_dir} has no resolved_config.yaml; the resume cannot check that "
                                   "the config is the one the run started with", markup=False)
        return {}
    now = {k: v for k, v in _flat(dataclasses.asdict(cfg)).items() if k.split(".", 1)[0] in TRAINING_SECTIONS}
    changed = {k: [recorded.get(k), now.get(k)] for k in sorted(set(now) | set(recorded))
               if not _same(recorded.get(k), now.get(k))}
    refused = {k: v for k, v in changed.items() if k not in MAY_CHANGE}
    if refused:
        lines = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in refused.items())
        raise EmbedctlError(
            f"train.resume={cfg.train.resume}: {checkpoint} was trained with other settings ({lines}); a resume "
            "restores the optimizer, schedule and data position from the checkpoint, so it would apply only some "
            "of these changes; nothing was written",
            hint=f"set them back to the values in {run_dir / 'resolved_config.yaml'}, or start a new run from "
                 f"this checkpoint's weights (a fresh optimizer and schedule): --output NEW_FOLDER "
                 f"model.name_or_path={checkpoint / 'model'} train.resume=never; a resume may change only "
                 + ", ".join(MAY_CHANGE), exit_code=2)
    allowed = {k: v for k, v in changed.items() if k != "train.resume"}
    if allowed and note:
        stderr_console().print("resuming with changed settings (applied from here on): " + "; ".join(
            f"{k} {old!r} -> {new!r}" for k, (old, new) in allowed.items()), markup=False)
    return allowed


def record_changes(out_dir: Path, checkpoint: Path, changed: dict[str, list[Any]]) -> None:
    """Append the allowed changes of this resume to ``out_dir``/CHANGES_FILE (nothing when none)."""
    if not changed:
        return
    path = out_dir / CHANGES_FILE
    before = path.read_text(encoding="utf-8") if path.is_file() else ""
    record = {"from_checkpoint": checkpoint.name, "changed": {k: {"was": old, "now": new}
                                                              for k, (old, new) in changed.items()}}
    atomic.write_text(path, before + json.dumps(record, sort_keys=True) + "\n")
