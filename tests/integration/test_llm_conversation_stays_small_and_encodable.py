"""What one reply leaves in the conversation is bounded and can always be sent again.

Before the fix, after one reply with 10,000 tool calls every later request re-sent ~10,000 messages, a
50 MB argument stayed in the history, and a lone surrogate ("\\ud800") in a reply made every later request
fail to encode. Real `ChatOpenAI` over HTTP against the scripted mock server, real worktrees and store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llm_session import fake_session
from mock_openai import MockOpenAI

from agent.policies.llm import MAX_KEPT_ARGS_CHARS, MAX_TOOL_CALLS_PER_REPLY, propose_with_llm
from harness.manifest import load_harness

pytestmark = pytest.mark.llm
HUGE = 5_000_000  # characters of one argument (the incident had 50 MB; the cap applies the same way)


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def _call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": args}


def _run(ctx: Any, state: dict[str, Any], script: list[Any]) -> tuple[MockOpenAI, Any]:
    with MockOpenAI(script) as mock, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", mock.base_url)
        outcome = propose_with_llm(ctx, state, load_harness(Path(state["harness_dir"])))
    return mock, outcome


def _assistant(request: dict[str, Any]) -> dict[str, Any]:
    return next(m for m in reversed(request["messages"]) if m["role"] == "assistant")


def test_a_reply_with_ten_thousand_calls_and_a_huge_argument_leaves_a_small_conversation(
    tmp_path: Path, git_available: None
) -> None:
    ctx, state = fake_session(tmp_path, max_candidates=1)
    big_but_valid = "# a long comment\n" * 6_000  # ~100 kB: accepted by write_file, too long to re-send
    calls = [
        _call("open", "create_candidate", slug="big", factors=["reward"], hypothesis="h", success_criterion="c"),
        _call("huge", "write_file", path="harness/reward.py", content="x" * HUGE),  # over the tool's bound
        _call("big", "write_file", path="harness/notes.py", content=big_but_valid),
        *(_call(f"many{i}", "search_cases") for i in range(10_000)),
    ]
    script = [{"tool_calls": calls}, {"tool_calls": [_call("done", "finish", summary="done")]}]
    mock, outcome = _run(ctx, state, script)
    assert outcome.note == "" and len(mock.requests) == 2
    after = mock.requests[1]
    assert len(json.dumps(after)) < 60_000, len(json.dumps(after))  # not 5 MB + 10,000 messages
    kept = _assistant(after)["tool_calls"]
    assert [c["id"] for c in kept] == [c["id"] for c in calls[:MAX_TOOL_CALLS_PER_REPLY]]
    answers = mock.tool_messages(1)
    assert sorted(answers) == sorted(c["id"] for c in kept)  # one answer per kept call, none for the dropped
    assert answers["huge"].startswith("ERROR: bad arguments for write_file")
    assert answers["big"].startswith("wrote harness/notes.py")
    args = {c["id"]: json.loads(c["function"]["arguments"]) for c in kept}
    size = len(json.dumps(calls[1]["arguments"]))
    assert args["huge"] == {"elided": f"[{size} characters of arguments, not kept in the conversation]"}
    assert "elided" in args["big"] and "characters of arguments" in args["big"]["elided"]
    assert args["open"]["slug"] == "big"  # short arguments stay as they were
    note = after["messages"][-1]
    assert note["role"] == "user" and f"{10_003 - MAX_TOOL_CALLS_PER_REPLY} tool call(s) more" in note["content"]
    assert f"({len(big_but_valid)} chars)" in answers["big"]  # the tool saw the whole argument
    assert len(json.dumps(args["big"])) < MAX_KEPT_ARGS_CHARS


def test_a_lone_surrogate_in_a_reply_does_not_stop_the_session(tmp_path: Path, git_available: None) -> None:
    ctx, state = fake_session(tmp_path, max_candidates=1)
    script = [
        {
            "content": "thinking \ud800 aloud",
            "tool_calls": [
                _call("read", "read_file", path="harness/reward.py"),
                _call("odd", "search_cases", query="spam \udfff"),
                {"id": "bad", "name": "list_files", "arguments": '{"path": "\\ud800'},  # malformed JSON too
            ],
        },
        {"content": "\udc80", "tool_calls": [_call("ls", "list_files")]},
        {"tool_calls": [_call("done", "finish", summary="done \ud83d")]},
    ]
    mock, outcome = _run(ctx, state, script)
    assert outcome.note == "" and len(mock.requests) == 3  # every later request was sent
    first = _assistant(mock.requests[1])
    assert first["content"] == "thinking \ufffd aloud"
    assert json.loads(first["tool_calls"][1]["function"]["arguments"]) == {"query": "spam \ufffd"}
    assert mock.reply_to("read")[1].startswith("def ") or "compute_score" in mock.reply_to("read")[1]
    assert mock.reply_to("bad")[1].startswith("ERROR: malformed tool call")
    assert "harness/reward.py" in mock.reply_to("ls")[1]
    transcript = ctx.session_dir(state["session_id"]) / "llm" / "iter1" / "transcript.json"
    assert json.loads(transcript.read_text())[-1]["type"] == "end"
