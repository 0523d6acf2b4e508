"""bench_serve.py's kill -9 loop (``--fault-kinds``): rounds of a stream of add and delete batches from 3 clients,
kill -9 of the server at a random moment, restart: every acknowledged change present, every unacknowledged
request all there or not at all, ``Index.info(verify=True)`` clean (the checks of tests/serve/test_durability.py)."""

from __future__ import annotations

import random
import sys
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.serving import Server  # noqa: E402

import embedctl  # noqa: E402


def faults(path: Path, trials: int, overrides: list[str], seed: int = 0) -> dict:
    sys.path.insert(0, str(REPO / "tests" / "serve"))
    from test_durability import WORDS, live_ids  # the test's own checks

    rng = random.Random(seed)
    acked_adds: set[str] = set()
    acked_deletes: set[str] = set()
    maybe_deleted: set[str] = set()  # ids of deletes sent but never answered (tests/serve/test_durability.py)
    rows = []
    problems: list[str] = []
    for trial in range(trials):
        t0 = time.perf_counter()
        srv = Server(path, "serve.write_window_ms=5", *overrides).start()
        restart_s = time.perf_counter() - t0
        live = live_ids(path)
        if not (acked_adds - acked_deletes - maybe_deleted <= live) or (live & acked_deletes):
            problems.append(f"trial {trial}: an acknowledged change is missing after restart")
        verify = embedctl.Index.open(path).info(verify=True)["verify"]
        if verify:
            problems.append(f"trial {trial}: verify: {verify[:3]}")
        stop = threading.Event()
        lock = threading.Lock()
        unacked: list[tuple[str, list[str]]] = []

        def client(c: int, srv=srv, stop=stop, lock=lock, unacked=unacked, trial=trial) -> None:
            n, mine = 0, []
            while not stop.is_set():
                n += 1
                if mine and n % 3 == 0:
                    kind, ids = "delete", [mine.pop(0)]
                    path_, body = "/documents/delete", {"ids": ids}
                else:
                    ids = [f"f{trial}c{c}n{n}{x}" for x in "ab"]
                    docs = [{"id": i, "text": " ".join(rng.choice(WORDS) for _ in range(8))} for i in ids]
                    kind, path_, body = "add", "/documents", {"documents": docs}
                with lock:
                    unacked.append((kind, ids))
                try:
                    with httpx.Client(base_url=srv.url, timeout=120) as h:
                        r = h.post(path_, json=body)
                except httpx.HTTPError:
                    return
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
        deadline = time.monotonic() + 120  # at least one more acknowledged change, then a random moment
        start_acked = len(acked_adds) + len(acked_deletes)
        while len(acked_adds) + len(acked_deletes) == start_acked and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 2.0))
        acked_before = len(acked_adds) + len(acked_deletes)
        srv.kill()
        stop.set()
        for t in threads:
            t.join(timeout=120)
        live = live_ids(path)
        sent_deletes = {i for kind, ids in unacked if kind == "delete" for i in ids}  # applied or not
        acked_deletes.update(sent_deletes - live)  # applied before the kill: gone for good
        maybe_deleted |= sent_deletes & live       # not applied: an add may still hold them
        partial = [ids for kind, ids in unacked if kind == "add" and len({i in live for i in ids}) > 1]
        if partial:
            problems.append(f"trial {trial}: half-visible requests {partial}")
        rows.append({"restart_s": round(restart_s, 2), "acked_so_far": acked_before, "unacked_at_kill": len(unacked),
                     "unacked_visible": sum(all(i in live for i in ids) for kind, ids in unacked if kind == "add")})
    srv = Server(path, *overrides).start()
    ok = srv.client.post("/search", json={"query": "x", "k": 1}).status_code == 200
    srv.stop()
    live = live_ids(path)
    verify = embedctl.Index.open(path).info(verify=True)["verify"]
    return {"trials": trials, "rows": rows, "acknowledged_adds": len(acked_adds),
            "acknowledged_deletes": len(acked_deletes),
            "all_acknowledged_present": bool(acked_adds - acked_deletes - maybe_deleted <= live
                                             and not (live & acked_deletes)),
            "verify_clean": verify == [], "answers_after_last_restart": ok, "problems": problems}
