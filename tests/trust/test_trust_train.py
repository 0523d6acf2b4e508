"""Training: a NaN or infinite loss stops the run naming the step (exit 1, no final model, the last good
checkpoint kept); a resume never half-applies a config change (keys outside the allow-list refuse, naming
each; allowed ones are applied and recorded, and the recorded config is what ran). Real subprocesses, the
bundled MiniLM, three tiny batches."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.trainhelpers import make_prebatched, subprocess_env

pytestmark = pytest.mark.slow
TINY = ["model.query_max_length=12", "model.doc_max_length=24"]


def train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "embedctl", "train", *TINY, *args], capture_output=True, text=True,
                          env={**subprocess_env(), "COLUMNS": "400"}, timeout=600)


@pytest.fixture(scope="module")
def batches(module_tmp) -> Path:
    return make_prebatched(module_tmp("trust_train") / "batches", n_batches=3, queries_per_batch=4)


def test_a_nan_loss_stops_the_run_naming_the_step(batches, tmp_path):
    """optim.lr=1e30: step 1 trains (loss finite) and is saved; its weights give a NaN loss at step 2."""
    out = tmp_path / "run"
    res = train(f"data.path={batches}", f"output.dir={out}", "train.max_steps=3", "train.save_every=1",
                "optim.lr=1e30")
    assert res.returncode == 1, res.stderr
    assert "step 2: the loss is nan" in res.stderr and "Traceback" not in res.stderr
    assert f"the last checkpoint, {out}/checkpoints/step_00000001, is kept" in res.stderr
    assert not (out / "final").exists()  # nothing marked complete
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000001"]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]  # the NaN step is never logged (nor applied)


@pytest.fixture(scope="module")
def one_step(batches, module_tmp) -> Path:
    out = module_tmp("trust_resume") / "run"
    res = train(f"data.path={batches}", f"output.dir={out}", "train.max_steps=1", "train.save_every=1",
                "optim.lr=1e-4")
    assert res.returncode == 0, res.stderr
    return out


def test_a_resume_with_another_lr_or_temperature_is_refused_naming_both(batches, one_step):
    before = {p: p.read_bytes() for p in one_step.rglob("*") if p.is_file() and p.suffix in (".yaml", ".jsonl")}
    res = train(f"data.path={batches}", f"output.dir={one_step}", "train.max_steps=2", "train.resume=auto",
                "optim.lr=5e-4", "train.temperature=0.05")
    assert res.returncode == 2, res.stderr
    text = res.stderr.replace("\n", " ")
    assert "optim.lr: 0.0001 -> 0.0005" in text and "train.temperature: 0.02 -> 0.05" in text
    assert "train.max_steps" not in text.split("how to fix")[0]  # an allowed change is not among the refused
    assert "model.name_or_path=" in text and "a resume may change only train.max_steps" in text
    after = {p: p.read_bytes() for p in one_step.rglob("*") if p.is_file() and p.suffix in (".yaml", ".jsonl")}
    assert after == before  # nothing written
    assert not (one_step / "config_changes.jsonl").exists()


def test_an_allowed_change_is_applied_and_recorded(batches, one_step):
    res = train(f"data.path={batches}", f"output.dir={one_step}", "train.max_steps=2", "train.resume=auto",
                "optim.lr=1e-4", "train.log_every=2", "train.save_every=1")
    assert res.returncode == 0, res.stderr
    assert "resuming with changed settings" in res.stderr and "train.max_steps 1 -> 2" in res.stderr
    recorded = yaml.safe_load((one_step / "resolved_config.yaml").read_text())
    assert recorded["train"]["max_steps"] == 2 and recorded["train"]["log_every"] == 2  # what ran from step 2
    assert recorded["optim"]["lr"] == pytest.approx(1e-4)
    changes = [json.loads(line) for line in (one_step / "config_changes.jsonl").read_text().splitlines()]
    assert changes == [{"from_checkpoint": "step_00000001",
                        "changed": {"train.log_every": {"was": 1, "now": 2}, "train.max_steps": {"was": 1, "now": 2}}}]
    steps = [json.loads(line)["step"] for line in (one_step / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]


def test_a_resume_from_a_path_into_a_new_folder_is_checked_the_same_way(batches, one_step, tmp_path):
    res = train(f"data.path={batches}", f"output.dir={tmp_path / 'new'}", "train.max_steps=3",
                f"train.resume={one_step}/checkpoints/step_00000001", "optim.lr=5e-4", "train.save_every=1")
    assert res.returncode == 2, res.stderr
    assert "optim.lr: 0.0001 -> 0.0005" in res.stderr.replace("\n", " ")
    assert not (tmp_path / "new").exists()
