"""A step checkpoint records every file's size and sha256 (trainer_state.json ``files``) and a resume checks
them all before loading any: a same-size corruption of the weights or the optimizer state is refused, naming
the file and the checkpoint to resume from instead (it used to train on to a NaN model, exit 0)."""

from __future__ import annotations

import json
import shutil

import pytest
from support.trainhelpers import make_prebatched, tiny_model_overrides, train_in_process

from embedctl.errors import EmbedctlError
from embedctl.util.io import file_record

pytestmark = pytest.mark.slow


def _args(batches, out, *extra):
    return [f"data.path={batches}", f"output.dir={out}", "train.save_every=1", "optim.warmup_steps=1",
            *tiny_model_overrides(), *extra]


@pytest.fixture(scope="module")
def run(module_tmp):
    root = module_tmp("ckpt-checks")
    batches = make_prebatched(root / "batches", n_batches=2, queries_per_batch=4)
    out = root / "run"
    train_in_process(_args(batches, out, "train.max_steps=2"))
    return batches, out


def _flip(path, where: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0xFF  # same length, other content
    path.write_bytes(bytes(data))


def test_every_checkpoint_file_is_recorded(run):
    _, out = run
    ckpt = out / "checkpoints" / "step_00000002"
    files = json.loads((ckpt / "trainer_state.json").read_text())["files"]
    assert "model/model.safetensors" in files and "optimizer.pt" in files and "rng_rank0.pt" in files
    assert files["optimizer.pt"] == file_record(ckpt / "optimizer.pt")


@pytest.mark.parametrize("victim", ["model/model.safetensors", "optimizer.pt"])
def test_resume_refuses_a_same_size_corruption_naming_the_file_and_the_previous_checkpoint(run, tmp_path, victim):
    batches, full = run
    out = tmp_path / "run"
    shutil.copytree(full, out)
    shutil.rmtree(out / "final")
    path = out / "checkpoints" / "step_00000002" / victim
    _flip(path)
    with pytest.raises(EmbedctlError) as err:
        train_in_process(_args(batches, out, "train.max_steps=3", "train.resume=auto"))
    assert f"{path}: content differs from the recorded sha256" in str(err.value)
    assert "step_00000001" in err.value.hint and "train.resume=" in err.value.hint
    assert not (out / "checkpoints" / "step_00000003").exists() and not (out / "final").exists()
    # the fix the message names: resume from the previous checkpoint
    shutil.rmtree(out / "checkpoints" / "step_00000002")
    summary = train_in_process(_args(batches, out, "train.max_steps=3", "train.resume=auto"))
    assert summary["resumed_from"] == 1
