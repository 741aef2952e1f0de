"""Issue 25 §1: a web page in a local browser cannot drive the documented `langgraph dev` server.

The server used to answer every origin's CORS preflight with `*`, so any page the user opened could start
sessions on it. langgraph.json (and langgraph.shared.json) now allow Studio's origins only, and turn off the
MCP and A2A endpoints, which expose the graph a second way. Checked against the real dev server.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

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


def test_a_foreign_page_gets_no_cors_answer_and_studio_does(tmp_path: Path) -> None:
    with dev_server(tmp_path) as url:
        assert _preflight(url, "https://evil.example") == (400, None)
        assert _preflight(url, STUDIO) == (200, STUDIO)
        assert _status(url + "/mcp") == 404
        assert _status(url + "/a2a/evotrainer") == 404
