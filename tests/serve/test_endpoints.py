"""`embedctl serve` as a client meets it: a real server process on 127.0.0.1 (ephemeral port) over a tiny
PLAID index, a real HTTP client: every endpoint, keys, limits, bad bodies, request ids."""

from __future__ import annotations

import os
import socket

import httpx
import pytest
from support.serving import READ_KEY, WRITE_KEY, Server

import embedctl

LIMITS = ["serve.max_batch=8", "serve.max_k=50", "serve.max_query_chars=200", "serve.max_body_bytes=4096",
          "serve.max_doc_chars=500", "serve.write_window_ms=1000"]


@pytest.fixture(scope="module")
def server(tiny):
    srv = Server(tiny("plaid"), *LIMITS, keys=True).start()
    yield srv
    assert srv.stop() in (0, -15), srv.output()  # uvicorn shuts down gracefully, then re-raises SIGTERM
    assert "Traceback" not in srv.output()


def test_search_answers_hits_and_the_version(server, tiny):
    r = server.client.post("/search", json={"query": "volcanoes and lava", "k": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["version"] == 0 and len(body["results"]) == 1 and len(body["results"][0]) == 3
    hit = body["results"][0][0]
    assert set(hit) == {"id", "score", "text", "title", "fields"} and "volcanoes" in hit["text"]
    # the same hits as the library on the same index
    lib = embedctl.Index.open(tiny("plaid")).search("volcanoes and lava", k=3)
    assert [h["id"] for h in body["results"][0]] == [h.id for h in lib]
    many = server.client.post("/search", json={"queries": ["ocean tides", "jazz"], "k": 2, "text": False}).json()
    assert [len(r) for r in many["results"]] == [2, 2] and many["results"][0][0]["text"] is None


def test_add_then_delete_acknowledge_committed_versions(server):
    info = server.client.get("/info").json()
    before = info["version"]
    serving = info["serving"]  # how the server searches: one worker per core, one thread each, by default
    cores = os.cpu_count() or 1
    assert serving["search_workers"] == cores and serving["threads_per_worker"] == 1, serving
    assert serving["writer_threads"] == 1 and serving["query_encoder_backend"] in ("reference", "onnx", "bf16")
    r = server.client.post("/documents", json={"documents": [
        {"id": "p1", "text": "Penguins huddle together through the Antarctic winter."},
        {"id": "p2", "title": "Owls", "text": "Owls hunt at night with silent feathers."}]})
    assert r.status_code == 200, r.text
    version = r.json()["version"]
    assert version == before + 1 and r.json()["documents"] == 2
    # acknowledged = committed on disk and searchable at once
    assert embedctl.Index.open(server.index).version == version
    hits = server.client.post("/search", json={"query": "penguins in the antarctic winter", "k": 1}).json()
    assert hits["version"] == version and hits["results"][0][0]["id"] == "p1"
    r = server.client.post("/documents/delete", json={"ids": ["p1", "p2", "nope"]})
    assert r.status_code == 200 and r.json() == {"version": version + 1, "deleted": 2, "unknown": ["nope"]}
    hits = server.client.post("/search", json={"query": "penguins in the antarctic winter", "k": 5}).json()
    assert "p1" not in [h["id"] for h in hits["results"][0]]


def test_fields_filters_and_modes(server):
    """Documents carry fields; a search takes a filter (expression or JSON form) and a mode, as the library."""
    r = server.client.post("/documents", json={"documents": [
        {"id": "f1", "text": "Glaciers carve valleys over thousands of years.", "fields": {"year": 2012}},
        {"id": "f2", "text": "Glaciers retreat as the climate warms.", "fields": {"year": 2021}}]})
    assert r.status_code == 200, r.text
    for flt in ("year >= 2015", {"op": ">=", "field": "year", "value": 2015}):
        body = server.client.post("/search", json={"query": "glaciers", "k": 5, "filter": flt}).json()
        assert [h["id"] for h in body["results"][0]] == ["f2"], body
        assert body["results"][0][0]["fields"] == {"year": 2021}
    for mode in ("lexical", "hybrid"):
        body = server.client.post("/search", json={"query": "glaciers retreat", "k": 2, "mode": mode}).json()
        assert body["results"][0][0]["id"] == "f2", (mode, body)
        # a filter with either mode: only the documents that pass, with their fields
        body = server.client.post("/search", json={"query": "glaciers retreat", "k": 5, "mode": mode,
                                                   "filter": {"field": "year", "op": "<", "value": 2015}}).json()
        assert [(h["id"], h["fields"]) for h in body["results"][0]] == [("f1", {"year": 2012})], (mode, body)
    bad = server.client.post("/search", json={"query": "glaciers", "filter": "colour = 'red'"})
    assert bad.status_code == 422 and "colour" in bad.json()["error"] and "year" in bad.json()["error"] + bad.json()["fix"]
    bad = server.client.post("/search", json={"query": "glaciers", "mode": "psychic"})
    assert bad.status_code == 422 and "psychic" in bad.json()["error"]
    bad = server.client.post("/documents", json={"documents": [{"id": "f3", "text": "x y", "fields": {"text": 1}}]})
    assert bad.status_code == 422 and "text" in bad.json()["error"]
    r = server.client.post("/documents/delete", json={"ids": ["f1", "f2"]})
    assert r.status_code == 200, r.text


def test_hostile_filters_get_a_clear_error_and_the_server_keeps_serving(server):
    """Wrong type, injection attempts (expression and JSON form), an IN list over the bound, and a 100,000-value
    IN list (over serve.max_body_bytes here): each answered 422 / 413 with what went wrong; nothing else changes."""
    r = server.client.post("/documents", json={"documents": [
        {"id": "h1", "text": "Hostile filters meet a patient server.", "fields": {"year": 2012}}]})
    assert r.status_code == 200, r.text
    cases = [("year >= '2015'", "holds int values"), ("year >= 2015; DROP TABLE docs", "unexpected character ';'"),
             ("year = 1 or 1 = 1", "expected a field name"), ("__import__('os')", "expected an operator"),
             ({"sql": "1=1"}, "unknown filter node"), ({"field": "year", "op": "<", "value": {"$gt": 1}},
                                                       "a value must be"),
             ("year in (" + ",".join(["0"] * 1025) + ")", "more than 1024 values")]
    for flt, msg in cases:
        bad = server.client.post("/search", json={"query": "hostile", "k": 3, "filter": flt})
        assert bad.status_code == 422 and msg in bad.json()["error"], (flt, bad.text)
    huge = server.client.post("/search", json={"query": "hostile", "filter": {"field": "year", "op": "in",
                                                                             "values": list(range(100_000))}})
    assert huge.status_code == 413 and "serve.max_body_bytes" in huge.json()["error"], huge.text
    ok = server.client.post("/search", json={"query": "hostile filters", "k": 1, "filter": "year = 2012"})
    assert ok.status_code == 200 and ok.json()["results"][0][0]["id"] == "h1", ok.text
    assert server.client.post("/documents/delete", json={"ids": ["h1"]}).status_code == 200


def test_writes_arriving_together_share_one_commit(server):
    from concurrent.futures import ThreadPoolExecutor

    def add(i: int):
        return server.client.post("/documents", json={"documents": [{"id": f"g{i}", "text": f"Grouped write {i}."}]})

    before = server.client.get("/info").json()["version"]
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(add, range(4)))
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    versions = {a.json()["version"] for a in answers}
    assert versions == {before + 1}, versions  # four requests, one commit
    gone = server.client.post("/documents/delete", json={"ids": [f"g{i}" for i in range(4)]}).json()
    assert gone["deleted"] == 4 and gone["version"] == before + 2


def test_info_health_ready_metrics_and_openapi(server):
    info = server.client.get("/info").json()
    assert info["kind"] == "plaid" and info["documents"] >= 40 and info["serving"]["version"] == info["version"]
    assert server.client.get("/healthz").json() == {"status": "alive"}
    assert server.client.get("/readyz").json()["status"] == "ready"
    server.client.post("/search", json={"query": "x ray", "k": 1})
    text = server.client.get("/metrics").text
    for name in ("embedctl_requests_total{", "embedctl_request_seconds_bucket{", "embedctl_documents ",
                 "embedctl_index_version ", 'embedctl_queue_depth{queue="search"}',
                 'embedctl_queue_depth{queue="write"}', "embedctl_search_batch_queries_count"):
        assert name in text, name
    assert server.client.get("/openapi.json").json()["paths"].keys() >= {"/search", "/documents", "/documents/delete"}


def test_keys_401_without_or_with_a_wrong_key_403_for_a_read_only_write(server):
    bare = httpx.Client(base_url=server.url, timeout=30)
    r = bare.post("/search", json={"query": "x", "k": 1})
    assert r.status_code == 401 and "bearer key is required" in r.json()["error"] and r.headers["www-authenticate"]
    r = bare.post("/search", json={"query": "x", "k": 1}, headers={"authorization": "Bearer not-a-key-at-all-1234"})
    assert r.status_code == 401 and "not one of this server's keys" in r.json()["error"]
    assert bare.get("/metrics").status_code == 401 and bare.get("/info").status_code == 401
    assert bare.get("/healthz").status_code == 200 and bare.get("/readyz").status_code == 200  # probes: no key
    ro = {"authorization": f"Bearer {READ_KEY}"}
    assert bare.post("/search", json={"query": "tides", "k": 1}, headers=ro).status_code == 200
    assert bare.get("/info", headers=ro).status_code == 200
    for path, body in (("/documents", {"documents": [{"id": "z", "text": "z"}]}), ("/documents/delete", {"ids": ["d1"]})):
        r = bare.post(path, json=body, headers=ro)
        assert r.status_code == 403 and "read-only" in r.json()["error"] and "serve.api_keys" in r.json()["fix"]
    assert bare.post("/search", json={"query": "tides", "k": 1}, headers={"authorization": f"Bearer {WRITE_KEY}"}).is_success
    bare.close()


@pytest.mark.parametrize(("body", "status", "field", "words"), [
    ({"query": "x", "k": 51}, 422, "k", "serve.max_k = 50"),
    ({"queries": [f"q{i}" for i in range(9)], "k": 1}, 422, "queries", "serve.max_batch = 8"),
    ({"query": "a" * 201}, 422, "query", "serve.max_query_chars = 200"),
    ({"query": "a", "queries": ["b"]}, 422, "queries", "either `query`"),
    ({"queries": []}, 422, "queries", "empty"),
    ({"query": "x", "k": 0}, 422, "k", "greater than or equal to 1"),
    ({"query": "x", "k": "ten"}, 422, "k", "valid integer"),
    ({"query": "x", "filtr": "year > 1"}, 422, "filtr", "Extra inputs"),
    ({"query": ""}, 422, None, "no tokens the model can read"),
])
def test_bad_search_bodies_name_the_field_and_the_limit(server, body, status, field, words):
    r = server.client.post("/search", json=body)
    assert r.status_code == status, r.text
    out = r.json()
    assert words in out["error"] and out.get("field") == field and out["fix"] and out["request_id"] == r.headers["x-request-id"]


def test_bad_write_bodies_use_the_library_messages(server):
    dup = server.client.post("/documents", json={"documents": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]})
    assert dup.status_code == 422 and dup.json()["error"] == "duplicate document id 'a' (item 2)"
    assert dup.json()["fix"] == "give each document one id"
    empty = server.client.post("/documents", json={"documents": [{"id": "a", "text": ""}]})
    assert empty.status_code == 422 and empty.json()["field"] == "documents.0.text"
    long = server.client.post("/documents", json={"documents": [{"id": "a", "text": "w " * 300}]})
    assert long.status_code == 422 and "serve.max_doc_chars = 500" in long.json()["error"]
    many = server.client.post("/documents/delete", json={"ids": [str(i) for i in range(9)]})
    assert many.status_code == 422 and "serve.max_batch = 8" in many.json()["error"]
    assert server.client.post("/documents/delete", json={"ids": []}).status_code == 422
    notjson = server.client.post("/search", content=b"{not json")
    assert notjson.status_code == 422 and notjson.json()["request_id"]
    path = server.client.post("/documents", json={"path": "/etc/passwd"})  # no endpoint takes a file path
    assert path.status_code == 422 and "path" in path.json()["error"]


