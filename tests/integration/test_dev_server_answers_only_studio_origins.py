"""A web page in a local browser cannot drive the documented single-user `langgraph dev` server.

Checked against the real dev server (langgraph.json):
- CORS answers Studio's origins only, and the MCP and A2A endpoints (the graph a second way) are off;
- a body that is not `application/json` (`text/plain`, a form, multipart, an untyped body: the requests a
  page sends without a preflight, which CORS never sees) is refused with 415 and starts nothing;
- a `Host` that is not loopback or one the owner lists in `EVOTRAINER_SERVER_ALLOWED_HOSTS` (a page that
  rebinds its own DNS name to 127.0.0.1) is refused with 400;
- a run's webhook to a private, loopback, link-local or non-https address is refused (422).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import pytest
from dev_server import ROOT, dev_server

STUDIO = "https://smith.langchain.com"


def _preflight(url: str, origin: str) -> tuple[int, str | None]:
    headers = {"Origin": origin, "Access-Control-Request-Method": "POST"}
    headers["Access-Control-Request-Headers"] = "content-type"
    request = urllib.request.Request(url + "/threads/search", method="OPTIONS", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers.get("access-control-allow-origin")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("access-control-allow-origin")


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize("config", ["langgraph.json", "langgraph.shared.json"])
def test_both_server_configs_name_studio_as_the_only_browser_origin(config: str) -> None:
    http = json.loads((ROOT / config).read_text())["http"]
    assert set(http["cors"]["allow_origins"]) <= {STUDIO, "https://eu.smith.langchain.com"}
    assert http["disable_mcp"] is True and http["disable_a2a"] is True


def test_a_foreign_page_cannot_drive_the_open_server(tmp_path: Path) -> None:
    owner = {"EVOTRAINER_SERVER_ALLOWED_HOSTS": "evotrainer.test", "EVOTRAINER_SERVER_WORKDIR": str(tmp_path / "w"),
             "EVOTRAINER_SERVER_SANDBOX": "process", "XDG_STATE_HOME": str(tmp_path / "state")}  # fmt: skip
    with dev_server(tmp_path, **owner) as url, httpx.Client(base_url=url, timeout=30) as http:
        assert _preflight(url, "https://evil.example") == (400, None)
        assert _preflight(url, STUDIO) == (200, STUDIO)
        assert _status(url + "/mcp") == 404
        assert _status(url + "/a2a/evotrainer") == 404

        run = json.dumps({"assistant_id": "evotrainer", "input": {"harness": "x"}}).encode()
        before = len(http.post("/threads/search", json={"limit": 1000}).json())
        simple: list[dict[str, Any]] = [
            {"content": run, "headers": {"Content-Type": "text/plain;charset=UTF-8"}},
            {"data": {"assistant_id": "evotrainer"}},
            {"files": {"input": ("run.json", run)}},
            {"content": run},
        ]
        for body in simple:
            for path in ("/runs/wait", "/threads"):
                answer = http.post(path, **body)
                assert answer.status_code == 415, (path, body, answer.text)
        assert len(http.post("/threads/search", json={"limit": 1000}).json()) == before
        tid = http.post("/threads", json={}).json()["thread_id"]
        assert http.get(f"/threads/{tid}/runs").json() == []

        port = url.rsplit(":", 1)[1]
        for host in (f"attacker.example:{port}", "attacker.example", f"127.0.0.1.attacker.example:{port}", ""):
            answer = http.get("/ok", headers={"Host": host})
            assert answer.status_code == 400 and "EVOTRAINER_SERVER_ALLOWED_HOSTS" in answer.text, (host, answer.text)
        for host in (f"localhost:{port}", f"[::1]:{port}", f"EvoTrainer.test:{port}", "evotrainer.test"):
            assert http.get("/ok", headers={"Host": host}).status_code == 200, host

        for hook in (
            "https://10.0.0.7/hook",
            "https://127.0.0.1/hook",
            "https://169.254.169.254/",
            "ftp://example.com/",
        ):
            answer = http.post(
                f"/threads/{tid}/runs", json={"assistant_id": "evotrainer", "input": {"harness": "x"}, "webhook": hook}
            )
            assert answer.status_code == 422, (hook, answer.text)
