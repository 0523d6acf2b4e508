"""`embedctl index` on several gloo ranks (CPU, one thread each): the same bytes as one process, a killed rank
stops the others within a bounded time, and a rerun with another number of ranks ends with the same bytes.

The engine tests run tests/support/ranked_plaid.py (build_plaid_index with the synthetic encoder: several
sample groups, chunks encoded outside the sample); the CLI tests run `python -m torch.distributed.run ... -m
embedctl index` with the real minilm model on a SciFact slice."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from support.ledgerwatch import kill_rank
from support.scifact_slice import write_slice

from embedctl.config import load_config
from embedctl.errors import ConfigError
from embedctl.index import meta as M
from embedctl.index.plaid.ivf import build_ivf
from embedctl.index.plaid.ivf_stream import write_ivf
from embedctl.util.io import save_npy
from embedctl.util.ranks import RankEnv, Ranks, detect, first_host

REPO = Path(__file__).resolve().parents[2]
WORKER = REPO / "tests" / "support" / "ranked_plaid.py"
VOLATILE = {"versions.json", "resolved_config.yaml", "overrides.yaml"}  # versions, argv and paths of the run
FAST = ["model.doc_max_length=24", "index.batch_size=16"]


def _env(**more: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           "EMBEDCTL_PROGRESS_EVERY_S": "1000"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID"):
        env.pop(key, None)
    return {**env, **more}


def torchrun(n: int, *args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n), *args]
    return subprocess.Popen(cmd, env=env or _env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def run_ok(proc: subprocess.Popen, timeout: float = 300) -> str:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return err


def digest(folder: Path) -> dict[str, str]:
    """sha256 of every file; the metadata without what describes the run (timings, resume facts, time)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or p.name in VOLATILE:
            continue
        data = p.read_bytes()
        if p.name == "embedctl_index.json":
            meta = json.loads(data)
            for key in ("timings", "build", "created", M.SEAL_KEY):
                meta.pop(key, None)
            if isinstance(meta.get("dense"), dict):
                meta["dense"] = {k: v for k, v in meta["dense"].items() if not k.endswith("_s")}
            data = json.dumps(meta, sort_keys=True).encode()
        out[str(p.relative_to(folder))] = hashlib.sha256(data).hexdigest()
    return out


# -- rank detection and the streaming IVF (fast) ---------------------------------------------------------
def test_detect_reads_torchrun_pytorchjob_and_srun():
    assert detect({}) == RankEnv()
    tr = detect({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "29500",
                 "TORCHELASTIC_RUN_ID": "x", "TORCHELASTIC_USE_AGENT_STORE": "True"})
    assert (tr.rank, tr.world, tr.local_rank, tr.launcher, tr.agent_store) == (1, 4, 1, "torchrun", True)
    job = detect({"RANK": "3", "WORLD_SIZE": "8", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456"})
    assert (job.rank, job.world, job.launcher, job.master_addr) == (3, 8, "env", "job-master-0")
    srun = detect({"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "16", "SLURM_LOCALID": "1", "SLURM_JOB_ID": "4242",
                   "SLURM_STEP_NODELIST": "gpu[07-08,12]"})
    assert (srun.rank, srun.world, srun.local_rank, srun.master_addr, srun.master_port) == (5, 16, 1, "gpu07", 24242)
    assert detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}) == RankEnv()  # an salloc shell, no step: one process
    assert first_host("node7") == "node7" and first_host("a[1-3],b2") == "a1"
    with pytest.raises(Exception, match="MASTER_ADDR"):
        detect({"RANK": "0", "WORLD_SIZE": "2"})


def test_training_reads_the_torch_launchers_variables_only():
    """RankEnv.from_env, training's view (its process group meets through env://): RANK / WORLD_SIZE /
    LOCAL_RANK as detect reads them, never Slurm's."""
    assert RankEnv.from_env({}) == RankEnv() and RankEnv().is_main
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}
    tr = RankEnv.from_env(env)
    assert (tr.rank, tr.world, tr.local_rank, tr.is_main) == (1, 2, 1, False) and detect(env) == tr
    assert RankEnv.from_env({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}) == RankEnv()
    srun = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "MASTER_ADDR": "h", "MASTER_PORT": "29500"}
    assert RankEnv.from_env(srun) == RankEnv() and detect(srun).world == 2


def test_rank_timeouts_come_from_the_ranks_section_only(monkeypatch):
    timing = load_config(None, ["ranks.dead_s=7", "ranks.wait_s=2.5"]).cfg.ranks
    ranks = Ranks.from_env("t", {}, dead_s=timing.dead_s, wait_s=timing.wait_s)
    assert (ranks.dead_s, ranks.wait_s) == (7.0, 2.5)
    defaults = load_config(None, []).cfg.ranks
    assert (defaults.dead_s, defaults.wait_s) == (120.0, 0.0)
    monkeypatch.setenv("EMBEDCTL_RANK_DEAD_S", "3")  # the environment overrides of old are gone: no effect
    assert Ranks.from_env("t", {}, dead_s=timing.dead_s).dead_s == 7.0
    with pytest.raises(ConfigError, match="ranks.wait_s"):
        load_config(None, ["ranks.wait_s=-1"])
    with pytest.raises(ConfigError, match="ranks.dead_s"):
        load_config(None, ["ranks.dead_s=0"])


