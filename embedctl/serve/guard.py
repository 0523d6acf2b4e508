"""The ASGI layer in front of every endpoint: request ids, bearer keys, the body limit, metrics, and 500s
that answer a request id instead of a traceback (the log has the traceback under that id).

Pure ASGI (not Starlette's BaseHTTPMiddleware) so that the body is read once, bounded: a body over
``serve.max_body_bytes`` is answered 413 as soon as it is known (its Content-Length, or the bytes read so
far), never buffered whole.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import time
import uuid
from typing import Any

log = logging.getLogger("embedctl.serve")

OPEN_PATHS = frozenset({"/healthz", "/readyz"})        # probes answer without a key (they reveal nothing)
WRITE_PATHS = frozenset({"/documents", "/documents/delete"})
KNOWN_PATHS = frozenset({"/search", "/info", "/metrics", "/docs", "/openapi.json", *OPEN_PATHS, *WRITE_PATHS})
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._\-]{1,64}$")


def error_body(request_id: str, error: str, fix: str | None = None, field: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"error": error}
    if fix:
        out["fix"] = fix
    if field:
        out["field"] = field
    out["request_id"] = request_id
    return out


async def send_json(send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] = ()) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": data})


class Keys:
    """``serve.api_keys`` (read and write) and ``serve.read_only_keys``; none of either: no key needed."""

    def __init__(self, write_keys: list[str], read_keys: list[str]):
        self.write = [k.encode() for k in write_keys]
        self.read = [k.encode() for k in read_keys]

    @property
    def required(self) -> bool:
        return bool(self.write or self.read)

    def role(self, key: bytes) -> str | None:
        """"write", "read" or None (unknown); every key is compared, in constant time."""
        found = None
        for k in self.write:
            if hmac.compare_digest(k, key):
                found = "write"
        for k in self.read:
            if hmac.compare_digest(k, key) and found is None:
                found = "read"
        return found


class Guard:
    def __init__(self, app: Any, keys: Keys, max_body_bytes: int, metrics: Any):
        self.app, self.keys, self.max_body, self.metrics = app, keys, max_body_bytes, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v for k, v in scope.get("headers", [])}
        given = headers.get("x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        path = scope.get("path", "")
        started = time.perf_counter()
        status = [0]

        async def send_with_id(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        try:
            denied = self._denied(path, scope.get("method", "GET"), headers.get("authorization"))
            if denied is not None:
                code, error, fix = denied
                extra = [(b"www-authenticate", b"Bearer")] if code == 401 else []
                await send_json(send_with_id, code, error_body(request_id, error, fix), extra)
                return
            body = await self._read_body(headers, receive)
            if body is None:  # the client went away
                return
            if isinstance(body, int):
                await send_json(send_with_id, 413, error_body(
                    request_id, f"the request body ({body} bytes or more) is over serve.max_body_bytes = "
                                f"{self.max_body}", "send a smaller request (fewer documents or queries), or "
                                "raise serve.max_body_bytes", "body"))
                return
            if scope.get("method") == "POST":  # bodies are JSON whatever Content-Type says (curl -d sends a form's)
                scope["headers"] = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-type"]
                scope["headers"].append((b"content-type", b"application/json"))
            await self.app(scope, _replay(body, receive), send_with_id)
        except Exception:
            log.exception("request %s %s %s failed", request_id, scope.get("method"), path)
            if status[0] == 0:
                await send_json(send_with_id, 500, error_body(
                    request_id, "internal error: the server log has the details under this request id"))
        finally:
            if self.metrics is not None:
                endpoint = path if path in KNOWN_PATHS else "other"
                self.metrics.observe_request(endpoint, status[0] or 500, time.perf_counter() - started)

    def _denied(self, path: str, method: str, authorization: bytes | None) -> tuple[int, str, str] | None:
        if not self.keys.required or path in OPEN_PATHS:
            return None
        how = "send `Authorization: Bearer KEY` with a key of serve.api_keys (or serve.read_only_keys to search)"
        if not authorization:
            return 401, "a bearer key is required", how
        scheme, _, key = authorization.partition(b" ")
        role = self.keys.role(key.strip()) if scheme.lower() == b"bearer" else None
        if role is None:
            return 401, "the bearer key is not one of this server's keys", how
        if role == "read" and (path in WRITE_PATHS or method not in ("GET", "HEAD", "POST") or
                               (method == "POST" and path != "/search")):
            return 403, "this key is read-only: it cannot change the index", "write with a key of serve.api_keys"
        return None

    async def _read_body(self, headers: dict[str, bytes], receive: Any) -> bytes | int | None:
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            return int(declared)
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            if len(body) > self.max_body:
                return len(body)
            if not message.get("more_body", False):
                return bytes(body)


def _replay(body: bytes, receive: Any) -> Any:
    sent = [False]

    async def replay() -> dict:
        if not sent[0]:
            sent[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the disconnect, as the server would

    return replay
