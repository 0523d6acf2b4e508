"""Before training starts: batches made for another tokenizer or model are refused (naming both), a
distilling loss without teacher scores is refused; at the end `embedctl train` prints its summary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.datahelpers import scifact_slice
from support.trainhelpers import make_prebatched, subprocess_env, tiny_model_overrides, train_in_process

from embedctl.config import load_config
from embedctl.data.pretokenize import run_pretokenize
from embedctl.errors import EmbedctlError
from embedctl.prebatch.build import run_prebatch

LENGTHS = ["model.query_max_length=16", "model.doc_max_length=32"]


@pytest.fixture(scope="module")
def biencoder_batches(module_tmp) -> Path:
    root = module_tmp("bb")
    beir = scifact_slice(root / "scifact", n_queries=6, extra_docs=2)
    run_pretokenize(load_config(None, [f"pretokenize.input={beir}", f"pretokenize.output={root}/tokens", *LENGTHS]))
    run_prebatch(load_config(None, [f"prebatch.input={root}/tokens", f"prebatch.qrels={beir}/qrels/train.tsv",
                                    f"prebatch.output={root}/batches", "prebatch.queries_per_batch=3", *LENGTHS]))
    return root / "batches"


def test_colbert_training_on_bi_encoder_batches_is_refused_naming_both(biencoder_batches, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(EmbedctlError) as err:
        train_in_process([f"data.path={biencoder_batches}", f"output.dir={out}", "train.max_steps=1",
                          "model.kind=colbert", "model.dim=16", *LENGTHS])
    msg = str(err.value)
    assert "batches made for (name_or_path=minilm, kind=biencoder" in msg
    assert "training (name_or_path=minilm, kind=colbert" in msg
    assert "kind: 'biencoder' != 'colbert'" in msg and "query_marker" in msg
    assert not out.exists()  # refused before anything was written


def test_other_lengths_are_refused_and_same_settings_pass_the_check(biencoder_batches, tmp_path):
    with pytest.raises(EmbedctlError, match="doc_max_length: 32 != 64"):
        train_in_process([f"data.path={biencoder_batches}", f"output.dir={tmp_path / 'a'}", "train.max_steps=1",
                          "model.query_max_length=16", "model.doc_max_length=64"])
    with pytest.raises(EmbedctlError, match="train.loss=distill needs teacher scores"):
        train_in_process([f"data.path={biencoder_batches}", f"output.dir={tmp_path / 'b'}", "train.max_steps=1",
                          "train.loss=distill", *LENGTHS])


def test_train_ends_with_a_summary(tmp_path):
    batches = make_prebatched(tmp_path / "batches", n_batches=2, queries_per_batch=3)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "embedctl", "train", f"data.path={batches}", f"output.dir={out}",
           "train.max_steps=2", "train.save_every=0", *tiny_model_overrides()]
    res = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    err = res.stderr
    assert "trained 2 steps in " in err and " examples/s (6 queries)" in err
    assert "loss: first " in err and ", last " in err
    assert f"metrics: {out}/metrics.jsonl" in err and f"final model: {out}/final" in err
