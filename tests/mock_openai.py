"""A stdlib mock of the OpenAI chat-completions endpoint that replays scripted replies.

`MockOpenAI(script)` serves `POST /v1/chat/completions` on 127.0.0.1 (port 0) from a daemon thread. Each
request pops the next scripted turn — `{"tool_calls": [{"name", "arguments"}], "content", "usage"}`;
`arguments` is a dict (sent as JSON) or a raw string (sent as is, e.g. malformed JSON) — or, when the
script is exhausted, answers plain text (so the tool loop ends). A turn may also be a callable taking the
request body and returning a turn. Every request body is recorded (`requests`), and every reported usage
(`usages`); the default usage is deterministic (chars / 4 of the messages and tool schemas). A hostile
server is scripted with `raw_usage` (the usage object sent as is) or `raw_reply` (the whole response body
sent as is), and a call `"id": None` is sent as null. `stream: true` gets SSE chunks. A turn with
`trickle_s` sends its whole response (status line and headers included) one byte every `trickle_s` seconds,
as a slow or hostile endpoint may; `trickled` counts the bytes sent so.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Turn = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]
ROOT = Path(__file__).resolve().parents[1]


def load_script(path: Path) -> list[dict[str, Any]]:
    """Read a JSON script; a string value ``<<file:REL>>`` becomes the text of REL (from the repo root)."""

    def expand(value: Any) -> Any:
        if isinstance(value, str):
            match = re.fullmatch(r"<<file:(.+)>>", value)
            return (ROOT / match.group(1)).read_text() if match else value
        if isinstance(value, list):
            return [expand(v) for v in value]
        if isinstance(value, dict):
            return {k: expand(v) for k, v in value.items()}
        return value

    return expand(json.loads(path.read_text()))


class MockOpenAI:
    """The server; use as a context manager. `base_url` is what `OPENAI_BASE_URL` should be."""

    def __init__(self, script: list[Turn], final_text: str = "I have nothing more to propose.") -> None:
        self.script = list(script)
        self.final_text = final_text
        self.requests: list[dict[str, Any]] = []
        self.usages: list[tuple[int, int]] = []
        self.tool_call_ids: list[list[str]] = []  # ids sent in each response
        self.trickled = 0  # bytes sent one at a time (`trickle_s` turns)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> MockOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def tool_messages(self, request_index: int) -> dict[str, str]:
        """`{tool_call_id: content}` of the tool messages in one recorded request."""
        return {
            m["tool_call_id"]: m["content"] for m in self.requests[request_index]["messages"] if m.get("role") == "tool"
        }

    def reply_to(self, call_id: str) -> tuple[int, str]:
        """The first request that carries the tool message answering `call_id`: (index, content)."""
        for i in range(len(self.requests)):
            msgs = self.tool_messages(i)
            if call_id in msgs:
                return i, msgs[call_id]
        raise AssertionError(f"no request carried a tool message for {call_id}")

    def _next(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.requests.append(body)
            turn = self.script.pop(0) if self.script else {"content": self.final_text}
        return turn(body) if callable(turn) else turn

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        turn = self._next(body)
        n = len(self.requests)
        calls = [
            {
                "id": call.get("id", f"call_{n}_{i}"),  # an explicit None is sent as null
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": call["arguments"]
                    if isinstance(call["arguments"], str)
                    else json.dumps(call["arguments"]),
                },
            }
            for i, call in enumerate(turn.get("tool_calls", []))
        ]
        message: dict[str, Any] = {"role": "assistant", "content": turn.get("content", "" if calls else "ok")}
        if calls:
            message["tool_calls"] = calls
        usage = turn.get("usage") or {
            # like a real server, the tool schemas count as prompt tokens
            "prompt_tokens": (len(json.dumps(body.get("messages", []))) + len(json.dumps(body.get("tools", [])))) // 4,
            "completion_tokens": len(json.dumps(message)) // 4 + 1,
        }
        with self._lock:
            self.tool_call_ids.append([c["id"] for c in calls])
        if "raw_usage" in turn:  # sent as is: whatever a hostile server may claim (not recorded in `usages`)
            wire_usage = turn["raw_usage"]
        else:
            prompt, completion = int(usage["prompt_tokens"]), int(usage["completion_tokens"])
            with self._lock:
                self.usages.append((prompt, completion))
            wire_usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        reply = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "mock"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": wire_usage,
        }
        if "trickle_s" in turn:
            reply["trickle_s"] = turn["trickle_s"]
        return turn.get("raw_reply", reply)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        mock = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self.send_error(404)
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                reply = mock._completion(body)
                if isinstance(reply, dict) and "trickle_s" in reply:
                    self._trickle(reply)
                    return
                if body.get("stream"):
                    self._stream(reply)
                    return
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _trickle(self, reply: dict[str, Any]) -> None:
                pause = float(reply.pop("trickle_s"))
                data = json.dumps(reply).encode()
                head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
                try:
                    for byte in head.encode() + data:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        with mock._lock:
                            mock.trickled += 1
                        time.sleep(pause)
                except OSError:  # the client gave up: what the deadline is for
                    pass
                self.close_connection = True

            def _stream(self, reply: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                msg = reply["choices"][0]["message"]
                delta: dict[str, Any] = {"role": "assistant", "content": msg.get("content") or ""}
                if msg.get("tool_calls"):
                    delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(msg["tool_calls"])]
                chunks = [
                    {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": reply["choices"][0]["finish_reason"]}],
                     "usage": reply["usage"]},
                ]  # fmt: skip
                for chunk in chunks:
                    frame = {"id": reply["id"], "object": "chat.completion.chunk", "model": reply["model"], **chunk}
                    self.wfile.write(f"data: {json.dumps(frame)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")

        return Handler
