"""A rank-0-only phase (evaluation, checkpoint or final save) longer than the collective timeout never kills
a 2-rank job (issue 18, section 4).

The cause was two things: rank 1 skipped the evaluation phase (it holds no eval set) and so paired its
barriers with the wrong ones of rank 0 (writing into a checkpoint folder rank 0 had not made, exiting while
rank 0 still waited: gloo "Connection closed by peer"); and every wait used a collective barrier bounded by
the process group's timeout (deepspeed's default: 10 minutes). Now every rank enters every phase (decided
from the config), and ``embedctl.train.distributed.barrier`` waits in the launcher's store with no limit,
naming both places when ranks reach different ones. ``engine.timeout_s`` keeps these tests short.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from support.datahelpers import scifact_dir
from support.scifact_slice import write_slice
from support.trainhelpers import REPO, make_prebatched, read_metrics, subprocess_env, tiny_model_overrides

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

TIMEOUT_S = 2  # engine.timeout_s here: rank 0's phases below take longer

PHASES = textwrap.dedent("""
    import sys, time
    from datetime import timedelta
    import torch, torch.distributed as dist
    from embedctl.errors import EmbedctlError
    from embedctl.train.distributed import barrier
    mode, timeout = sys.argv[1], float(sys.argv[2])
    dist.init_process_group("gloo", timeout=timedelta(seconds=timeout))
    rank = dist.get_rank()
    if mode == "mismatch":
        try:
            barrier("evaluation done" if rank == 0 else "checkpoint saved")
        except EmbedctlError as err:
            print(f"rank {rank}: {err}", flush=True)
            sys.exit(3)
    if rank == 0:
        time.sleep(2.5 * timeout)  # a rank-0-only phase (evaluation, a save) longer than the timeout
    if mode == "collective":
        dist.barrier()  # what the loop used before: bounded by the timeout
    else:
        barrier("phase done")
    t = torch.ones(1)
    dist.all_reduce(t)  # the group is still healthy afterwards
    assert t.item() == 2.0
    barrier("close")
    dist.destroy_process_group()
    print(f"rank {rank} ok", flush=True)
""")


def _torchrun(args, timeout=600):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=subprocess_env(), timeout=timeout, cwd=REPO)


@pytest.fixture(scope="module")
def phases_script(module_tmp):
    path = module_tmp("phases") / "phases.py"
    path.write_text(PHASES)
    return path


def test_store_barrier_outlasts_the_collective_timeout(phases_script):
    res = _torchrun([str(phases_script), "store", str(TIMEOUT_S)])
    assert res.returncode == 0, res.stderr[-3000:]
    assert "rank 0 ok" in res.stdout and "rank 1 ok" in res.stdout


def test_collective_barrier_is_what_the_timeout_kills(phases_script):
    """The control: the same phase with a collective barrier dies, so the test above measures the fix."""
    res = _torchrun([str(phases_script), "collective", str(TIMEOUT_S)])
    assert res.returncode != 0
    assert "rank 1 ok" not in res.stdout


def test_ranks_at_different_points_fail_naming_both(phases_script):
    res = _torchrun([str(phases_script), "mismatch", str(TIMEOUT_S)])
    assert res.returncode != 0
    for rank in (0, 1):
        assert f"rank {rank}: the training ranks reached different synchronisation points" in res.stdout
    assert "rank 0 at evaluation done, rank 1 at checkpoint saved" in res.stdout


@pytest.fixture(scope="module")
def train_inputs(module_tmp):
    root = module_tmp("rank0")
    batches = make_prebatched(root / "batches", n_batches=2, queries_per_batch=4)
    paths = write_slice(scifact_dir(), root / "eval", num_docs=600, num_queries=10)
    (root / "eval" / "qrels").mkdir()
    paths["qrels"].rename(root / "eval" / "qrels" / "test.tsv")
    return root, batches


@pytest.mark.parametrize("engine", ["ddp", "deepspeed"])
def test_training_with_rank0_evaluation_longer_than_the_timeout(train_inputs, engine):
    if engine == "deepspeed":
        pytest.importorskip("deepspeed")
    root, batches = train_inputs
    out = root / f"out_{engine}"
    res = _torchrun(["-m", "embedctl", "train", f"data.path={batches}", f"output.dir={out}", "train.max_steps=2",
                     "train.save_every=1", f"engine.name={engine}", f"engine.timeout_s={TIMEOUT_S}",
                     f"eval.path={root / 'eval'}", "eval.every=1", *tiny_model_overrides()])
    assert res.returncode == 0, res.stderr[-4000:]
    records = read_metrics(out)
    assert [r["step"] for r in records] == [1, 2]
    for r in records:  # evaluated after each step, on rank 0 alone, for longer than engine.timeout_s
        assert 0 < r["eval/nDCG@10"] <= 1
        assert r["eval_time_s"] > TIMEOUT_S, r
    assert (out / "final" / "model.safetensors").is_file()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000001", "step_00000002"]
