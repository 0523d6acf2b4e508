"""Writes that outlive the server: a version committed by `embedctl index add` in another process is seen
by a running server without a restart; kill -9 of the server mid-way through a stream of writes, then a
restart: every acknowledged change is there, every unacknowledged request is wholly there or not at all,
and `Index.info(verify=True)` is clean."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
from support.serving import Server

import embedctl
from embedctl.index.docs import DocTable
from embedctl.index.generations import open_generation

WORDS = ("amber basalt cedar delta ember fjord garnet harbor island juniper kelp lagoon meadow nectar orchid "
         "prairie quartz reef savanna tundra umber valley willow xenon yarrow zephyr").split()


def live_ids(path) -> set[str]:
    gen = open_generation(path)
    out: set[str] = set()
    for seg in gen.segments:
        ids = DocTable(gen.path(seg.docs)).ids_of(np.arange(seg.rows))
        out.update(i for i, live in zip(ids, gen.live_mask(seg), strict=True) if live)
    return out


def wait_for(predicate, timeout_s: float = 60.0, every_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"not true within {timeout_s} s")


@pytest.mark.slow
def test_a_cli_add_is_seen_by_the_running_server_which_can_still_write(tiny, tmp_path):
    path = shutil.copytree(tiny("dense"), tmp_path / "idx")
    coll = tmp_path / "new.tsv"
    coll.write_text("cli1\tA lighthouse guides ships past the rocky headland at night.\n", encoding="utf-8")
    with Server(path, "serve.refresh_s=0.1") as srv:
        assert srv.client.post("/search", json={"query": "x", "k": 1}).json()["version"] == 0
        done = subprocess.run([sys.executable, "-m", "embedctl", "index", "add", "--index", str(path),
                               "--collection", str(coll)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr

        def seen():
            body = srv.client.post("/search", json={"query": "a lighthouse guiding ships at night", "k": 1}).json()
            return body if body["version"] == 1 else None

        body = wait_for(seen)
        assert body["results"][0][0]["id"] == "cli1"
        assert srv.client.get("/info").json()["serving"]["version"] == 1
        # the server holds the writer lock only while it commits: it writes after the CLI, and the CLI after it
        r = srv.client.post("/documents", json={"documents": [{"id": "srv1", "text": "Bees dance to share directions."}]})
        assert r.status_code == 200 and r.json()["version"] == 2
        assert embedctl.Index.open(path).delete(["srv1"])["generation"] == 3  # this test's process, not the server's
        wait_for(lambda: srv.client.get("/readyz").json()["version"] == 3)
    assert embedctl.Index.open(path).info(verify=True)["verify"] == []


@pytest.mark.slow
def test_kill_9_mid_write_stream_keeps_every_acknowledged_change(tiny, tmp_path):
    path = shutil.copytree(tiny("dense"), tmp_path / "idx")
    rng = random.Random(0)
    acked_adds: set[str] = set()
    acked_deletes: set[str] = set()
    unacked: list[tuple[str, list[str]]] = []  # (kind, ids) of requests sent but never answered
    for trial in range(2):
        srv = Server(path, "serve.write_window_ms=5").start()
        assert acked_adds - acked_deletes <= live_ids(path) and not (live_ids(path) & acked_deletes)
        stop = threading.Event()
        lock = threading.Lock()

        def client(c: int, srv=srv, stop=stop, lock=lock, trial=trial) -> None:
            n = 0
            mine: list[str] = []
            while not stop.is_set():
                n += 1
                if mine and n % 3 == 0:
                    kind, ids = "delete", [mine.pop(0)]
                    req = ("/documents/delete", {"ids": ids})
                else:
                    ids = [f"t{trial}c{c}n{n}a", f"t{trial}c{c}n{n}b"]
                    docs = [{"id": i, "text": " ".join(rng.choice(WORDS) for _ in range(8)) + f" {i}"} for i in ids]
                    kind, req = "add", ("/documents", {"documents": docs})
                with lock:
                    unacked.append((kind, ids))
                try:
                    r = srv.client.post(*req[:1], json=req[1])
                except Exception:
                    return  # killed mid-request: stays unacknowledged
                if r.status_code != 200:
                    return
                with lock:
                    unacked.remove((kind, ids))
                    (acked_adds if kind == "add" else acked_deletes).update(ids)
                    if kind == "add":
                        mine.extend(ids)

        threads = [threading.Thread(target=client, args=(c,)) for c in range(3)]
        for t in threads:
            t.start()
        wanted = len(acked_adds) + 1
        wait_for(lambda wanted=wanted: len(acked_adds) > wanted, timeout_s=120, every_s=0.02)
        time.sleep(rng.uniform(0.0, 1.5))
        srv.kill()  # kill -9 at a random moment of the stream
        stop.set()
        for t in threads:
            t.join(timeout=60)
        assert acked_adds, srv.output()
        live = live_ids(path)
        maybe_deleted = {i for kind, ids in unacked if kind == "delete" for i in ids}  # sent, applied or not
        assert acked_adds - acked_deletes - maybe_deleted <= live and not (live & acked_deletes)
        acked_deletes.update(maybe_deleted - live)  # applied: gone for good
        for kind, ids in unacked:  # an unacknowledged request: all of it or none of it
            present = [i in live for i in ids]
            assert len(set(present)) == 1 or kind == "delete", (kind, ids, present)
        unacked.clear()
    with Server(path) as srv:  # a restart after kill -9: stale lock taken over, writes work, verify clean
        r = srv.client.post("/documents", json={"documents": [{"id": "after", "text": "After the crash."}]})
        assert r.status_code == 200, r.text
    info = embedctl.Index.open(path).info(verify=True)
    assert info["verify"] == [] and info["documents"] == len(live_ids(path))


@pytest.mark.slow
def test_killed_after_the_commit_before_the_answer_the_write_is_whole_after_restart(tiny, tmp_path):
    path = shutil.copytree(tiny("dense"), tmp_path / "idx")
    srv = Server(path, env={"EMBEDCTL_FAILPOINT": "add:committed"}).start()
    try:
        with pytest.raises(httpx.TransportError):  # the server dies between its commit and its answer
            srv.client.post("/documents", json={"documents": [{"id": "late", "text": "Committed, never answered."},
                                                              {"id": "late2", "text": "Its neighbour."}]})
        srv.proc.wait(timeout=60)
        assert srv.proc.returncode == -9
    finally:
        srv.kill()
    with Server(path) as again:
        hits = again.client.post("/search", json={"query": "committed, never answered", "k": 1}).json()
        assert hits["version"] == 1 and hits["results"][0][0]["id"] == "late"
    assert {"late", "late2"} <= live_ids(path)
    assert embedctl.Index.open(path).info(verify=True)["verify"] == []


@pytest.mark.slow
def test_an_internal_error_answers_500_with_a_request_id_and_the_log_has_the_traceback(tiny):
    with Server(tiny("dense"), env={"EMBEDCTL_FAILPOINT": "serve:search"}) as srv:
        r = srv.client.post("/search", json={"query": "tides", "k": 1}, headers={"x-request-id": "req-500"})
        assert r.status_code == 500 and r.json()["request_id"] == "req-500"
        assert "Traceback" not in r.text and "RuntimeError" not in r.text and "server log" in r.json()["error"]
        assert srv.client.get("/readyz").status_code == 200  # still up
        log = srv.output()
    assert "req-500" in log and "Traceback" in log and "failpoint serve:search" in log
