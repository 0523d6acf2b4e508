"""Exact resume: from a step checkpoint, later steps log bitwise the same losses as the uninterrupted run."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from support.trainhelpers import make_prebatched, read_metrics, train_in_process

pytestmark = pytest.mark.slow


def _args(batches, out, *extra):
    # dropout on (the model's own 0.1) and shuffled, split batches crossing an epoch: RNG and data position matter
    return [f"data.path={batches}", f"output.dir={out}", "train.max_steps=5", "train.save_every=2",
            "data.split_factor=2", "model.query_max_length=12", "model.doc_max_length=24",
            "optim.warmup_steps=2", "optim.lr=1e-4", *extra]


@pytest.fixture(scope="module")
def reference(module_tmp):
    root = module_tmp("resume")
    batches = make_prebatched(root / "batches", n_batches=2, queries_per_batch=4)
    out = root / "full"
    train_in_process(_args(batches, out))
    return batches, out, read_metrics(out)


def test_resume_from_path_into_new_dir_is_bitwise_identical(reference, tmp_path):
    batches, full, rows = reference
    out = tmp_path / "resumed"
    summary = train_in_process(_args(batches, out, f"train.resume={full}/checkpoints/step_00000002"))
    assert summary["resumed_from"] == 2
    resumed = read_metrics(out)
    assert [r["step"] for r in resumed] == [3, 4, 5]
    assert [r["loss"] for r in resumed] == [r["loss"] for r in rows[2:]]  # bitwise (floats from JSON)
    assert [r["lr"] for r in resumed] == [r["lr"] for r in rows[2:]]
    a = _weights(full / "final")
    b = _weights(out / "final")
    assert a and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_auto_resume_after_interruption_truncates_metrics_and_continues(reference, tmp_path):
    batches, full, rows = reference
    out = tmp_path / "interrupted"
    shutil.copytree(full, out)
    # as if the run died during step 5: last complete checkpoint is step 4, metrics went further
    shutil.rmtree(out / "checkpoints" / "step_00000005")
    shutil.rmtree(out / "final")
    with open(out / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"step": 6, "loss": 0.0}) + "\n" + '{"step": 7, "lo')  # torn line
    summary = train_in_process(_args(batches, out, "train.resume=auto"))
    assert summary["resumed_from"] == 4
    assert read_metrics(out) == rows[:4] + [read_metrics(out)[4]]
    assert read_metrics(out)[4]["loss"] == rows[4]["loss"]


def test_resume_must_with_checkpoint(reference, tmp_path):
    batches, full, rows = reference
    out = tmp_path / "must"
    shutil.copytree(full, out)
    shutil.rmtree(out / "checkpoints" / "step_00000005")
    train_in_process(_args(batches, out, "train.resume=must"))
    assert read_metrics(out)[-1]["loss"] == rows[-1]["loss"]


def _weights(folder):
    from safetensors.torch import load_file

    files = sorted(folder.glob("*.safetensors"))
    out = {}
    for f in files:
        out.update(load_file(str(f)))
    return out
