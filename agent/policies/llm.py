"""The `llm` policy: a meta LLM proposes this iteration's candidates through a bounded tool loop.

Runs inside the sync `propose` node. The model (langchain-openai `ChatOpenAI` on any OpenAI-compatible
endpoint, or any chat model with `bind_tools` in tests) sees a bounded briefing (agent/llm/prompts.py) and
acts only through the tools of `agent.llm.tools.Toolbox`; a tool refusal comes back as a `ToolMessage` it can
act on, and malformed tool-call JSON is answered the same way. Model output never ends the session: an
unreadable reply is answered with the reason, tool failures of any kind are refusals, and a reply's tool
calls are capped (`MAX_TOOL_CALLS_PER_REPLY`). What stays in the conversation is bounded and encodable
: calls over the cap are dropped for one short note, long arguments that have been used give
way to a placeholder naming their size, and lone surrogates are replaced on the way in. The loop stops
when the model calls `finish` or answers without a tool call, after `ctx.llm_max_turns` calls, when the
session's token or cost budget is spent (checked before every call, so an exhausted budget means no call
at all), after `MAX_BAD_REPLIES` unreadable replies in a row, or when the endpoint fails, a call that runs
past `ctx.llm_timeout_s` in all (`invoke_within`: a reply trickled a byte at a time) included. Every call's
tokens and cost are recorded for the `propose` node: the larger of the server's (clamped) report and a
local count of what was sent and received.
The rest of the graph (backtest, train, decide) is the same as for the heuristic policy: this returns the
`CandidateInfo`s created, submitted or refused.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from agent.adapters import ledger
from agent.context import Context
from agent.llm import accounting, prompts
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
    import httpx
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
        timeout=ctx.llm_timeout_s,  # per read; `invoke_within` bounds the whole call
        http_client=httpx.Client(timeout=ctx.llm_timeout_s),  # ours, so a call past its deadline can be cut
        use_responses_api=False,
    )


class LLMDeadlineError(TimeoutError):
    """A model call that did not finish within its total deadline (`Context.llm_timeout_s`)."""


def invoke_within(bound: Any, messages: list[Any], deadline_s: float, http_client: Any = None) -> Any:
    """Return `bound.invoke(messages)`, or raise `LLMDeadlineError` once `deadline_s` seconds have passed.

    The HTTP client's timeout applies to each read, so an endpoint that trickles its reply a byte at a time
    would hold a call for as long as it likes. The call runs in a daemon thread and is waited for at most
    `deadline_s`; at the deadline `http_client` (the model's own) is closed, which ends the stranded read at
    its next byte, and the caller gets the error.
    """
    import contextvars
    import threading

    done = threading.Event()
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["reply"] = bound.invoke(messages)
        except BaseException as exc:  # handed to the caller, which classifies it
            box["error"] = exc
        finally:
            done.set()

    context = contextvars.copy_context()  # the graph's run config (callbacks, streaming) follows the call
    threading.Thread(target=context.run, args=(call,), name="llm-call", daemon=True).start()
    if not done.wait(deadline_s):
        if http_client is not None:
            http_client.close()
        raise LLMDeadlineError(
            f"the model call took longer than {deadline_s:g} s in all (--llm-timeout); the reply was abandoned"
        )
    if "error" in box:
        raise box["error"]
    return box["reply"]


def propose_with_llm(ctx: Context, state: State, harness: Harness, model: Any = None) -> LLMOutcome:
    """Run the tool loop for this iteration and return the candidates it created.

    Nothing the model or its endpoint sends ends the session: a reply that cannot be read
    (tool arguments that are JSON but not an object, a malformed response) is answered with a message
    saying why, up to `MAX_BAD_REPLIES` in a row; a failing endpoint ends the propose step with a note;
    every tool failure comes back as an ``ERROR:`` tool message; a reply with more than
    `MAX_TOOL_CALLS_PER_REPLY` calls runs the first ones and drops the rest, with one note saying so.
    """
    from langchain_core.messages import HumanMessage, SystemMessage

    from agent.llm.tools import Toolbox

    url = ledger.store_url(ctx)
    outcome = LLMOutcome()
    box = Toolbox(ctx, state, harness)
    tools = box.schemas()
    meter = _Meter(ctx, url, state["session_id"], len(json.dumps(tools)))
    outcome.budget_stop = meter.budget_stop()
    if outcome.budget_stop:
        return outcome  # the budget is spent: no call at all
    chat = model if model is not None else make_chat_model(ctx)
    bound = chat.bind_tools(tools)
    messages: list[Any] = [SystemMessage(prompts.SYSTEM_PROMPT), HumanMessage(_briefing(ctx, state, harness, box))]
    bad_replies = 0
    while not box.finished:
        outcome.budget_stop = meter.budget_stop()
        if outcome.budget_stop:
            break  # checked before every call: a spent budget means no call at all
        if outcome.turns >= ctx.llm_max_turns:
            outcome.note = prompts.TURNS_EXHAUSTED.format(turns=outcome.turns)
            break
        sent = _bounded(messages)
        outcome.turns += 1
        try:
            reply = invoke_within(bound, sent, ctx.llm_timeout_s, getattr(chat, "http_client", None))
        except Exception as exc:  # any client or parsing failure: recorded, never raised out of the node
            meter.record(sent, None)
            why = _clean(f"{type(exc).__name__}: {str(exc)[:600]}")  # it may quote the reply
            if _is_transport_error(exc) or bad_replies >= MAX_BAD_REPLIES:
                outcome.note = f"LLM call failed: {why}"
                break
            bad_replies += 1
            messages.append(HumanMessage(UNREADABLE_REPLY.format(why=why)))
            continue
        bad_replies = 0
        meter.record(sent, reply)
        reply, dropped = _sanitised(reply, outcome.turns)
        messages.append(reply)
        if not reply.tool_calls and not reply.invalid_tool_calls:
            break  # the model answered in prose: it is done
        answers = _answer_calls(box, reply)
        messages += answers
        _elide_arguments(reply, answers)
        if dropped:
            messages.append(HumanMessage(DROPPED_CALLS.format(n=dropped, cap=MAX_TOOL_CALLS_PER_REPLY)))
    box.close()
    outcome.candidates = box.made
    _write_transcript(ctx, state, messages, outcome)
    return outcome


MAX_TOOL_CALLS_PER_REPLY = 16
MAX_KEPT_ARGS_CHARS = 8_000  # a call's arguments kept verbatim in the conversation once it has run
MAX_KEPT_REFUSED_ARGS_CHARS = 500  # the same for a refused call
DROPPED_CALLS = (
    "ERROR: your last reply held {n} tool call(s) more than the {cap} a reply may make: they did not run and "
    "are not kept in this conversation. Send again the ones you still need, at most {cap} per reply."
)
MAX_BAD_REPLIES = 2  # unreadable replies in a row before the propose step ends
MAX_REPLY_CHARS = 20_000  # of a reply's prose kept in the conversation
UNREADABLE_REPLY = (
    "ERROR: your last reply could not be read ({why}). Send tool calls whose arguments are one JSON object "
    "matching the tool's schema, or answer in prose when you are done."
)


def _is_transport_error(exc: Exception) -> bool:
    """Say whether the endpoint itself failed (no point asking the model again) rather than its reply."""
    import httpx
    import openai

    return isinstance(exc, (openai.APIError, httpx.HTTPError, TimeoutError, ConnectionError))


def _sanitised(reply: Any, turn: int) -> tuple[Any, int]:
    """Return the reply as kept in the conversation, and how many of its tool calls were dropped.

    What stays in the conversation is re-sent with every later request, so it is made safe and
    bounded here, on the way in. Every string (prose, tool names, ids and arguments) loses its lone
    surrogates (`_clean`: one would make every later request fail to encode); every tool call gets a
    unique string id; calls beyond `MAX_TOOL_CALLS_PER_REPLY` (malformed ones first) are dropped, unrun,
    and the caller says so in one short note; prose is cut at `MAX_REPLY_CHARS`; the raw response
    (``additional_kwargs``, which repeats every call's arguments) is not kept.
    """
    invalid = [_clean(dict(call)) for call in reply.invalid_tool_calls][:MAX_TOOL_CALLS_PER_REPLY]
    calls = [_clean(dict(call)) for call in reply.tool_calls][: MAX_TOOL_CALLS_PER_REPLY - len(invalid)]
    dropped = len(reply.tool_calls) + len(reply.invalid_tool_calls) - len(calls) - len(invalid)
    seen: set[str] = set()
    for i, call in enumerate([*calls, *invalid]):
        cid = call.get("id")
        cid = cid[:64] if isinstance(cid, str) and cid else f"call-{turn}-{i}"
        if cid in seen:
            cid = f"{cid[:48]}-dup{turn}-{i}"
        seen.add(cid)
        call["id"] = cid
    content = _clean(reply.content)
    if isinstance(content, str) and len(content) > MAX_REPLY_CHARS:
        content = content[:MAX_REPLY_CHARS] + "\n[... reply truncated]"
    update = {"content": content, "tool_calls": calls, "invalid_tool_calls": invalid, "additional_kwargs": {}}
    return reply.model_copy(update=update), dropped


def _clean(value: Any) -> Any:
    """Return `value` with every lone surrogate (in strings, keys included, at any depth) replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")  # a Python str holds a surrogate only when it is unpaired


def _elide_arguments(reply: Any, answers: list[Any]) -> None:
    """Replace, in the kept reply, the arguments of calls that have run and are too long to re-send.

    The tool saw the whole arguments; the conversation keeps a placeholder naming their size, so one 50 MB
    argument is not sent again with every later request (`MAX_KEPT_ARGS_CHARS`, less for a refused call).
    """
    refused = {a.tool_call_id for a in answers if str(a.content).startswith("ERROR")}
    for call in [*reply.tool_calls, *reply.invalid_tool_calls]:
        args = call.get("args")
        size = len(args) if isinstance(args, str) else len(json.dumps(args, default=str))
        limit = MAX_KEPT_REFUSED_ARGS_CHARS if call["id"] in refused else MAX_KEPT_ARGS_CHARS
        if size > limit:
            note = f"[{size} characters of arguments, not kept in the conversation]"
            call["args"] = note if isinstance(args, str) else {"elided": note}


def _answer_calls(box: Any, reply: Any) -> list[Any]:
    """One tool message per call of `reply` (valid or not), in order (the excess over the cap is already gone)."""
    from langchain_core.messages import ToolMessage

    answers = []
    for bad in reply.invalid_tool_calls:
        why = (
            f"ERROR: malformed tool call {str(bad.get('name'))[:80]!r}: {bad.get('error') or 'arguments are not JSON'}"
        )
        answers.append(ToolMessage(f"{why}; send the arguments as one valid JSON object", tool_call_id=bad["id"]))
    for call in reply.tool_calls:
        if box.finished:
            text = "ERROR: refused: finish was called earlier in this reply; this call did not run"
        else:
            text = _clean(box.call(call["name"], call["args"]))
        answers.append(ToolMessage(text, tool_call_id=call["id"]))
    return answers


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


class _Meter:
    """Record each call's tokens and check the session's budget.

    The server's usage report is clamped (`accounting.clamp_tokens`) and never trusted below a local count
    of what was sent and received (`accounting.estimate_tokens`): the larger one is recorded,
    so a reply claiming negative or zero usage cannot lift `--max-llm-tokens` or `--max-cost`. A failed
    call is charged for what was sent.
    """

    def __init__(self, ctx: Context, url: str, session_id: str, tools_chars: int) -> None:
        self.ctx, self.url, self.session_id, self.tools_chars = ctx, url, session_id, tools_chars

    def budget_stop(self) -> str:
        spent = accounting.session_usage(self.url, self.session_id)
        return accounting.budget_stop(spent, self.ctx.max_llm_tokens, self.ctx.max_cost_usd)

    def record(self, sent: list[Any], reply: Any) -> None:
        usage = (getattr(reply, "usage_metadata", None) or {}) if reply is not None else {}
        local_in = accounting.estimate_tokens(self.tools_chars + sum(_chars(m) for m in sent))
        local_out = 0 if reply is None else accounting.estimate_tokens(_chars(reply))
        prompt_tokens = max(accounting.clamp_tokens(usage.get("input_tokens")), local_in)
        completion_tokens = max(accounting.clamp_tokens(usage.get("output_tokens")), local_out)
        accounting.record_usage(
            self.url,
            session_id=self.session_id,
            node=NODE,
            model=self.ctx.llm_model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=accounting.call_cost(self.ctx.llm_model, prompt_tokens, completion_tokens, self.ctx.price_per_1k),
        )


def _chars(message: Any) -> int:
    """Characters of a message as it travels: its content, and each tool call's id, name and arguments."""
    content = message.content if isinstance(message.content, str) else json.dumps(message.content, default=str)
    total = len(content)
    for call in [*getattr(message, "tool_calls", []), *getattr(message, "invalid_tool_calls", [])]:
        args = call.get("args")
        total += len(str(call.get("id") or "")) + len(str(call.get("name") or ""))
        total += len(args) if isinstance(args, str) else len(json.dumps(args, default=str))
    return total


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
