"""2 real CPU ranks (torchrun, gloo) give the loss and parameters of one process on the same global batch.

Each rank encodes its slice, all-gathers embeddings and back-propagates the global loss through its slice;
the engine undoes DDP's / DeepSpeed's gradient averaging. AdamW's eps is raised to 1e-4 here so that
parameters whose true gradient is zero (attention key biases) but whose computed gradient is float noise
of different sign in the two set-ups are not pushed by +-lr (Adam normalises any gradient to ~1).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from support.trainhelpers import (
    make_prebatched,
    read_metrics,
    subprocess_env,
    tiny_model_overrides,
    train_in_process,
)

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


@pytest.fixture(scope="module")
def setup(module_tmp):
    root = module_tmp("dist")
    batches = make_prebatched(root / "batches", n_batches=2, queries_per_batch=5)
    single = root / "single"
    train_in_process(_args(batches, single))
    return root, batches, single


def _args(batches, out, *extra):
    return [f"data.path={batches}", f"output.dir={out}", "train.max_steps=2", "optim.lr=1e-4", "optim.eps=1e-4",
            "optim.schedule=constant", "train.save_every=0", *tiny_model_overrides(), *extra]


def _torchrun(batches, out, *extra):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "embedctl", "train", *_args(batches, out, *extra)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    return res


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _assert_same_run(single, multi):
    a, b = read_metrics(single), read_metrics(multi)
    assert [r["step"] for r in b] == [1, 2]
    for ra, rb in zip(a, b, strict=True):
        assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-5, abs=1e-6)
    wa, wb = _weights(single / "final"), _weights(multi / "final")
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=2e-6, msg=k)
    start = _weights_start()
    moved = sum(int(not torch.equal(wa[k], start[k])) for k in wa if k in start)
    assert moved > 10  # the step really changed the parameters


_START: dict = {}


def _weights_start():
    if not _START:
        from safetensors.torch import load_file

        from embedctl.models.hub import resolve_model_path

        _START.update(load_file(resolve_model_path("minilm") + "/model.safetensors"))
    return _START


def test_ddp_two_ranks_equal_one_process(setup):
    root, batches, single = setup
    out = root / "ddp"
    _torchrun(batches, out, "engine.name=ddp")
    _assert_same_run(single, out)


def test_deepspeed_zero1_two_ranks_equal_one_process_and_resume_exactly(setup):
    pytest.importorskip("deepspeed")
    root, batches, single = setup
    out = root / "ds"
    _torchrun(batches, out, "engine.name=deepspeed", "engine.zero_stage=1", "train.save_every=1")
    _assert_same_run(single, out)
    # exact resume with per-rank ZeRO-1 optimizer partitions and RNG states
    resumed = root / "ds_resumed"
    _torchrun(batches, resumed, "engine.name=deepspeed", "engine.zero_stage=1",
              f"train.resume={out}/checkpoints/step_00000001")
    assert [r["loss"] for r in read_metrics(resumed)] == [r["loss"] for r in read_metrics(out)[1:]]


def test_single_engine_refuses_several_ranks(setup):
    root, batches, _ = setup
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "embedctl", "train", *_args(batches, root / "bad")]
    res = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert res.returncode != 0 and "engine.name=single" in res.stderr


@pytest.mark.parametrize("engine", ["ddp", "deepspeed"])
def test_grad_cache_two_ranks_equal_one_process_plain(setup, engine):
    """GradCache over 2 ranks (DDP no_sync / DeepSpeed accumulation boundary on all but the last chunk)."""
    if engine == "deepspeed":
        pytest.importorskip("deepspeed")
    root, batches, single = setup
    out = root / f"gc_{engine}"
    _torchrun(batches, out, f"engine.name={engine}", "train.grad_cache.chunk_size=2")
    _assert_same_run(single, out)
