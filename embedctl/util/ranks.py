"""Several processes on one job (index, prebatch, train): who am I, and waiting for the others without a collective.

The launcher sets the rank and world size; this module reads them (:func:`detect`; training reads the torch
launchers' variables only, :meth:`RankEnv.from_env`, since its process group meets through them):

- ``torchrun`` / ``python -m torch.distributed.run`` (and a Kubernetes PyTorchJob that starts torchrun):
  ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``; the key-value store is the
  launcher agent's (``TORCHELASTIC_USE_AGENT_STORE``), so it outlives any one rank;
- a Kubernetes PyTorchJob without torchrun: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` (no
  ``LOCAL_RANK``: one process per pod);
- Slurm ``srun``: ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS`` (or ``SLURM_NTASKS`` inside a step),
  ``SLURM_LOCALID``; ``MASTER_ADDR`` defaults to the step's first node, ``MASTER_PORT`` to 20000 + the job
  id mod 20000. A plain ``salloc`` shell (no step) is one process.

:class:`Ranks` joins a gloo process group (``NCCL`` refuses two ranks on one GPU; nothing here moves
tensors) and coordinates through the group's TCP key-value store only: a rank that waits for another
(rank 0's k-means, a barrier) polls the store, with no collective and so no collective timeout, and
watches the others' heartbeats (a counter each rank's background thread bumps every few seconds). A
rank whose counter stops for ``dead_s`` seconds (config ``ranks.dead_s``, default 120) is dead: the waiters
raise :class:`RankFailure` naming it. A rank that fails with an error posts it (``abort``), so the others
stop at their next check with that message; ``wait_s`` (config ``ranks.wait_s``, default 0: none) bounds
any single wait. The config (file or ``ranks.dead_s=...`` overrides) is the one way to set both.
Work is split by claiming indices from a store counter (:meth:`Ranks.claims`): which rank does a chunk
never changes what the chunk holds, so outputs do not depend on the number of ranks.

Example::

    with Ranks.from_env("index", dead_s=30) as ranks:   # world 1 without a launcher: every call is trivial
        for i in ranks.claims("chunks", num_chunks):
            ...                                   # each chunk once, by whichever rank claims it
        ranks.barrier("chunks")
        if ranks.is_lead: ...
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from embedctl.errors import EmbedctlError

RESUME_HINT = "rerun the same command (with any number of ranks): finished chunks are kept"
_POLL_MAX_S = 0.2


class RankFailure(EmbedctlError):
    """Another rank died or failed, or this one was stopped by the launcher: the run cannot finish."""


@dataclass(frozen=True)
class RankEnv:
    """Where this process sits, as the launcher said."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    launcher: str = "single"  # single | torchrun | env (PyTorchJob) | slurm
    master_addr: str | None = None
    master_port: int | None = None
    agent_store: bool = False  # torchrun: the store lives in the launcher's agent, not in rank 0

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes what the ranks share (run folder, checkpoints, logs)."""
        return self.rank == 0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RankEnv:
        """The torch launchers' variables only (torchrun, deepspeed, a PyTorchJob): ``RANK``, ``WORLD_SIZE``,
        ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, the ones torch.distributed's ``env://`` rendezvous
        reads; one process when they are absent. Training's view: its process group meets through these, so
        under Slurm it runs torchrun per node (docs/training.md). :func:`detect` also reads Slurm's."""
        env = os.environ if env is None else env
        if not env.get("WORLD_SIZE") or env.get("RANK") is None:
            return cls()
        if int(env["WORLD_SIZE"]) <= 1:
            return cls(int(env["RANK"]), 1, int(env.get("LOCAL_RANK", 0)))
        agent = env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
        launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env or "LOCAL_RANK" in env else "env"
        return _checked(cls(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", 0)), launcher,
                            env.get("MASTER_ADDR"), int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else None,
                            agent))


def first_host(nodelist: str) -> str:
    """First host of a Slurm node list: ``gpu[03-05,9],cpu1`` -> ``gpu03``; ``node7`` -> ``node7``."""
    head = re.match(r"([^,\[]+)(\[([^\]]+)\])?", nodelist.strip())
    if head is None:
        raise EmbedctlError(f"cannot read the Slurm node list {nodelist!r}", hint="set MASTER_ADDR to the first node")
    prefix, ranges = head.group(1), head.group(3)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def detect(env: Mapping[str, str] | None = None) -> RankEnv:
    """The launcher's rank and world size (a single process when none is found): the torch launchers'
    (:meth:`RankEnv.from_env`), else Slurm's; see the module doc."""
    env = os.environ if env is None else env
    torch_launched = RankEnv.from_env(env)
    if torch_launched.world > 1:
        return torch_launched
    if env.get("SLURM_PROCID") is not None and (env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_STEPID")):
        world = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or 1)
        if world <= 1:
            return RankEnv()
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "127.0.0.1"
        port = env.get("MASTER_PORT") or str(20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000)
        return _checked(RankEnv(int(env["SLURM_PROCID"]), world, int(env.get("SLURM_LOCALID", 0)), "slurm",
                                env.get("MASTER_ADDR") or first_host(nodes), int(port)))
    return RankEnv()


