"""The `llm` policy: a meta LLM proposes this iteration's candidates through a bounded tool loop.

Runs inside the sync `propose` node. The model (langchain-openai `ChatOpenAI` on any OpenAI-compatible
endpoint, or any chat model with `bind_tools` in tests) sees a bounded briefing (agent/prompts.py) and
acts only through the tools of `agent.tools.Toolbox`; a tool refusal comes back as a `ToolMessage` it can
act on, and malformed tool-call JSON is answered the same way. The loop stops when the model calls
`finish` or answers without a tool call, after `ctx.llm_max_turns` calls, when the session's token or cost
budget is spent (checked before every call, so an exhausted budget means no call at all), or when the
endpoint fails. Every call's tokens and cost are recorded for the `propose` node. The rest of the graph
(backtest, train, decide) is the same as for the heuristic policy: this returns the `CandidateInfo`s
created, submitted or refused.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from agent import accounting, ledger, prompts
from agent.context import Context
from agent.state import CandidateInfo, State
from harness.manifest import Harness

NODE = "propose"
MAX_CONTEXT_CHARS = 40_000  # above this, older tool results are elided
KEEP_RECENT_RESULTS = 6


@dataclass
class LLMOutcome:
    """What one propose step of the LLM produced."""

    candidates: list[CandidateInfo] = field(default_factory=list)
    budget_stop: str = ""  # the session's LLM budget is spent: the session should stop
    note: str = ""  # why the loop ended early otherwise (turn budget, endpoint failure)
    turns: int = 0


def make_chat_model(ctx: Context) -> Any:
    """`ChatOpenAI` for `ctx.llm_model` on `OPENAI_BASE_URL` (default: OpenAI) with `OPENAI_API_KEY`."""
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    if not os.environ.get("OPENAI_API_KEY"):
        raise ValueError("the llm policy needs OPENAI_API_KEY (any value for a local server) and OPENAI_BASE_URL")
    return ChatOpenAI(
        model=ctx.llm_model,
        base_url=os.environ.get("OPENAI_BASE_URL") or None,
        api_key=SecretStr(os.environ["OPENAI_API_KEY"]),
        temperature=0,
        max_retries=0,
        timeout=ctx.llm_timeout_s,
        use_responses_api=False,
    )


def propose_with_llm(ctx: Context, state: State, harness: Harness, model: Any = None) -> LLMOutcome:
    """Run the tool loop for this iteration and return the candidates it created."""
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
    from openai import APIError

    from agent.tools import Toolbox

    url = ledger.store_url(ctx)
    outcome = LLMOutcome()
    outcome.budget_stop = accounting.budget_stop(
        accounting.session_usage(url, state["session_id"]), ctx.max_llm_tokens, ctx.max_cost_usd
    )
    if outcome.budget_stop:
        return outcome  # the budget is spent: no call at all
    box = Toolbox(ctx, state, harness)
    bound = (model if model is not None else make_chat_model(ctx)).bind_tools(box.schemas())
    messages: list[Any] = [SystemMessage(prompts.SYSTEM_PROMPT), HumanMessage(_briefing(ctx, state, harness, box))]
    while not box.finished:
        if outcome.turns >= ctx.llm_max_turns:
            outcome.note = prompts.TURNS_EXHAUSTED.format(turns=outcome.turns)
            break
        try:
            reply = bound.invoke(_bounded(messages))
        except APIError as exc:
            outcome.note = f"LLM call failed: {type(exc).__name__}: {exc}"
            break
        outcome.turns += 1
        _account(ctx, url, state["session_id"], reply)
        messages.append(reply)
        for bad in reply.invalid_tool_calls:
            why = f"ERROR: malformed tool call {bad.get('name')!r}: {bad.get('error') or 'arguments are not JSON'}"
            messages.append(ToolMessage(f"{why}; send the arguments as one valid JSON object", tool_call_id=bad["id"]))
        if not reply.tool_calls and not reply.invalid_tool_calls:
            break  # the model answered in prose: it is done
        for call in reply.tool_calls:
            messages.append(ToolMessage(box.call(call["name"], call["args"]), tool_call_id=call["id"]))
        if not box.finished:
            outcome.budget_stop = accounting.budget_stop(
                accounting.session_usage(url, state["session_id"]), ctx.max_llm_tokens, ctx.max_cost_usd
            )
            if outcome.budget_stop:
                break
    box.close()
    outcome.candidates = box.made
    _write_transcript(ctx, state, messages, outcome)
    return outcome


def _briefing(ctx: Context, state: State, harness: Harness, box: Any) -> str:
    m = harness.manifest
    alerts = [f for f in state["report"]["findings"] if f["severity"] != "ok"]
    return prompts.render_briefing(
        session_id=state["session_id"],
        iteration=state["iteration"],
        version=state["version"],
        harness={
            "harness_name": m.name,
            "domain": m.domain,
            "editable": m.surface.editable,
            "protected": m.surface.protected,
            "reward": m.reward,
            "group_filter": m.group_filter or "none",
            "trainer_config": m.trainer.config,
            "diagnostics": m.diagnostics or "none (propose_diagnostic writes under the editable folder)",
        },
        alerts=alerts,
        earlier=state.get("candidates", []),
        budgets={
            "max_turns": ctx.llm_max_turns,
            "max_candidates": ctx.max_candidates,
            "max_backtests": box.max_backtests,
            "max_analyses": box.max_analyses,
        },
    )


def _account(ctx: Context, url: str, session_id: str, reply: Any) -> None:
    """Record the call's tokens (as the server reported them) and its cost."""
    usage = reply.usage_metadata or {}
    prompt_tokens, completion_tokens = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
    accounting.record_usage(
        url,
        session_id=session_id,
        node=NODE,
        model=ctx.llm_model,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=accounting.call_cost(ctx.llm_model, prompt_tokens, completion_tokens, ctx.price_per_1k),
    )


def _bounded(messages: list[Any]) -> list[Any]:
    """Elide older tool results (keeping the tool-call pairing) once the context grows past the cap."""
    from langchain_core.messages import ToolMessage

    if sum(len(str(m.content)) for m in messages) <= MAX_CONTEXT_CHARS:
        return messages
    tool_positions = [i for i, m in enumerate(messages) if isinstance(m, ToolMessage)]
    old = set(tool_positions[:-KEEP_RECENT_RESULTS])
    return [
        ToolMessage(f"{str(m.content)[:200]}\n{prompts.ELIDED}", tool_call_id=m.tool_call_id) if i in old else m
        for i, m in enumerate(messages)
    ]


def _write_transcript(ctx: Context, state: State, messages: list[Any], outcome: LLMOutcome) -> None:
    """Keep the iteration's conversation as an artefact (audit trail; never read back by the controller)."""
    folder = ctx.session_dir(state["session_id"]) / "llm" / f"iter{state['iteration']}"
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{"type": m.type, "content": str(m.content), "tool_calls": getattr(m, "tool_calls", None)} for m in messages]
    rows.append({"type": "end", "turns": outcome.turns, "budget_stop": outcome.budget_stop, "note": outcome.note})
    (folder / "transcript.json").write_text(json.dumps(rows, indent=1, default=str))
