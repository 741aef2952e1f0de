"""A model call ends within `--llm-timeout` in all, however slowly its endpoint answers.

The HTTP client's timeout bounds each read, so a reply trickled one byte a second held one call for three
minutes under ``--llm-timeout 30``. Here the mock server trickles its whole response (status line, headers,
body) a byte every 0.2 s; real `ChatOpenAI` through the `propose` node: the call is abandoned at the
deadline, its connection is cut (the trickle stops), and the step ends with a note the session survives.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from llm_session import fake_session
from mock_openai import MockOpenAI

from agent.nodes.propose import propose

pytestmark = pytest.mark.llm
DEADLINE_S = 2.0


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def _open_call() -> dict[str, Any]:
    args = {"slug": "slow", "factors": ["reward"], "hypothesis": "h", "success_criterion": "c"}
    return {"id": "open", "name": "create_candidate", "arguments": args}


def test_a_trickled_reply_ends_the_call_at_its_deadline(tmp_path: Path, git_available: None) -> None:
    ctx, state = fake_session(tmp_path, max_candidates=1, llm_timeout_s=DEADLINE_S)
    script = [{"tool_calls": [_open_call()]}, {"content": "slow", "trickle_s": 0.2}]
    with MockOpenAI(script) as mock, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", mock.base_url)
        start = time.monotonic()
        update = propose(state, SimpleNamespace(context=ctx))  # type: ignore[arg-type]
        took = time.monotonic() - start
        sent_at_return = mock.trickled
        time.sleep(1.0)
        settled = mock.trickled
        time.sleep(1.0)
        assert mock.trickled == settled, "the abandoned call's connection was cut: the trickle stopped"
    assert len(mock.requests) == 2
    assert took < DEADLINE_S + 5, f"the propose step took {took:.1f} s"
    assert 0 < sent_at_return < 40, sent_at_return  # about DEADLINE_S / 0.2 bytes: the reply was never whole
    (cand,) = update["candidates"]
    assert cand["status"] == "refused" and "not submitted" in cand["reason"]
    transcript = ctx.session_dir(state["session_id"]) / "llm" / "iter1" / "transcript.json"
    note = json.loads(transcript.read_text())[-1]["note"]
    assert note.startswith("LLM call failed: LLMDeadlineError") and f"{DEADLINE_S:g} s in all" in note, note


def test_a_reply_within_the_deadline_is_read_as_before(tmp_path: Path, git_available: None) -> None:
    ctx, state = fake_session(tmp_path, max_candidates=1, llm_timeout_s=DEADLINE_S)
    finish = {"id": "done", "name": "finish", "arguments": {"summary": "nothing to do"}}
    with MockOpenAI([{"tool_calls": [finish], "trickle_s": 0.001}]) as mock, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", mock.base_url)
        update = propose(state, SimpleNamespace(context=ctx))  # type: ignore[arg-type]
    assert mock.trickled > 200 and len(mock.requests) == 1
    assert update["candidates"] == []
    transcript = ctx.session_dir(state["session_id"]) / "llm" / "iter1" / "transcript.json"
    assert json.loads(transcript.read_text())[-1]["note"] == ""
