"""A real `embedctl serve` (127.0.0.1, ephemeral port, real httpx and raw sockets) at its edges: /readyz
while the index opens and when it cannot be opened, full search and write queues answering 503 with
`Retry-After`, a client that trickles its body, a client that goes away mid-request; after each the
server answers the next request.

The states that last milliseconds in real use are held open with the failpoints ``serve:open`` and
``serve:batch`` (embedctl.util.failpoints.hold) and with the index's own writer lock, held by this test."""

from __future__ import annotations

import re
import shutil
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from support.serving import Server

from embedctl.util.lock import WriterLock

QUEUES = ["serve.search_queue=2", "serve.search_workers=1", "serve.batch_max_queries=1", "serve.batch_window_ms=0",
          "serve.write_queue=1", "serve.write_group_docs=1", "serve.write_window_ms=0", "serve.lock_wait_s=60"]


def wait_for(predicate, timeout_s: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"{what}: not true within {timeout_s} s")


def held_server(index, release, *overrides: str, point: str) -> Server:
    env = {"EMBEDCTL_FAILPOINT": point, "EMBEDCTL_FAILPOINT_HOLD": str(release)}
    return Server(index, *overrides, env=env)


def held(release) -> bool:
    return release.with_name(release.name + ".held").exists()


def queue_depth(srv: Server, queue: str) -> int:
    text = srv.client.get("/metrics").text
    return int(float(re.search(rf'embedctl_queue_depth{{queue="{queue}"}} (\S+)', text).group(1)))


def raw_post(port: int, path: str, body: bytes, send_body: bool = True) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    sock.sendall(head.encode() + (body if send_body else b""))
    return sock


