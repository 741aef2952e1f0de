"""Nothing the model or its endpoint sends ends a session.

Real `ChatOpenAI` over HTTP against the scripted mock server (real git worktrees, SQLite store, process
sandbox). Replies whose tool arguments are JSON but not an object, replies that are not chat completions at
all, calls without ids or with duplicate ids, a reply with 40 tool calls, calls after `finish`, tools that
raise exceptions of any type, an endpoint that drops the connection: each is answered to the model as a
refusal (by its call id) or ends the propose step with a note, and the `propose` node returns normally.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from llm_session import fake_session
from mock_openai import MockOpenAI
from sqlalchemy import func, select

from agent.adapters import ledger
from agent.adapters.ledger import store_url
from agent.llm.tools import Toolbox
from agent.nodes.propose import propose
from agent.policies.llm import MAX_TOOL_CALLS_PER_REPLY, UNREADABLE_REPLY, propose_with_llm
from harness.manifest import load_harness
from store import models

pytestmark = pytest.mark.llm
UNREADABLE = UNREADABLE_REPLY.split("(")[0]


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def _call(cid: str | None, name: str, arguments: Any = None) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": {} if arguments is None else arguments}


def _run(ctx: Any, state: dict[str, Any], script: list[Any]) -> tuple[MockOpenAI, Any]:
    with MockOpenAI(script) as mock, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", mock.base_url)
        outcome = propose_with_llm(ctx, state, load_harness(Path(state["harness_dir"])))
    return mock, outcome


def _last_user_text(request: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")


def _usage_rows(ctx: Any) -> int:
    with ledger.db(store_url(ctx)) as db:
        return int(db.scalar(select(func.count()).select_from(models.LLMUsage)) or 0)


def test_unreadable_replies_capped_calls_and_odd_ids_are_answered_and_the_loop_goes_on(
    tmp_path: Path, git_available: None
) -> None:
    ctx, state = fake_session(tmp_path, max_candidates=1)
    many = [_call(f"many{i}", "read_health_report") for i in range(40)]
    script = [
        {"tool_calls": [_call("list", "read_file", "[1, 2]")]},  # JSON, not an object
        {"tool_calls": [_call("int", "read_file", "1")]},
        {"tool_calls": [_call("ok", "read_health_report")]},  # a readable reply resets the count
        {"raw_reply": {"object": "not a chat completion", "choices": "nope"}},
        {"tool_calls": many},
        {"tool_calls": [_call(None, "read_health_report"), _call("dup", "list_files"), _call("dup", "search_cases")]},
        {"tool_calls": [_call("fin", "finish", {"summary": "done"}), _call("late", "list_files")]},
    ]
    mock, outcome = _run(ctx, state, script)
    assert len(mock.requests) == len(script)  # every reply got an answer and the model was asked again
    assert UNREADABLE in _last_user_text(mock.requests[1]) and "ValidationError" in _last_user_text(mock.requests[1])
    assert UNREADABLE in _last_user_text(mock.requests[2])
    assert UNREADABLE in _last_user_text(mock.requests[4])
    answers = mock.tool_messages(5)
    ran = [i for i in range(40) if f"many{i}" in answers and not answers[f"many{i}"].startswith("ERROR")]
    answered = [k for k in answers if k.startswith("many")]
    assert ran == list(range(MAX_TOOL_CALLS_PER_REPLY)) and len(answered) == MAX_TOOL_CALLS_PER_REPLY
    kept = [c["id"] for c in next(m for m in mock.requests[5]["messages"] if m.get("tool_calls") and
                                  m["tool_calls"][0]["id"] == "many0")["tool_calls"]]  # fmt: skip
    assert kept == [f"many{i}" for i in range(MAX_TOOL_CALLS_PER_REPLY)]  # the rest are dropped
    assert f"{40 - MAX_TOOL_CALLS_PER_REPLY} tool call(s) more than the {MAX_TOOL_CALLS_PER_REPLY}" in (
        _last_user_text(mock.requests[5])
    )
    # a missing id and a duplicate are replaced by unique ids, in the assistant message and its answers alike
    assistant = next(m for m in reversed(mock.requests[6]["messages"]) if m["role"] == "assistant")
    ids = [c["id"] for c in assistant["tool_calls"]]
    assert len(ids) == len(set(ids)) == 3 and all(isinstance(i, str) and i for i in ids)
    answered = mock.tool_messages(6)
    assert all(not answered[i].startswith("ERROR") for i in ids)
    transcript = ctx.session_dir(state["session_id"]) / "llm" / "iter1" / "transcript.json"
    rows = json.loads(transcript.read_text())
    assert rows[-2]["type"] == "tool" and "finish was called earlier" in rows[-2]["content"]  # after finish: not run
    assert outcome.note == "" and outcome.turns == len(script)
    assert _usage_rows(ctx) == len(script)  # unreadable replies are charged too


def test_three_unreadable_replies_in_a_row_end_the_step_with_a_note(tmp_path: Path, git_available: None) -> None:
    ctx, state = fake_session(tmp_path, max_candidates=1)
    open_call = _call("open", "create_candidate", {"slug": "x", "factors": ["reward"], "hypothesis": "h",
                                                    "success_criterion": "c"})  # fmt: skip
    script = [{"tool_calls": [open_call]}] + [{"tool_calls": [_call(f"b{i}", "finish", '"text"')]} for i in range(3)]
    with MockOpenAI(script) as mock, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", mock.base_url)
        update = propose(state, SimpleNamespace(context=ctx))  # type: ignore[arg-type]
    assert len(mock.requests) == 4
    (cand,) = update["candidates"]
    assert cand["status"] == "refused" and "not submitted" in cand["reason"]
    transcript = ctx.session_dir(state["session_id"]) / "llm" / "iter1" / "transcript.json"
    end = json.loads(transcript.read_text())[-1]
    assert end["note"].startswith("LLM call failed: ValidationError")


def test_a_dropped_connection_ends_the_step_and_the_open_candidate_is_refused(
    tmp_path: Path, git_available: None
) -> None:
    ctx, state = fake_session(tmp_path, max_candidates=1)
    open_call = _call("open", "create_candidate", {"slug": "y", "factors": ["reward"], "hypothesis": "h",
                                                    "success_criterion": "c"})  # fmt: skip

    def drop(_body: dict[str, Any]) -> dict[str, Any]:
        raise ConnectionResetError("the server went away")

    _, outcome = _run(ctx, state, [{"tool_calls": [open_call]}, drop])
    assert outcome.note.startswith("LLM call failed: ") and "Connection" in outcome.note
    (cand,) = outcome.candidates
    assert cand["status"] == "refused"
    assert _usage_rows(ctx) == 2  # the failed call is charged for what was sent


@pytest.mark.parametrize("error", [ZeroDivisionError, KeyError, RecursionError, AttributeError, MemoryError])
def test_a_tool_raising_any_exception_is_an_error_message(
    tmp_path: Path, git_available: None, monkeypatch: pytest.MonkeyPatch, error: type[BaseException]
) -> None:
    ctx, state = fake_session(tmp_path, max_candidates=1)

    def boom(self: Toolbox, _args: Any) -> str:
        raise error("tool blew up")

    monkeypatch.setattr(Toolbox, "read_health_report", boom)
    script = [{"tool_calls": [_call("r", "read_health_report"), _call("l", "list_files")]}]
    mock, outcome = _run(ctx, state, script)
    assert mock.reply_to("r")[1].startswith(f"ERROR: read_health_report failed ({error.__name__}")
    assert "harness/reward.py" in mock.reply_to("l")[1]  # the next call of the same reply still ran
    assert len(mock.requests) == 2 and outcome.note == ""