def test_streaming_ivf_writes_the_bytes_of_the_in_memory_ivf(tmp_path):
    rng = np.random.default_rng(0)
    for trial in range(4):
        n, c = int(rng.integers(1, 400)), int(rng.integers(1, 50))
        doclens, chunks, lo, size = rng.integers(0, 15, n), [], 0, int(rng.integers(1, 90))
        while lo < n:
            d = doclens[lo:lo + size]
            chunks.append((rng.integers(0, c, int(d.sum())).astype(np.int32), d, lo))
            lo += size
        ivf, lengths = build_ivf(iter(chunks), c, n)
        save_npy(tmp_path / "a.npy", ivf)
        save_npy(tmp_path / "al.npy", lengths)
        assert write_ivf(lambda chunks=chunks: iter(chunks), c, n, tmp_path / "b.npy", tmp_path / "bl.npy") == len(ivf)
        assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "b.npy").read_bytes(), trial
        assert (tmp_path / "al.npy").read_bytes() == (tmp_path / "bl.npy").read_bytes(), trial


# -- the engine under torchrun (synthetic encoder) ---------------------------------------------------------
@pytest.fixture(scope="module")
def engine_reference(module_tmp):
    out = module_tmp("engine") / "one"
    run_ok(torchrun(1, str(WORKER), str(out)))
    return digest(out)


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 3])
def test_engine_on_n_ranks_writes_the_bytes_of_one(engine_reference, tmp_path, ranks):
    run_ok(torchrun(ranks, str(WORKER), str(tmp_path / "idx")))
    assert digest(tmp_path / "idx") == engine_reference


@pytest.mark.slow
def test_killed_rank_stops_the_others_then_another_world_size_resumes(engine_reference, tmp_path):
    """Plain processes (what srun starts; no launcher to stop the others): rank 1 kills itself with SIGKILL in
    its second chunk; rank 0 notices the silent heartbeat and exits 1 naming it; 3 ranks then finish it."""
    out = tmp_path / "idx"
    base = _env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29700 + os.getpid() % 200), WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(out), "2", "ranks.dead_s=3"], env={**base, "RANK": str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    try:
        _, err1 = procs[1].communicate(timeout=120)
        assert procs[1].returncode == -signal.SIGKILL, err1[-2000:]
        killed_at = time.monotonic()
        _, err = procs[0].communicate(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert procs[0].returncode == 1, err[-2000:]
    assert time.monotonic() - killed_at < 30  # 3 s of silence + at most one chunk + the exit
    assert "rank 1 of 2 stopped responding" in err and "rerun the same command" in err
    assert not out.exists() and (tmp_path / ".idx.building" / "ledger.json").is_file()
    run_ok(torchrun(3, str(WORKER), str(out)))
    assert digest(out) == engine_reference


# -- embedctl index under torchrun (real minilm) -----------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(module_tmp, scifact):
    work = module_tmp("ranks-cli")
    return work, write_slice(scifact, work / "data", num_docs=1100, num_queries=5)["corpus"]


def index_cmd(corpus: Path, root: Path, *extra: str) -> list[str]:
    return ["-m", "embedctl", "index", "--collection", str(corpus), "--root", str(root), "--name", "sf", *FAST,
            *extra]


PLAID = ["model.kind=colbert", "index.chunk_size=128"]


@pytest.fixture(scope="module")
def plaid_reference(corpus):
    work, coll = corpus
    run_ok(torchrun(1, *index_cmd(coll, work / "one", *PLAID)))
    return digest(work / "one" / "sf")


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 3])
def test_plaid_index_on_n_ranks_is_byte_identical(plaid_reference, corpus, tmp_path, ranks):
    work, coll = corpus
    err = run_ok(torchrun(ranks, *index_cmd(coll, tmp_path, *PLAID)))
    assert f"rank 1 of {ranks}: done" in err
    assert digest(tmp_path / "sf") == plaid_reference
    # the run record has every rank's encoding (what bench_scale.py's throughput is computed from)
    per_rank = json.loads((tmp_path / "sf" / "embedctl_index.json").read_text())["build"]["ranks"]
    one = json.loads((work / "one" / "sf" / "embedctl_index.json").read_text())["build"]
    assert len(per_rank) == ranks and all(r["encode_s"] >= 0 for r in per_rank)
    assert sum(r["encoded_docs"] for r in per_rank) == one["encoded_docs"] and "ranks" not in one


@pytest.mark.slow
def test_dense_index_on_3_ranks_is_byte_identical(corpus, tmp_path):
    _, coll = corpus  # 1100 documents: three dense chunks of 512; 4 lists: faiss trains on a seeded 1024 of them
    extra = ["index.dense_type=ivf", "index.ivf_nlist=4"]
    run_ok(torchrun(1, *index_cmd(coll, tmp_path / "one", *extra)))
    run_ok(torchrun(3, *index_cmd(coll, tmp_path / "three", *extra)))
    assert digest(tmp_path / "three" / "sf") == digest(tmp_path / "one" / "sf")


@pytest.mark.slow
def test_kill_9_of_a_rank_under_torchrun_then_one_rank_resumes(plaid_reference, corpus, tmp_path):
    _, coll = corpus
    proc = torchrun(2, *index_cmd(coll, tmp_path, *PLAID))
    spilled = tmp_path / ".sf.building" / "_work" / "sample.00001.f16.npy"  # rank 1's sample group
    deadline = time.monotonic() + 180
    while not spilled.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert spilled.exists(), proc.stderr.read()[-3000:] if proc.poll() is not None else "timed out"
    exited_after = kill_rank(proc, 1, timeout=90)
    assert proc.returncode != 0 and exited_after < 90
    assert not (tmp_path / "sf").exists()
    run_ok(torchrun(1, *index_cmd(coll, tmp_path, *PLAID)))
    assert digest(tmp_path / "sf") == plaid_reference
