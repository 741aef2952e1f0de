"""What reaches either LangGraph server at all: the Host it is called by, the body's type, `/metrics`.

langgraph.json and langgraph.shared.json name `open_app` and `shared_app` under `http.app`. `langgraph_api`
makes such an app the server's outer app and puts its middleware outside all of its own (CORS, auth and every
built-in route included: `langgraph_api/server.py`, default `middleware_order`), so `RequestGuard` sees every
request first:

- the `Host` header must name this machine's loopback (`localhost`, `127.0.0.1`, `::1`) or a name the owner
  lists in `EVOTRAINER_SERVER_ALLOWED_HOSTS` (comma-separated), else 400: a web page that rebinds its own DNS
  name to 127.0.0.1 sends its own name as the Host;
- a request with a body must say `Content-Type: application/json`, else 415: `text/plain`, form and multipart
  POSTs (and a body with no type) are the ones a web page sends without a CORS preflight, so the CORS
  allow-list never sees them;
- on the shared server, `/metrics` answers only a valid token (`server_auth.caller_of`), and a thread created
  with `supersteps` (state written without any auth event) is refused: only the graph writes a thread's state.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.responses import JSONResponse

from agent.launch.server_auth import CallerRefused, caller_of

ALLOWED_HOSTS_ENV = "EVOTRAINER_SERVER_ALLOWED_HOSTS"
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
JSON_TYPE = "application/json"
MAX_THREAD_BODY_BYTES = 1 << 20
_HOST = re.compile(r"(?P<name>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def allowed_hosts(environ: MutableMapping[str, str] | None = None) -> frozenset[str]:
    """Loopback names plus the owner's `EVOTRAINER_SERVER_ALLOWED_HOSTS` (names without ports, any case)."""
    raw = (os.environ if environ is None else environ).get(ALLOWED_HOSTS_ENV, "")
    extra = {name.strip().lower().rstrip(".") for name in raw.split(",") if name.strip()}
    return frozenset(LOOPBACK_HOSTS) | extra


def host_name(header: str | None) -> str | None:
    """The host name of a `Host` header (`name`, `name:port`, `[v6]:port`), lower-case; None if malformed."""
    match = _HOST.fullmatch((header or "").strip())
    if match is None:
        return None
    return match["name"].strip("[]").lower().rstrip(".")


def has_body(headers: Headers) -> bool:
    """Whether the request carries a body (a non-zero length, or a chunked one)."""
    return headers.get("content-length", "0").strip() not in ("", "0") or "transfer-encoding" in headers


def refusal(scope: Scope, headers: Headers, shared: bool) -> tuple[int, str] | None:
    """The (status, detail) a request gets before the server sees it, or None to pass it on."""
    name = host_name(headers.get("host"))
    if name is None or name not in allowed_hosts():
        return 400, (
            f"this server answers only to the host names {', '.join(sorted(allowed_hosts()))}, not "
            f"{headers.get('host')!r}: its owner adds names in {ALLOWED_HOSTS_ENV} (docs/studio.md)"
        )
    if scope["type"] != "http":
        return None
    if has_body(headers):
        media = headers.get("content-type", "").split(";")[0].strip().lower()
        if media != JSON_TYPE:
            return 415, f"send the request body as {JSON_TYPE}, not {media or 'an untyped body'!r}"
    if shared and scope["path"].rstrip("/") == "/metrics":
        try:
            caller_of(headers.get("authorization"))
        except CallerRefused as exc:
            return exc.status_code, exc.detail
    return None


def supersteps_refusal(body: bytes) -> str | None:
    """Why a `POST /threads` body is refused on the shared server, or None: `supersteps` writes state."""
    try:
        payload = json.loads(body or b"{}")
    except ValueError:
        return "the body of POST /threads is not a JSON object"
    if not isinstance(payload, dict):
        return "the body of POST /threads is not a JSON object"
    if payload.get("supersteps"):
        return "a thread's state is written only by the graph on this server: create the thread without 'supersteps'"
    return None


class RequestGuard:
    """ASGI middleware: refuse what `refusal` and `supersteps_refusal` name, pass everything else on unchanged."""

    def __init__(self, app: ASGIApp, shared: bool) -> None:
        self.app = app
        self.shared = shared

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refused = refusal(scope, headers, self.shared)
        if refused is None and self.shared and scope["method"] == "POST" and scope["path"].rstrip("/") == "/threads":
            body, receive = await _buffered(receive)
            reason = supersteps_refusal(body) if len(body) <= MAX_THREAD_BODY_BYTES else "the body is too large"
            refused = None if reason is None else (403, reason)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, detail = refused
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await JSONResponse({"detail": detail}, status_code=status)(scope, receive, send)


async def _buffered(receive: Receive) -> tuple[bytes, Receive]:
    """Read the whole request body and return it with a `receive` that replays it to the app."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False) or sum(map(len, chunks)) > MAX_THREAD_BODY_BYTES:
            break
    body, replayed = b"".join(chunks), False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return body, replay


open_app = Starlette(middleware=[Middleware(RequestGuard, shared=False)])
shared_app = Starlette(middleware=[Middleware(RequestGuard, shared=True)])
