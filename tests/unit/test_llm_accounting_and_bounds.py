"""LLM cost accounting, budgets, bounded context, the briefing, and the gate escalation rule (pure)."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from agent.context import Context
from agent.llm import accounting, prompts
from agent.nodes.gates import effective_gate
from agent.policies import llm


def test_cost_uses_explicit_price_then_table_then_zero() -> None:
    assert accounting.call_cost("anything", 1000, 1000, price_per_1k=0.5) == pytest.approx(1.0)
    assert accounting.call_cost("gpt-4o-mini", 1000, 1000) == pytest.approx(0.00015 + 0.0006)
    assert accounting.call_cost("some-local-model", 12345, 678) == 0.0


def test_budget_stop_names_the_spent_budget_and_zero_means_unlimited() -> None:
    spent = accounting.Usage(calls=3, prompt_tokens=900, completion_tokens=200, cost_usd=0.02)
    assert accounting.budget_stop(spent, 0, 0.0) == ""
    assert "token budget" in accounting.budget_stop(spent, 1000, 0.0)
    assert accounting.budget_stop(spent, 1101, 0.0) == ""
    assert "cost budget" in accounting.budget_stop(spent, 0, 0.01)
    assert accounting.total([spent, spent]).total_tokens == 2200


def test_context_rejects_negative_budgets() -> None:
    with pytest.raises(ValueError, match="budgets"):
        Context(max_llm_tokens=-1)
    with pytest.raises(ValueError, match="escalate_after"):
        Context(escalate_after=-1)


@pytest.mark.parametrize(
    ("gate", "escalate_after", "failures", "expected"),
    [
        ("none", 2, 0, "none"),
        ("none", 2, 1, "none"),
        ("none", 2, 2, "all"),  # the paper's rule: two failed iterations in a row → a human decides
        ("launch", 2, 3, "all"),
        ("none", 0, 9, "none"),  # 0 = never escalate
        ("promote", 1, 0, "promote"),
    ],
)
def test_escalation_turns_every_gate_on_after_consecutive_failures(
    gate: str, escalate_after: int, failures: int, expected: str
) -> None:
    ctx = Context(gate=gate, escalate_after=escalate_after)  # type: ignore[arg-type]
    assert effective_gate(ctx, {"failures_in_row": failures}) == expected


def test_bounded_context_elides_old_tool_results_but_keeps_the_call_pairing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm, "MAX_CONTEXT_CHARS", 5000)
    messages: list = [SystemMessage("s"), HumanMessage("brief")]
    for i in range(10):
        messages.append(
            AIMessage("", tool_calls=[{"name": "read_file", "args": {}, "id": f"c{i}", "type": "tool_call"}])
        )
        messages.append(ToolMessage("x" * 1000, tool_call_id=f"c{i}"))
    bounded = llm._bounded(messages)
    tools = [m for m in bounded if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in tools] == [f"c{i}" for i in range(10)]
    assert sum(prompts.ELIDED in m.content for m in tools) == 10 - llm.KEEP_RECENT_RESULTS
    assert all(m.content == "x" * 1000 for m in tools[-llm.KEEP_RECENT_RESULTS :])
    assert llm._bounded(messages[:4]) == messages[:4]  # small contexts are untouched


def test_briefing_is_a_summary_with_alerts_surface_and_budgets() -> None:
    text = prompts.render_briefing(
        session_id="s1",
        iteration=2,
        version={"index": 1, "run_id": "r1", "strict_acc": 0.25, "train_reward": 0.9, "steps": 16},
        harness={
            "harness_name": "arithmetic",
            "domain": "math",
            "editable": ["harness/"],
            "protected": ["eval/"],
            "reward": "harness/reward.py:compute_score",
            "group_filter": "none",
            "trainer_config": "harness/trainer.yaml",
            "diagnostics": "none",
        },
        alerts=[
            {
                "severity": "critical",
                "alert_id": "reward_hacking",
                "layer": "score",
                "message": "m",
                "evidence_rollout_ids": ["a", "b"],
            }
        ],
        earlier=[{"id": "c1", "status": "pruned", "factor": "reward", "hypothesis": "h"}],
        budgets={"max_turns": 9, "max_candidates": 2, "max_backtests": 4, "max_analyses": 3},
    )
    assert "reward_hacking" in text and "2 evidence rollouts" in text
    assert "Protected: ['eval/']" in text and "c1 [pruned]" in text and "2 candidate(s)" in text