def read_status(sock: socket.socket) -> tuple[int, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ", 2)[1]), data


def assert_unavailable(r: httpx.Response, *words: str) -> dict:
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == "1"
    body = r.json()
    for w in words:
        assert w in body["error"] + " " + body["fix"], (w, body)
    assert body["request_id"] == r.headers["x-request-id"]
    return body


@pytest.mark.slow  # two servers start (about 20 s on the loaded 2-core host)
def test_readyz_503_while_opening_then_200_and_503_when_the_index_cannot_be_opened(tiny, tmp_path):
    good_release, bad_release = tmp_path / "good-release", tmp_path / "bad-release"
    broken = shutil.copytree(tiny("dense"), tmp_path / "broken")
    good = held_server(tiny("dense"), good_release, point="serve:open").start(wait_ready=False)
    bad = held_server(broken, bad_release, point="serve:open").start(wait_ready=False)
    try:
        for srv, release in ((good, good_release), (bad, bad_release)):
            wait_for(lambda release=release: held(release), what="the opener reached serve:open")
            r = srv.client.get("/readyz")
            assert r.status_code == 503 and r.json() == {"status": "opening", "error": None}
            assert_unavailable(srv.client.post("/search", json={"query": "tides", "k": 1}), "still opening", "/readyz")
            assert_unavailable(srv.client.post("/documents", json={"documents": [{"id": "x", "text": "x"}]}), "opening")
            assert srv.client.get("/healthz").status_code == 200  # alive, not ready
        (broken / "dense.faiss").write_bytes(b"")  # damaged after the CLI's check, before the server opens it
        good_release.touch()
        bad_release.touch()
        wait_for(lambda: good.client.get("/readyz").status_code == 200, what="the good server ready")
        assert good.client.post("/search", json={"query": "tides", "k": 1}).status_code == 200
        failed = wait_for(lambda: bad.client.get("/readyz").json()["status"] == "failed" and bad.client.get("/readyz"),
                          what="the broken server says failed")
        assert failed.status_code == 503 and "dense.faiss" in failed.json()["error"], failed.text
        body = assert_unavailable(bad.client.post("/search", json={"query": "tides", "k": 1}), "damaged", "restart")
        assert "dense.faiss" in body["error"]
        assert bad.client.get("/healthz").status_code == 200  # still up, still saying why
    finally:
        good_release.touch()
        bad_release.touch()
        codes = (good.stop(), bad.stop())
    assert codes[0] in (0, -15), good.output()
    assert "Traceback" not in good.output()


@pytest.fixture(scope="module")
def busy(tiny, module_tmp):
    """A server whose searches' batcher stops at ``serve:batch`` until ``release`` exists; small queues."""
    release = module_tmp("overload") / "batch-release"
    srv = held_server(tiny("dense"), release, *QUEUES, point="serve:batch").start()
    srv.release = release
    yield srv
    release.touch()
    assert srv.stop() in (0, -15), srv.output()
    assert "Traceback" not in srv.output()


def test_a_full_search_queue_answers_503_and_a_client_gone_mid_request_harms_nothing(busy):
    query = b'{"query": "ocean tides and the moon", "k": 2}'
    gone = raw_post(busy.port, "/search", query)  # the batcher takes it and stops at serve:batch
    wait_for(lambda: held(busy.release), what="the batcher reached serve:batch")
    pool = ThreadPoolExecutor(2)
    clients = [httpx.Client(base_url=busy.url, timeout=60) for _ in range(2)]
    try:
        waiting = [pool.submit(c.post, "/search", json={"query": "volcanoes", "k": 2}) for c in clients]
        wait_for(lambda: queue_depth(busy, "search") == 2, what="two searches queued")
        t = time.monotonic()
        full = busy.client.post("/search", json={"query": "jazz", "k": 2})
        assert time.monotonic() - t < 10  # answered at once, not queued
        assert_unavailable(full, "2 searches are waiting, serve.search_queue = 2", "raise serve.search_queue")
        assert busy.client.get("/healthz").status_code == 200 and busy.client.get("/info").status_code == 200
        gone.close()  # the first client goes away while its search is in the batcher
        busy.release.touch()
        for f in waiting:
            r = f.result(timeout=60)
            assert r.status_code == 200 and len(r.json()["results"][0]) == 2, r.text
        assert busy.client.post("/search", json={"query": "jazz", "k": 2}).status_code == 200
        assert 'embedctl_requests_total{endpoint="/search",status="503"} 1.0' in busy.client.get("/metrics").text
    finally:
        busy.release.touch()
        pool.shutdown(wait=True)
        for c in clients:
            c.close()


def test_a_full_write_queue_answers_503_and_searches_go_on(busy):
    busy.release.touch()
    lock = WriterLock(busy.index, what="index")  # this test holds the index's writer lock: commits wait
    lock.acquire()
    pool = ThreadPoolExecutor(3)
    clients = [httpx.Client(base_url=busy.url, timeout=90) for _ in range(3)]
    try:
        docs = [{"id": f"q{i}", "text": f"Queued write number {i} about harbor lighthouses."} for i in range(3)]
        sent = [pool.submit(c.post, "/documents", json={"documents": [d]}) for c, d in zip(clients, docs, strict=True)]
        # the writer holds one request (waiting for the lock), the queue one more: the third is refused
        refused = wait_for(lambda: [f.result() for f in sent if f.done() and f.result().status_code == 503],
                           what="a write refused")
        assert_unavailable(refused[0], "writes are waiting, serve.write_queue = 1", "raise serve.write_queue")
        assert busy.client.post("/search", json={"query": "tides", "k": 1}).status_code == 200  # reads go on
        lock.release()
        answers = [f.result(timeout=90) for f in sent]
        acked = [d["id"] for d, r in zip(docs, answers, strict=True) if r.status_code == 200]
        assert 1 <= len(acked) <= 2 and all(r.status_code in (200, 503) for r in answers), [r.text for r in answers]
        for doc_id in acked:
            hits = busy.client.post("/search", json={"query": f"Queued write number {doc_id[1:]} about harbor "
                                                              "lighthouses.", "k": 3}).json()
            assert doc_id in [h["id"] for h in hits["results"][0]]
        r = busy.client.post("/documents/delete", json={"ids": [*acked, "q-none"]})
        assert r.status_code == 200 and r.json()["deleted"] == len(acked)
    finally:
        if lock.held:
            lock.release()
        pool.shutdown(wait=True)
        for c in clients:
            c.close()


def test_a_trickled_body_is_answered_and_does_not_stall_others(busy):
    busy.release.touch()
    body = b'{"query": "mitochondria in cells", "k": 3, "text": false}'
    slow = raw_post(busy.port, "/search", body, send_body=False)
    try:
        started = time.monotonic()
        for i, byte in enumerate(body):
            slow.sendall(bytes([byte]))
            time.sleep(0.02)
            if i == len(body) // 2:  # half a body in: another client is answered meanwhile
                t = time.monotonic()
                assert busy.client.post("/search", json={"query": "tides", "k": 1}).status_code == 200
                assert time.monotonic() - t < 10
        status, raw = read_status(slow)
        assert status == 200, raw
        assert time.monotonic() - started < 60
    finally:
        slow.close()


def test_a_client_gone_mid_body_or_mid_answer_leaves_the_server_answering(busy):
    busy.release.touch()
    half = raw_post(busy.port, "/documents", b'{"documents": [{"id": "h1", "text": "half"}]}', send_body=False)
    half.sendall(b'{"documents": [{"id": "h1", ')
    half.close()  # gone mid-body: nothing is written
    for _ in range(2):  # gone right after sending a whole search: the answer goes nowhere
        raw_post(busy.port, "/search", b'{"queries": ["tides", "lava", "jazz"], "k": 5}').close()
    wait_for(lambda: queue_depth(busy, "search") == 0, what="the search queue drained")  # it holds 2 here
    assert busy.client.post("/search", json={"query": "tides", "k": 1}).status_code == 200
    assert busy.client.get("/readyz").status_code == 200
    hits = busy.client.post("/search", json={"query": "half", "k": 40, "text": False}).json()
    assert "h1" not in [h["id"] for h in hits["results"][0]]
