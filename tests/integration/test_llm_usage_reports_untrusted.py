"""A server reporting negative, absurd or malformed usage cannot lift the session's token budget.

Real `ChatOpenAI` against the scripted mock server sending the usage objects as they are. Before the fix,
one reply claiming negative usage let 6.6 M tokens through a cap of 1,000.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from llm_session import fake_session
from mock_openai import MockOpenAI
from sqlalchemy import select

from agent.adapters import ledger
from agent.adapters.ledger import store_url
from agent.llm import accounting
from agent.policies.llm import propose_with_llm
from harness.manifest import load_harness
from store import models

pytestmark = pytest.mark.llm


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def _turn(i: int, usage: Any) -> dict[str, Any]:
    return {"tool_calls": [{"id": f"c{i}", "name": "read_health_report", "arguments": {}}], "raw_usage": usage}


HOSTILE = [
    {"prompt_tokens": -10_000_000, "completion_tokens": -10_000_000, "total_tokens": -20_000_000},
    {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    {"prompt_tokens": "lots", "completion_tokens": None},
    {"prompt_tokens": 10**30, "completion_tokens": 1},
    {"prompt_tokens": -1.5e300, "completion_tokens": 2.5},
    None,
]


@pytest.mark.parametrize("usage", HOSTILE, ids=lambda u: str(u)[:40])
def test_hostile_usage_never_lifts_the_token_budget(tmp_path: Path, git_available: None, usage: Any) -> None:
    ctx, state = fake_session(tmp_path, max_candidates=1)
    ctx = dataclasses.replace(ctx, max_llm_tokens=8_000)  # ~3 calls of this briefing, counted locally
    script = [_turn(i, usage) for i in range(30)]
    with MockOpenAI(script) as mock, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", mock.base_url)
        outcome = propose_with_llm(ctx, state, load_harness(Path(state["harness_dir"])))
    # stopped by the budget, or (usage langchain cannot even parse) by three unreadable replies; never the script
    assert outcome.budget_stop.startswith("LLM token budget spent") or outcome.note.startswith("LLM call failed")
    assert len(mock.requests) <= 6, len(mock.requests)
    with ledger.db(store_url(ctx)) as db:
        rows = db.scalars(select(models.LLMUsage)).all()
    assert len(rows) == len(mock.requests)
    for row in rows:
        assert 0 < row.prompt_tokens <= accounting.MAX_TOKENS_PER_CALL
        assert 0 <= row.completion_tokens <= accounting.MAX_TOKENS_PER_CALL
        assert row.prompt_tokens >= 1000  # never below the local count of the briefing that was sent
    if outcome.budget_stop:
        assert accounting.session_usage(store_url(ctx), state["session_id"]).total_tokens >= 8_000


def test_an_honest_report_above_the_local_count_is_recorded_as_is(tmp_path: Path, git_available: None) -> None:
    ctx, state = fake_session(tmp_path, max_candidates=1, price_per_1k=1.0)
    usage = {"prompt_tokens": 50_000, "completion_tokens": 700, "total_tokens": 50_700}
    with MockOpenAI([{"content": "nothing to try", "raw_usage": usage}]) as mock, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", mock.base_url)
        propose_with_llm(ctx, state, load_harness(Path(state["harness_dir"])))
    spent = accounting.session_usage(store_url(ctx), state["session_id"])
    assert (spent.calls, spent.prompt_tokens, spent.completion_tokens) == (1, 50_000, 700)
    assert spent.cost_usd == pytest.approx(50.7)
