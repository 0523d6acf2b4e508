"""`embedctl train` on one process: outputs, metrics.jsonl, eval, refusal cases, schedules, ColBERT."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from support.datahelpers import scifact_slice
from support.trainhelpers import (
    make_prebatched,
    python,
    read_metrics,
    subprocess_env,
    tiny_model_overrides,
    train_in_process,
)

from embedctl.errors import EmbedctlError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def batches(module_tmp) -> Path:
    return make_prebatched(module_tmp("data") / "batches", n_batches=3, queries_per_batch=4)


def _args(batches: Path, out: Path, *extra: str) -> list[str]:
    return [f"data.path={batches}", f"output.dir={out}", "train.max_steps=3", "train.save_every=2",
            "optim.warmup_steps=1", *tiny_model_overrides(), *extra]


def test_single_run_writes_metrics_checkpoints_final_and_run_info(batches, tmp_path):
    out = tmp_path / "run"
    train_in_process(_args(batches, out))
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all({"loss", "lr", "examples_per_s"} <= r.keys() for r in rows)
    assert rows[0]["lr"] == 0.0 and rows[1]["lr"] == pytest.approx(2e-5)  # warmup 1 step, then linear decay
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in rows)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000002", "step_00000003"]
    for name in ("resolved_config.yaml", "versions.json", "overrides.yaml"):
        assert (out / name).is_file()
    state = json.loads((out / "checkpoints" / "step_00000002" / "trainer_state.json").read_text())
    assert state["step"] == 2 and state["data"]["index"] == 2
    from embedctl.config.sections.model import ModelConfig
    from embedctl.models.encoder import load_encoder

    enc = load_encoder(ModelConfig(name_or_path=str(out / "final"), query_max_length=12, doc_max_length=24))
    assert enc.encode_queries(["cells"]).shape == (1, 384)


def test_refuses_an_output_dir_holding_another_run(batches, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    with pytest.raises(EmbedctlError, match="already holds another run"):
        train_in_process(_args(batches, out, "train.resume=never"))
    with pytest.raises(EmbedctlError, match="already holds another run"):
        train_in_process(_args(batches, out, "train.resume=auto"))
    assert (out / "metrics.jsonl").read_text() == '{"step": 1, "loss": 1.0}\n'  # untouched


def test_resume_must_without_checkpoint_and_bad_resume_path(batches, tmp_path):
    with pytest.raises(EmbedctlError, match="train.resume=must"):
        train_in_process(_args(batches, tmp_path / "a", "train.resume=must"))
    with pytest.raises(EmbedctlError, match="not a step checkpoint folder") as caught:
        train_in_process(_args(batches, tmp_path / "b", f"train.resume={tmp_path}"))
    assert caught.value.exit_code == 2  # a value naming nothing usable is bad usage (`--resume later`)


def test_overwrite_replaces_previous_run(batches, tmp_path):
    out = tmp_path / "run"
    (out / "checkpoints" / "step_00000009").mkdir(parents=True)
    (out / "metrics.jsonl").write_text('{"step": 9}\n')
    (out / "resolved_config.yaml").write_text("train:\n  max_steps: 9\n")  # a run folder embedctl wrote
    train_in_process(_args(batches, out, "train.resume=never", "output.overwrite=true", "train.max_steps=1"))
    assert [r["step"] for r in read_metrics(out)] == [1]
    assert not (out / "checkpoints" / "step_00000009").exists()


def test_eval_during_training_logs_ndcg_recall_mrr(batches, tmp_path):
    beir = scifact_slice(tmp_path / "beir", n_queries=4, extra_docs=10, split="train")
    out = tmp_path / "run"
    train_in_process(_args(batches, out, f"eval.path={beir}", "eval.split=train", "eval.every=2",
                           "train.max_steps=2", "train.log_every=5"))
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [2]
    for key in ("eval/nDCG@10", "eval/Recall@100", "eval/MRR@10"):
        assert 0.0 <= rows[0][key] <= 1.0
    assert rows[0]["eval/Recall@100"] == 1.0  # the whole (tiny) corpus is ranked


def test_colbert_trains_and_loss_decreases(tmp_path):
    batches = make_prebatched(tmp_path / "cb", n_batches=1, queries_per_batch=4, kind="colbert")
    out = tmp_path / "run"
    train_in_process([f"data.path={batches}", f"output.dir={out}", "train.max_steps=3", "optim.lr=1e-3",
                      "optim.schedule=constant", "train.temperature=1.0", *tiny_model_overrides("colbert")])
    losses = [r["loss"] for r in read_metrics(out)]
    assert losses[-1] < losses[0]
    assert (out / "final" / "embedctl_model.json").is_file()


def test_cli_reports_missing_data_path_without_traceback(tmp_path):
    res = subprocess.run([python(), "-m", "embedctl", "train", f"output.dir={tmp_path / 'o'}"],
                         capture_output=True, text=True, env=subprocess_env(), timeout=120)
    assert res.returncode == 1
    assert "data.path is not set" in res.stderr and "Traceback" not in res.stderr


def test_cli_trains_one_step(batches, tmp_path):
    out = tmp_path / "cli"
    res = subprocess.run([python(), "-m", "embedctl", "train", *_args(batches, out, "train.max_steps=1")],
                         capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (out / "final").is_dir() and [r["step"] for r in read_metrics(out)] == [1]


def test_bad_data_path_fails_before_writing_anything(tmp_path):
    from embedctl.errors import InputError

    out = tmp_path / "run"
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="metadata.json"):
        train_in_process([f"data.path={tmp_path / 'empty'}", f"output.dir={out}", *tiny_model_overrides()])
    assert not out.exists()
