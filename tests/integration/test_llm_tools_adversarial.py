"""The LLM policy's tools refuse bad requests with a reason the model receives, and record everything.

Real `ChatOpenAI` over HTTP against the stdlib mock server, real git worktrees of a copy of
examples/arithmetic, real SQLite store, process sandbox; the v0 run is fabricated (no training).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from llm_session import fake_session
from mock_openai import MockOpenAI, load_script
from sqlalchemy import select

from agent.adapters import ledger
from agent.adapters.ledger import store_url
from agent.nodes.propose import propose
from agent.policies.llm import propose_with_llm
from harness.manifest import load_harness
from store import models

pytestmark = pytest.mark.llm
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llm"

# tool-call id in adversarial.json → what the tool message sent back to the model must say
EXPECTED = {
    "bad_json": "malformed tool call 'read_file'",
    "missing": "no such file 'harness/no_such_file.py'",
    "protected_read": "eval/strict.py is on the protected surface",
    "unknown": "unknown tool 'launch_rockets'",
    "bad_args": "bad arguments for create_candidate: hypothesis: Field required",
    "open1": "opened candidate",
    "protected_write": "eval/strict.py is on the protected surface",
    "bad_patch": "patch does not apply",
    "w1": "wrote harness/reward.py",
    "w2": "patch applied to ['harness/trainer.yaml']",
    "refused_multi": "REFUSED: refused: multi-factor diff touches ['reward', 'trainer']",
    "evidence": "rollouts match",
    "skills": "strict-answer-extraction",
    "open2": "opened candidate",
    "bt": "request_backtest are off",  # the process sandbox runs no model-edited code in a tool
    "submit2": "submitted",
    "over_budget": "over budget: this iteration allows 1 candidate(s)",
}


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture()
def session(tmp_path: Path, git_available: None) -> tuple:
    return fake_session(tmp_path, max_candidates=1)


def _run(ctx, state, script: list) -> tuple[MockOpenAI, object]:  # type: ignore[no-untyped-def]
    with MockOpenAI(script) as mock, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", mock.base_url)
        outcome = propose_with_llm(ctx, state, load_harness(Path(state["harness_dir"])))
    return mock, outcome


def test_every_bad_request_comes_back_with_its_reason_and_the_session_goes_on(session: tuple) -> None:
    ctx, state = session
    script = load_script(FIXTURES / "adversarial.json")
    mock, outcome = _run(ctx, state, script)

    turn_of = {call.get("id"): t for t, turn in enumerate(script) for call in turn["tool_calls"]}
    for call_id, expected in EXPECTED.items():
        index, content = mock.reply_to(call_id)
        assert index == turn_of[call_id] + 1, f"{call_id}: the reason must come in the very next request"
        assert expected in content, f"{call_id}: {content[:400]}"
    assert len(mock.requests) == len(script)  # `finish` ended the loop: no extra call
    sent = json.dumps(mock.requests)
    assert "Protected strict evaluator" not in sent  # the evaluator's code never reaches the model

    refused, submitted = outcome.candidates  # type: ignore[attr-defined]
    assert refused["status"] == "refused" and "multi-factor" in refused["reason"]
    assert submitted["status"] == "proposed" and submitted["factor"] == "reward" and submitted["commit"]
    assert submitted["skill"] == "strict-answer-extraction"

    with ledger.db(store_url(ctx)) as db:
        rows = {c.id: c for c in db.scalars(select(models.Candidate))}
        assert rows[refused["id"]].status == "refused" and "multi-factor" in rows[refused["id"]].refusal_reason
        assert rows[submitted["id"]].status == "proposed"
        uses = db.scalars(select(models.SkillUse).where(models.SkillUse.candidate_id == submitted["id"])).all()
        assert len(uses) == 1
        usage = db.scalars(select(models.LLMUsage).order_by(models.LLMUsage.id)).all()
        assert [(u.prompt_tokens, u.completion_tokens) for u in usage] == mock.usages
        assert {u.node for u in usage} == {"propose"} and all(u.cost_usd == 0.0 for u in usage)
        trace = {(t.tool, t.query): t.used for t in db.scalars(select(models.SearchTrace))}
    # what the submitted candidate referenced (declared evidence, skill, the file it changed) is marked used
    assert trace[("search_skills", "<health report triggers>")] is True
    assert trace[("read_file", "harness/reward.py")] is True
    assert trace[("search_cases", "reward")] is False
    assert any(tool == "sample_rollouts" and used for (tool, _), used in trace.items())
    transcript = Path(ctx.session_dir(state["session_id"])) / "llm" / "iter1" / "transcript.json"
    assert json.loads(transcript.read_text())[-1]["turns"] == len(script)


def test_price_per_1k_prices_every_call_from_the_reported_tokens(tmp_path: Path, git_available: None) -> None:
    ctx, state = fake_session(tmp_path, price_per_1k=2.0)
    # (reports above the local count of what was sent, which is what an honest server reports: they are kept)
    script = [
        {"tool_calls": [{"name": "read_health_report", "arguments": {}}], "usage": {"prompt_tokens": 10_000,
                                                                                    "completion_tokens": 500}},
        {"content": "nothing worth trying", "usage": {"prompt_tokens": 20_000, "completion_tokens": 250}},
    ]  # fmt: skip
    _run(ctx, state, script)
    from agent.llm.accounting import session_usage

    spent = session_usage(store_url(ctx), state["session_id"])
    assert (spent.calls, spent.prompt_tokens, spent.completion_tokens) == (2, 30_000, 750)
    assert spent.cost_usd == pytest.approx(30.75 * 2.0)


def test_spent_token_budget_stops_the_loop_and_then_no_model_call_is_made(session: tuple) -> None:
    ctx, state = session
    import dataclasses

    ctx = dataclasses.replace(ctx, max_llm_tokens=50)
    script = [
        {"tool_calls": [{"name": "read_health_report", "arguments": {}}], "usage": {"prompt_tokens": 40,
                                                                                    "completion_tokens": 20}},
        {"tool_calls": [{"name": "finish", "arguments": {}}]},
    ]  # fmt: skip
    mock, outcome = _run(ctx, state, script)
    # the server claims 60 tokens; what was sent counts more (the local count wins): the budget is spent either way
    assert len(mock.requests) == 1 and "token budget spent (" in outcome.budget_stop  # type: ignore[attr-defined]
    assert "/50 tokens)" in outcome.budget_stop  # type: ignore[attr-defined]

    with MockOpenAI([]) as idle, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", idle.base_url)
        update = propose(state, SimpleNamespace(context=ctx))  # type: ignore[arg-type]
    assert idle.requests == []  # the policy refused to call the model at all
    assert update["candidates"] == [] and "token budget spent" in update["llm_stop_reason"]
