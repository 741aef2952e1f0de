"""The stdlib mock OpenAI server drives the real `ChatOpenAI` (tool calls, malformed JSON, usage)."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from mock_openai import MockOpenAI

pytestmark = pytest.mark.llm

TOOL = {
    "type": "function",
    "function": {"name": "read_file", "description": "read", "parameters": {"type": "object", "properties": {}}},
}


def _model(mock: MockOpenAI, **kw: object) -> ChatOpenAI:
    return ChatOpenAI(
        model="mock-model", base_url=mock.base_url, api_key="unused", temperature=0, max_retries=0, timeout=10,
        use_responses_api=False, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def test_tool_calls_usage_and_malformed_arguments_reach_chatopenai() -> None:
    script = [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "harness/reward.py"}}],
         "usage": {"prompt_tokens": 11, "completion_tokens": 7}},
        {"tool_calls": [{"name": "read_file", "arguments": '{"path": "harness/reward.py"'}]},
    ]  # fmt: skip
    with MockOpenAI(script) as mock:
        model = _model(mock).bind_tools([TOOL])
        first = model.invoke([HumanMessage("go")])
        second = model.invoke([HumanMessage("again")])
        third = model.invoke([HumanMessage("and?")])
    assert first.tool_calls[0]["name"] == "read_file" and first.tool_calls[0]["args"] == {"path": "harness/reward.py"}
    assert first.usage_metadata["input_tokens"] == 11 and first.usage_metadata["output_tokens"] == 7
    assert not second.tool_calls and second.invalid_tool_calls[0]["name"] == "read_file"
    assert third.content == mock.final_text and not third.tool_calls
    assert [r["model"] for r in mock.requests] == ["mock-model"] * 3
    assert mock.requests[0]["tools"][0]["function"]["name"] == "read_file"
    assert second.usage_metadata["input_tokens"] == mock.usages[1][0]


def test_streaming_tool_calls_merge() -> None:
    script = [{"tool_calls": [{"name": "read_file", "arguments": {"path": "x"}}]}]
    with MockOpenAI(script) as mock:
        reply = _model(mock, streaming=True).bind_tools([TOOL]).invoke([HumanMessage("go")])
    assert mock.requests[0]["stream"] is True
    assert reply.tool_calls[0]["args"] == {"path": "x"}
