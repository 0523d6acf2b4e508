"""Memory planned, not killed: the estimate of a step's peak on two engines, and what the plan does with it
(keep the step, turn on GradCache with a note naming the chunk, or refuse naming the keys that fit).
bench/bench_memory.py measures the estimate against real RSS peaks."""

from __future__ import annotations

import subprocess

import pytest
from support.trainhelpers import make_prebatched, python, read_metrics, subprocess_env

from embedctl.errors import EmbedctlError
from embedctl.train.memory import GIB, ModelShape, StepShape, estimate_step, plan_step_memory

MINILM = ModelShape(params=22_713_216, hidden=384, layers=6, heads=12, intermediate=1536, out_dim=384, kind="biencoder")
STEP = StepShape(queries=64, documents=320, query_length=64, doc_length=256)
RESIDENT = 0.7 * GIB


def test_estimate_grows_with_the_batch_and_lengths():
    small = estimate_step(StepShape(16, 80, 64, 256), MINILM, resident=RESIDENT).total
    big = estimate_step(STEP, MINILM, resident=RESIDENT).total
    short = estimate_step(StepShape(64, 320, 64, 128), MINILM, resident=RESIDENT).total
    assert small < short < big
    # the newcomer's 64 x 4-negative step: killed at 20 GB of 24; the estimate says it won't fit 24
    assert big > 20 * GIB


def test_two_engines_single_and_ddp():
    single = estimate_step(STEP, MINILM, resident=RESIDENT)
    ddp = estimate_step(StepShape(64, 320, 64, 256, world=2, local_world=2), MINILM, resident=RESIDENT, engine="ddp")
    # each rank encodes half the texts, and keeps DDP's gradient buckets (4 bytes a parameter)
    assert ddp.parts["activations"] == pytest.approx(single.parts["activations"] / 2, rel=0.01)
    assert ddp.parts["states"] == pytest.approx(single.parts["states"] + 4 * MINILM.params)
    zero2 = estimate_step(StepShape(64, 320, 64, 256, world=2), MINILM, resident=RESIDENT, engine="deepspeed",
                          zero_stage=2)
    assert zero2.parts["states"] < ddp.parts["states"]


def test_grad_cache_bounds_the_activations():
    plain = estimate_step(STEP, MINILM, resident=RESIDENT)
    chunked = estimate_step(STEP, MINILM, resident=RESIDENT, grad_cache_chunk=32)
    assert chunked.parts["activations"] < plain.parts["activations"] / 5
    assert chunked.parts["states"] == plain.parts["states"]


def test_plan_keeps_turns_on_grad_cache_or_refuses():
    kw = dict(resident=RESIDENT, limit_source="allowed (train.max_memory_gb)", configured_chunk=None)
    fits = plan_step_memory(STEP, MINILM, available=64 * GIB, **kw)
    assert fits.chunk_size is None and fits.note is None
    tight = plan_step_memory(STEP, MINILM, available=6 * GIB, **kw)
    assert tight.chunk_size and tight.estimate.total <= 6 * GIB
    assert f"train.grad_cache.chunk_size={tight.chunk_size}" in tight.note and "64 queries x 320 documents" in tight.note
    with pytest.raises(EmbedctlError) as err:
        plan_step_memory(STEP, MINILM, available=0.5 * GIB, **kw)
    assert err.value.exit_code == 2 and "train.max_memory_gb" in err.value.hint and "engine.zero_stage" in err.value.hint


@pytest.mark.slow
def test_training_turns_on_grad_cache_when_max_memory_is_tight(tmp_path):
    """Real runs, each a fresh process: the plain step's estimate first (nothing changes under a generous
    train.max_memory_gb), then a limit below it that a GradCache chunk of half the texts fits: the plan
    trains with GradCache, says so naming the chunk size, and the step completes."""
    data = make_prebatched(tmp_path / "batches", n_batches=1, queries_per_batch=6, doc_max_length=192)
    base = ["data.path=" + str(data), "train.max_steps=1", "train.save_every=0", "optim.lr=1e-5", "model.dropout=0",
            "model.query_max_length=12", "model.doc_max_length=192"]

    def train(out: str, limit: float) -> str:
        done = subprocess.run([python(), "-m", "embedctl", "train", *base, f"output.dir={tmp_path / out}",
                               f"train.max_memory_gb={limit:.3f}"], capture_output=True, text=True,
                              env=subprocess_env(), timeout=600)
        assert done.returncode == 0, done.stderr
        return done.stderr

    plain = train("plain", 64)
    assert "memory plan: estimated step peak" in plain and "GradCache" not in plain
    peak = float(plain.split("estimated step peak ~")[1].split(" GiB")[0])
    acts = float(plain.split("activations ")[1].split(",")[0])
    assert acts > 0.2, plain  # enough activations for a chunk to matter
    chunked = train("chunked", peak - 0.35 * acts)
    assert "training with GradCache, train.grad_cache.chunk_size=" in chunked, chunked
    assert read_metrics(tmp_path / "chunked")[-1]["step"] == 1