def _checked(info: RankEnv) -> RankEnv:
    """``info`` when its rank fits its world and it names a place to meet; else an error saying what is missing."""
    if not 0 <= info.rank < info.world:
        raise EmbedctlError(f"rank {info.rank} is not in [0, {info.world}) ({info.launcher} environment)",
                            hint="check the launcher's RANK / WORLD_SIZE (or SLURM_PROCID / SLURM_NTASKS)", exit_code=2)
    if not info.master_addr or not info.master_port:
        raise EmbedctlError(f"{info.world} ranks but no MASTER_ADDR / MASTER_PORT to meet at",
                            hint="launch with torchrun, or export MASTER_ADDR=<first node> MASTER_PORT=<free port>",
                            exit_code=2)
    return info


class Ranks:
    """Coordination of the ranks of one command; one rank (``Ranks.single()``) when there is no launcher."""

    def __init__(self, info: RankEnv, namespace: str = "run", *, dead_s: float = 120.0, wait_s: float = 0.0):
        self.info, self.rank, self.world = info, info.rank, info.world
        self.is_lead = self.rank == 0
        self.ns = namespace
        self.dead_s, self.wait_s = float(dead_s), float(wait_s)  # ranks.dead_s / ranks.wait_s, checked by the config
        self.store: Any = None
        self._beat_stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._seen: dict[int, tuple[int, float]] = {}
        self._last_check = 0.0
        self._old_term: Any = None
        self._group = False

    # -- life ------------------------------------------------------------------------------------------
    @classmethod
    def single(cls) -> Ranks:
        return cls(RankEnv())

    @classmethod
    def from_env(cls, namespace: str, env: Mapping[str, str] | None = None, *, dead_s: float = 120.0,
                 wait_s: float = 0.0) -> Ranks:
        """The launcher's ranks (:func:`detect`); ``dead_s`` / ``wait_s`` come from the config's ``ranks``
        section."""
        return cls(detect(env), namespace, dead_s=dead_s, wait_s=wait_s)

    def __enter__(self) -> Ranks:
        if self.world > 1:
            self._join()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if self.world > 1 and self.store is not None:
                if exc is not None and not isinstance(exc, RankFailure):
                    self.fail(f"rank {self.rank} failed: {type(exc).__name__}: {exc}".splitlines()[0])
                elif exc is None:
                    self._try(lambda: self.store.set(self._key(f"exit/{self.rank}"), "ok"))
        finally:
            self.close()

    def _join(self) -> None:
        import torch.distributed as dist

        info = self.info
        prefix = (f"embedctl/{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}/"
                  f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{self.ns}")
        try:
            self.store = dist.PrefixStore(prefix, self._connect(master=self.is_lead and not info.agent_store))
            if not dist.is_initialized():  # the start rendezvous: every rank is there before any work
                dist.init_process_group("gloo", store=dist.PrefixStore("pg", self.store), rank=self.rank,
                                        world_size=self.world)
                self._group = True
        except RankFailure:
            raise
        except Exception as exc:
            raise RankFailure(f"rank {self.rank} of {self.world} could not meet the others at "
                              f"{info.master_addr}:{info.master_port}: {exc}".splitlines()[0],
                              hint="check MASTER_ADDR / MASTER_PORT and that every rank was started") from exc
        beat_store = dist.PrefixStore(prefix, self._connect(master=False))
        self._beat = threading.Thread(target=self._heartbeat, args=(beat_store,), name="rank-heartbeat", daemon=True)
        self._beat.start()
        if threading.current_thread() is threading.main_thread():
            self._old_term = signal.signal(signal.SIGTERM, self._on_term)

    def _connect(self, master: bool):
        from datetime import timedelta

        import torch.distributed as dist

        return dist.TCPStore(self.info.master_addr, int(self.info.master_port), None, master,
                             timedelta(seconds=max(60.0, self.dead_s)), wait_for_workers=False)

    def close(self) -> None:
        self._beat_stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
            self._beat = None
        if self._old_term is not None:
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None
        if self._group:
            import torch.distributed as dist

            dist.destroy_process_group()
            self._group = False

    def _on_term(self, signum, frame) -> None:
        raise RankFailure(f"rank {self.rank}: stopped by the launcher (SIGTERM), most likely because another rank "
                          "failed (the launcher's log names it)", hint=RESUME_HINT)

    def _heartbeat(self, store) -> None:
        every = max(0.05, min(5.0, self.dead_s / 6))
        key = self._key(f"hb/{self.rank}")
        while not self._beat_stop.is_set():
            try:
                store.add(key, 1)
            except Exception:  # the store is gone: the main thread notices on its next call
                return
            self._beat_stop.wait(every)

    # -- store ---------------------------------------------------------------------------------------
    def _key(self, name: str) -> str:
        return name

    def _try(self, op):
        try:
            return op()
        except RankFailure:
            raise
        except Exception as exc:
            where = "the launcher's agent" if self.info.agent_store else "rank 0"
            raise RankFailure(f"rank {self.rank}: lost the coordination store at {self.info.master_addr}:"
                              f"{self.info.master_port} ({where} holds it: it has died or the network failed): "
                              f"{exc}".splitlines()[0], hint=RESUME_HINT) from exc

    def fail(self, message: str) -> None:
        """Tell every rank to stop with ``message`` (the first failure posted wins)."""
        if self.world > 1 and self.store is not None:
            try:
                self.store.compare_set(self._key("abort"), "", message)
            except Exception:  # the store is gone too: the others notice that themselves
                pass

    def check(self, force: bool = False) -> None:
        """Raise RankFailure when a rank posted a failure or stopped beating (at most once a second unless
        ``force``)."""
        if self.world == 1:
            return
        now = time.monotonic()
        if not force and now - self._last_check < min(1.0, self.dead_s / 4):
            return
        self._last_check = now
        if self._try(lambda: self.store.check([self._key("abort")])):
            message = self._try(lambda: self.store.get(self._key("abort"))).decode()
            raise RankFailure(f"rank {self.rank} stops: {message}", hint=RESUME_HINT)
        for r in range(self.world):
            if r == self.rank or self._try(lambda r=r: self.store.check([self._key(f"exit/{r}")])):
                continue
            count = int(self._try(lambda r=r: self.store.add(self._key(f"hb/{r}"), 0)))
            seen = self._seen.get(r)
            if seen is None or seen[0] != count:
                self._seen[r] = (count, now)
            elif now - seen[1] > self.dead_s:
                message = (f"rank {r} of {self.world} stopped responding for {now - seen[1]:.0f} s (killed, out of "
                           "memory, or its node is down)")
                self.fail(message)
                raise RankFailure(f"rank {self.rank} stops: {message}", hint=RESUME_HINT)

    def _wait(self, done, what: str):
        """Poll ``done()`` until it returns a non-None value, checking the others; bounded by wait_s."""
        started, pause = time.monotonic(), 0.001
        while True:
            value = done()
            if value is not None:
                return value
            self.check()
            if self.wait_s and time.monotonic() - started > self.wait_s:
                message = f"rank {self.rank} waited {self.wait_s:.0f} s for {what} (ranks.wait_s)"
                self.fail(message)
                raise RankFailure(message, hint="raise ranks.wait_s (0: no bound); " + RESUME_HINT)
            time.sleep(pause)
            pause = min(pause * 2, _POLL_MAX_S)

    # -- coordination --------------------------------------------------------------------------------
    def publish(self, name: str, value: str = "") -> None:
        """Rank 0 says ``name`` is ready (with ``value``)."""
        if self.world > 1:
            self._try(lambda: self.store.set(self._key(f"pub/{name}"), value))

    def wait_for(self, name: str) -> str:
        """Wait until rank 0 publishes ``name``; returns its value (rank 0 itself must not call this)."""
        if self.world == 1:
            raise AssertionError("wait_for with one rank")
        key = self._key(f"pub/{name}")

        def ready():
            if self._try(lambda: self.store.check([key])):
                return self._try(lambda: self.store.get(key)).decode()
            return None

        return self._wait(ready, f"rank 0 ({name})")

    def lead_decides(self, name: str, value: str) -> str:
        """Rank 0's ``value`` on every rank (what rank 0 saw decides: the ranks never disagree)."""
        if self.world == 1:
            return value
        if self.is_lead:
            self.publish(name, value)
            return value
        return self.wait_for(name)

    def barrier(self, name: str) -> None:
        """Every rank waits until all have arrived at ``name`` (no time limit but liveness and wait_s)."""
        if self.world == 1:
            return
        key = self._key(f"bar/{name}")
        self._try(lambda: self.store.add(key, 1))
        self._wait(lambda: True if int(self._try(lambda: self.store.add(key, 0))) >= self.world else None,
                   f"every rank at {name!r}")

    def share(self, name: str, value: str) -> list[str] | None:
        """A barrier at which every rank posts ``value``: rank 0 gets every rank's value in rank order, the
        others None (with one rank: ``[value]``)."""
        if self.world == 1:
            return [value]
        self._try(lambda: self.store.set(self._key(f"val/{name}/{self.rank}"), value))
        self.barrier(name)
        if not self.is_lead:
            return None
        return [self._try(lambda r=r: self.store.get(self._key(f"val/{name}/{r}"))).decode() for r in range(self.world)]

    def claims(self, name: str, n: int) -> Iterator[int]:
        """Indices 0..n-1 for this rank: each index to exactly one rank, claimed in increasing order from a
        shared counter (a rank that is faster takes more); all of them with one rank."""
        if self.world == 1:
            yield from range(n)
            return
        key = self._key(f"claim/{name}")
        while True:
            self.check()
            i = int(self._try(lambda: self.store.add(key, 1))) - 1
            if i >= n:
                return
            yield i
