"""Step checkpoints for exact resume, and the `train.resume` decision.

Layout of ``{output.dir}/checkpoints/step_%08d/`` (written into ``.step_%08d.tmp`` then renamed):
    model/                 encoder.save(): safetensors + tokenizer + embedctl_model.json
    optimizer.pt           optimizer state (tensors, numbers, lists only; read with weights_only=True);
                           optimizer_rank%d.pt per rank for DeepSpeed ZeRO 1/2
    rng_rank%d.pt          python / numpy / torch / cuda RNG states of each rank
    trainer_state.json     step, scheduler state, data position (BatchStream.state_dict), world size, and
                           ``files``: every other file's {bytes, sha256}, checked in full before a resume
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from embedctl.errors import EmbedctlError
from embedctl.train.distributed import barrier
from embedctl.train.runtime import capture_rng, restore_rng
from embedctl.util import atomic
from embedctl.util.io import check_records_content, file_record, read_json
from embedctl.util.ranks import RankEnv

STEP_DIR = re.compile(r"^step_(\d{8})$")
STATE_FILE = "trainer_state.json"


def step_dir(out_dir: Path, step: int) -> Path:
    return out_dir / "checkpoints" / f"step_{step:08d}"


def list_checkpoints(out_dir: Path) -> list[Path]:
    """Complete step checkpoints (those with trainer_state.json), oldest first."""
    root = out_dir / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if STEP_DIR.match(p.name) and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: p.name)


def holds_a_run(out_dir: Path) -> bool:
    """True when ``out_dir`` already holds training output (metrics, checkpoints or a final model)."""
    return (out_dir / "metrics.jsonl").exists() or bool(list_checkpoints(out_dir)) or (out_dir / "final").exists()


@dataclass
class ResumePlan:
    checkpoint: Path | None   # step checkpoint to resume from, or None for a fresh start
    clear: bool               # remove the previous run's metrics/checkpoints/final first (fresh start + overwrite)


def plan_resume(resume: str, out_dir: Path, overwrite: bool) -> ResumePlan:
    """Decide where to start from ``train.resume`` (auto | must | never | PATH) and ``output.overwrite``."""
    latest = (list_checkpoints(out_dir) or [None])[-1]
    if resume == "auto" and latest is not None:
        return ResumePlan(latest, False)
    if resume == "must":
        if latest is None:
            raise EmbedctlError(f"train.resume=must but {out_dir}/checkpoints holds no complete step checkpoint",
                                hint="use train.resume=auto to start fresh when there is none")
        return ResumePlan(latest, False)
    if resume not in ("auto", "never"):
        path = Path(resume)
        if not (path / STATE_FILE).is_file():
            raise EmbedctlError(f"train.resume={resume!r}: not a step checkpoint folder (no {STATE_FILE})",
                                hint="point it at {output.dir}/checkpoints/step_XXXXXXXX, or use auto|must|never",
                                exit_code=2)  # a value that names nothing usable: bad usage, as a config error
        if holds_a_run(out_dir) and not overwrite and path.resolve().parent.parent != out_dir.resolve():
            raise _occupied(out_dir, resume)
        return ResumePlan(path, holds_a_run(out_dir) and path.resolve().parent.parent != out_dir.resolve())
    if holds_a_run(out_dir):
        if not overwrite:
            raise _occupied(out_dir, resume)
        return ResumePlan(None, True)
    return ResumePlan(None, False)


def _occupied(out_dir: Path, resume: str) -> EmbedctlError:
    return EmbedctlError(
        f"output.dir {out_dir} already holds another run (metrics.jsonl, checkpoints or final/) "
        f"and train.resume={resume} does not continue it",
        hint="pick another output.dir, resume it with train.resume=auto|must, or set output.overwrite=true "
             "to replace it")


def clear_previous_run(out_dir: Path) -> None:
    for name in ("checkpoints", "final"):
        shutil.rmtree(out_dir / name, ignore_errors=True)
    (out_dir / "metrics.jsonl").unlink(missing_ok=True)


def save_checkpoint(out_dir: Path, step: int, engine, stream_state: dict, info: RankEnv,
                    keep: int | None = None) -> Path:
    """Write step ``step`` atomically (temp folder, then rename); every rank calls this."""
    final = step_dir(out_dir, step)
    tmp = final.parent / f".{final.name}.tmp"
    if info.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    barrier()
    with engine.gathered_weights():
        if info.is_main:
            engine.encoder.save(str(tmp / "model"))
    opt_state = engine.optimizer_state()
    if opt_state is not None:
        name = f"optimizer_rank{info.rank}.pt" if engine.optimizer_state_is_per_rank() else "optimizer.pt"
        torch.save(opt_state, tmp / name)
    torch.save(capture_rng(), tmp / f"rng_rank{info.rank}.pt")
    barrier()
    if info.is_main:
        state = {"step": step, "world_size": info.world, "engine": engine.name,
                 "scheduler": _jsonable(engine.scheduler.state_dict()), "data": stream_state,
                 "files": checkpoint_records(tmp)}
        atomic.write_json(tmp / STATE_FILE, state)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        _prune(out_dir, keep)
    barrier()
    return final


def _prune(out_dir: Path, keep: int | None) -> None:
    if keep:
        for old in list_checkpoints(out_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=lambda o: o.__dict__ if hasattr(o, "__dict__") else str(o)))


def checkpoint_records(folder: Path) -> dict[str, dict[str, Any]]:
    """``{relative path: {bytes, sha256}}`` of every file of a checkpoint folder but trainer_state.json
    (which holds them): what :func:`verify_checkpoint` checks before a resume trusts the folder."""
    return {p.relative_to(folder).as_posix(): file_record(p)
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != STATE_FILE}


def verify_checkpoint(ckpt: Path) -> None:
    """Refuse to resume from a checkpoint whose files differ from what was written (missing, another size,
    another sha256): a same-size corruption of the weights or the optimizer state would otherwise train
    on (a NaN model, exit 0). A checkpoint written before records (no ``files``) is trusted as it is."""
    records = read_state(ckpt).get("files")
    if not isinstance(records, dict):
        return
    older = ([p for p in list_checkpoints(ckpt.parent.parent) if p.name < ckpt.name]
             if ckpt.parent.name == "checkpoints" else [])
    hint = (f"move {ckpt} away and rerun (train.resume=auto then resumes from {older[-1].name}), or resume from "
            f"that one explicitly (train.resume={older[-1]}); " if older else "") + \
        "or start over (train.resume=never with output.overwrite=true)"
    check_records_content(ckpt, records, what=f"the checkpoint {ckpt}", hint=hint)


def read_state(ckpt: Path) -> dict:
    return read_json(ckpt / STATE_FILE, "training state")


def load_training_state(ckpt: Path, engine, info: RankEnv) -> dict:
    """Restore optimizer, scheduler and this rank's RNG from ``ckpt``; returns trainer_state.json.

    Model weights are loaded before (the encoder is built from ``ckpt/model``). The world size must match
    when RNG or optimizer state is per rank.
    """
    state = read_state(ckpt)
    if state["world_size"] != info.world:
        raise EmbedctlError(
            f"{ckpt} was written by {state['world_size']} rank(s); this run has {info.world}",
            hint="resume with the same number of processes (exact resume restores per-rank RNG state)")
    per_rank = engine.optimizer_state_is_per_rank()
    opt_file = ckpt / (f"optimizer_rank{info.rank}.pt" if per_rank else "optimizer.pt")
    engine.load_optimizer_state(torch.load(opt_file, map_location=engine.device, weights_only=True))
    sched = dict(state["scheduler"])
    sched.pop("lr_lambdas", None)  # the schedule object is rebuilt from the config
    engine.scheduler.load_state_dict({**engine.scheduler.state_dict(), **sched})
    restore_rng(torch.load(ckpt / f"rng_rank{info.rank}.pt", weights_only=True))
    return state
