"""Distillation: KL(teacher || student) over each query's documents, against a hand-computed reference,
torch.autograd.gradcheck in float64, the combined loss, and 2 real gloo ranks equal to one process."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from support.trainhelpers import (
    make_prebatched,
    read_metrics,
    subprocess_env,
    tiny_model_overrides,
    train_in_process,
)

from embedctl.train.losses import InfoNCELoss, TrainingLoss, distill_loss, info_nce_from_scores, info_nce_loss


def test_hand_computed_two_queries():
    """Query 0: candidates {0, 1, 2} (labelled); query 1: {1, 2} (document 0 unknown, masked without in-batch)."""
    student = torch.tensor([[2.0, 1.0, 0.0], [5.0, 1.0, 3.0]], dtype=torch.float64)
    teacher = torch.tensor([[3.0, 1.0, 2.0], [0.0, 2.0, 2.0]], dtype=torch.float64)
    rel = torch.tensor([[1, -1, -1], [0, 1, -1]])

    def kl(s, t):
        ps = [math.exp(x) / sum(math.exp(y) for y in s) for x in s]
        pt = [math.exp(x) / sum(math.exp(y) for y in t) for x in t]
        return sum(a * (math.log(a) - math.log(b)) for a, b in zip(pt, ps, strict=True))

    want = (kl([2.0, 1.0, 0.0], [3.0, 1.0, 2.0]) + kl([1.0, 3.0], [2.0, 2.0])) / 2
    loss, n = distill_loss(student, teacher, rel)
    assert n == 2
    assert float(loss) == pytest.approx(want, rel=1e-12)
    # temperatures divide each side's scores; in-batch negatives add document 0 to query 1
    loss_t, _ = distill_loss(student, teacher, rel, student_temperature=0.5, teacher_temperature=2.0)
    want_t = (kl([4.0, 2.0, 0.0], [1.5, 0.5, 1.0]) + kl([2.0, 6.0], [1.0, 1.0])) / 2
    assert float(loss_t) == pytest.approx(want_t, rel=1e-12)
    loss_ib, _ = distill_loss(student, teacher, rel, in_batch_negatives=True)
    want_ib = (kl([2.0, 1.0, 0.0], [3.0, 1.0, 2.0]) + kl([5.0, 1.0, 3.0], [0.0, 2.0, 2.0])) / 2
    assert float(loss_ib) == pytest.approx(want_ib, rel=1e-12)


def test_equal_distributions_give_zero_and_unscored_pairs_are_left_out():
    s = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    assert float(distill_loss(s, s.clone(), torch.tensor([[1, -1, -1]]))[0]) == pytest.approx(0.0, abs=1e-15)
    teacher = torch.tensor([[1.0, float("nan"), 3.0]], dtype=torch.float64)
    a, _ = distill_loss(s, teacher, torch.tensor([[1, -1, -1]]))
    b, _ = distill_loss(s[:, [0, 2]], teacher[:, [0, 2]], torch.tensor([[1, -1]]))
    assert float(a) == pytest.approx(float(b), rel=1e-12)
    loss, n = distill_loss(s.requires_grad_(), s.detach(), torch.tensor([[1, 0, 0]]))  # one candidate: nothing
    assert n == 0 and float(loss.detach()) == 0.0
    loss.backward()


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(3)
    student = torch.randn(4, 6, generator=g, dtype=torch.float64, requires_grad=True)
    teacher = torch.randn(4, 6, generator=g, dtype=torch.float64)
    teacher[2, 1] = float("nan")
    rel = torch.randint(-1, 2, (4, 6), generator=g)
    rel[:, 0] = 1
    for ib in (False, True):
        assert torch.autograd.gradcheck(
            lambda s, ib=ib: distill_loss(s, teacher, rel, student_temperature=0.7, teacher_temperature=1.3,
                                          in_batch_negatives=ib)[0], (student,))


def test_infonce_from_scores_matches_info_nce_loss():
    g = torch.Generator().manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(5, 8, generator=g, dtype=torch.float64), dim=-1)
    d = torch.nn.functional.normalize(torch.randn(9, 8, generator=g, dtype=torch.float64), dim=-1)
    rel = torch.randint(-1, 2, (5, 9), generator=g)
    rel[0, 0] = 1
    for ib in (False, True):
        a, sa = info_nce_loss(q, d, rel, temperature=0.05, in_batch_negatives=ib)
        b, sb = info_nce_from_scores(q @ d.T, rel, temperature=0.05, in_batch_negatives=ib)
        assert float(a) == pytest.approx(float(b), rel=1e-12) and sa.rows == sb.rows


def test_combined_loss_is_the_sum_and_gradchecks():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    d = torch.randn(7, 5, generator=g, dtype=torch.float64, requires_grad=True)
    rel = torch.tensor([[1, -1, -1, 0, 0, 0, 0], [0, 0, 0, 1, -1, 0, 0], [0, 0, 0, 0, 0, 1, -1]])
    teacher = torch.randn(3, 7, generator=g, dtype=torch.float64)
    both = TrainingLoss("infonce+distill", InfoNCELoss(0.1, in_batch_negatives=False), distill_weight=0.5)
    loss, stats = both(q, d, rel, teacher=teacher)
    nce, _ = info_nce_loss(q, d, rel, temperature=0.1, in_batch_negatives=False)
    kl, _ = distill_loss(q @ d.T, teacher, rel)
    assert float(loss) == pytest.approx(float(nce) + 0.5 * float(kl), rel=1e-12)
    assert set(stats.parts) == {"infonce", "distill"}
    assert torch.autograd.gradcheck(lambda a, b: both(a, b, rel, teacher=teacher)[0], (q, d))
    only = TrainingLoss("distill", InfoNCELoss(0.1, in_batch_negatives=False))
    assert float(only(q, d, rel, teacher=teacher)[0]) == pytest.approx(float(kl), rel=1e-12)
    with pytest.raises(Exception, match="teacher"):
        only(q, d, rel, teacher=None)


def add_teacher_scores(root, seed: int = 0) -> None:
    """Rewrite each batch of a folder with seeded teacher scores for every pair, and record a teacher."""
    import json

    import fsspec

    from embedctl.data.batch_writer import write_batch
    from embedctl.data.batches import read_batch

    meta = json.loads((root / "metadata.json").read_text())
    rng = np.random.default_rng(seed)
    fs = fsspec.filesystem("file")
    for entry in meta["batches"]:
        batch = read_batch(str(root / entry["name"]))
        batch.teacher_scores = rng.normal(size=batch.relevance.shape).astype(np.float32) * 3
        entry.update(write_batch(fs, str(root / entry["name"]), batch))  # new sizes for the file records
    meta["teacher"] = {"model": "seeded random scores", "kind": "test"}
    (root / "metadata.json").write_text(json.dumps(meta))


@pytest.mark.slow
@pytest.mark.distributed
def test_two_gloo_ranks_equal_one_process(tmp_path):
    batches = make_prebatched(tmp_path / "batches", n_batches=2, queries_per_batch=4, kind="colbert")
    add_teacher_scores(batches)
    args = [f"data.path={batches}", "train.max_steps=2", "optim.lr=1e-4", "optim.eps=1e-4",
            "optim.schedule=constant", "train.save_every=0", "train.loss=infonce+distill",
            "train.distill_weight=0.5", *tiny_model_overrides("colbert")]
    single = tmp_path / "single"
    train_in_process([*args, f"output.dir={single}"])
    multi = tmp_path / "multi"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "embedctl", "train", *args, f"output.dir={multi}", "engine.name=ddp"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    a, b = read_metrics(single), read_metrics(multi)
    assert [r["step"] for r in b] == [1, 2]
    for ra, rb in zip(a, b, strict=True):
        for key in ("loss", "loss/infonce", "loss/distill"):
            assert rb[key] == pytest.approx(ra[key], rel=1e-5, abs=1e-6)
    from safetensors.torch import load_file

    wa, wb = load_file(str(single / "final/model.safetensors")), load_file(str(multi / "final/model.safetensors"))
    for name in wa:
        assert torch.allclose(wa[name], wb[name], atol=1e-5), name