def test_body_over_the_limit_is_413_and_the_server_answers_the_next_request(server):
    r = server.client.post("/documents", json={"documents": [{"id": "big", "text": "w " * 3000}]})
    assert r.status_code == 413 and "serve.max_body_bytes = 4096" in r.json()["error"] and r.json()["field"] == "body"

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(10):
            yield b" " * 1000

    r = server.client.post("/search", content=chunks())
    assert r.status_code == 413
    assert server.client.post("/search", json={"query": "tides", "k": 1}).status_code == 200


def test_request_ids_echo_or_are_made(server):
    r = server.client.get("/healthz", headers={"x-request-id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    r = server.client.get("/healthz", headers={"x-request-id": "bad id with spaces"})
    assert len(r.headers["x-request-id"]) == 32


def test_a_client_that_goes_away_leaves_the_server_answering(server):
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)  # half a request, then gone
    raw.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"query\": ")
    raw.close()
    slow = socket.create_connection(("127.0.0.1", server.port), timeout=10)  # a slow body stays open meanwhile
    slow.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{")
    assert server.client.post("/search", json={"query": "tides", "k": 1}).status_code == 200
    slow.close()
    assert server.client.get("/healthz").status_code == 200


def test_unknown_paths_and_methods(server):
    assert server.client.get("/nope").status_code == 404
    assert server.client.get("/search").status_code == 405
