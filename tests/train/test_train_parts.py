"""Fast unit tests of the training parts: schedules, AdamW groups, precision fallback, slicing, resume plans."""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pytest
import torch

from embedctl.config.sections.train import OptimConfig
from embedctl.errors import EmbedctlError
from embedctl.train.checkpoint import plan_resume
from embedctl.train.distributed import gather_with_grad, slice_bounds
from embedctl.train.optim import WarmupSchedule, build_optimizer, build_scheduler, param_groups
from embedctl.train.runtime import autocast_dtype, capture_rng, restore_rng


def test_schedules():
    lin, cos, const = (WarmupSchedule(10, 110, k) for k in ("linear", "cosine", "constant"))
    assert [lin(s) for s in (0, 5, 10, 60, 110, 200)] == [0.0, 0.5, 1.0, 0.5, 0.0, 0.0]
    assert cos(60) == pytest.approx(0.5) and cos(10) == 1.0 and cos(110) == pytest.approx(0.0)
    assert const(5) == 0.5 and const(1000) == 1.0
    assert WarmupSchedule(0, 4, "linear")(0) == 1.0


def test_scheduler_lr_per_step_and_state_dict_is_plain():
    model = torch.nn.Linear(2, 2)
    opt = build_optimizer(model, OptimConfig(lr=1.0, warmup_steps=2, schedule="linear"))
    sched = build_scheduler(opt, OptimConfig(lr=1.0, warmup_steps=2, schedule="linear"), max_steps=4)
    lrs = []
    for _ in range(4):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == [0.0, 0.5, 1.0, 0.5]
    assert sched.state_dict()["lr_lambdas"][0] == {"warmup": 2, "total": 4, "kind": "linear"}


def test_no_weight_decay_on_bias_and_norm():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3))
    groups = param_groups(model, 0.1)
    decayed = {id(p) for p in groups[0]["params"]}
    assert groups[0]["weight_decay"] == 0.1 and groups[1]["weight_decay"] == 0.0
    assert decayed == {id(model[0].weight)}


def test_precision_fallbacks_warn():
    cpu = torch.device("cpu")
    assert autocast_dtype(cpu, "fp32") is None
    assert autocast_dtype(cpu, "bf16") == torch.bfloat16
    with pytest.warns(UserWarning, match="fp16 needs a GPU"):
        assert autocast_dtype(cpu, "fp16") is None


def test_rng_capture_restore_roundtrip():
    state = capture_rng()
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    restore_rng(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == a


def test_slice_bounds_cover_contiguously():
    for n in range(1, 12):
        for world in range(1, 5):
            parts = [slice_bounds(n, r, world) for r in range(world)]
            assert parts[0][0] == 0 and parts[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(parts, parts[1:], strict=False))
            assert max(e - s for s, e in parts) - min(e - s for s, e in parts) <= 1


def test_gather_single_process_is_identity():
    x = torch.randn(3, 4, requires_grad=True)
    assert gather_with_grad(x) is x


def test_resume_plans(tmp_path):
    out = tmp_path / "run"
    assert plan_resume("auto", out, False).checkpoint is None
    assert plan_resume("never", out, False).checkpoint is None
    with pytest.raises(EmbedctlError, match="must"):
        plan_resume("must", out, False)
    ck = out / "checkpoints" / "step_00000004"
    ck.mkdir(parents=True)
    (ck / "trainer_state.json").write_text("{}")
    (out / "checkpoints" / "step_00000006").mkdir()  # incomplete (no trainer_state.json): ignored
    assert plan_resume("auto", out, False).checkpoint == ck
    assert plan_resume("must", out, False).checkpoint == ck
    with pytest.raises(EmbedctlError, match="already holds another run"):
        plan_resume("never", out, False)
    plan = plan_resume("never", out, True)
    assert plan.checkpoint is None and plan.clear
    other = tmp_path / "other"
    assert plan_resume(str(ck), other, False).checkpoint == ck


def test_info_nce_temperature_scale():
    from embedctl.train.losses import info_nce_loss

    q = torch.tensor([[1.0, 0.0]])
    d = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    loss, _ = info_nce_loss(q, d, torch.tensor([[1, 0]]), temperature=0.5)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-2.0)))


def test_no_warning_on_fp32():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        autocast_dtype(torch.device("cpu"), "fp32")
