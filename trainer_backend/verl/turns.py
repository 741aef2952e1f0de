"""Trajectories of verl multi-turn rollouts, from its dumps and EvoTrainer's trajectory records (pure).

What verl 0.9.1's dumps hold for a multi-turn agent-loop rollout (V1 trainer, `trainer/ppo/v1/trainer_base.py`):

- training, `rollout_data_dir/<step>.jsonl` (`_log_rollout_data`): `input` = the templated prompt decoded with
  `skip_special_tokens=True`; `output` = the response ids decoded the same way — every policy turn *and* every
  tool observation the chat template appended, in order; `gts`; `score` (the summed token rewards); `step`;
  `uid` = `<prompt uuid>_<session>_<output index>`. Nothing else: no `num_turns`, no `response_mask` (which
  tokens were the policy's), no `extra_fields` (tool calls, `turn_scores`, `tool_rewards`), no logprobs.
- validation, `validation_data_dir/<step>.jsonl` (`_validate`): the same plus `reward` and every key the reward
  returned (`reward_extra_info`); `num_turns` only if the reward itself returns it.

So from a dump alone, with the hermes/ChatML format (Qwen2.5/Qwen3: `multi_turn.format=hermes`), this module
recovers, by splitting `output` at the tool-response markers (`TurnMarkers`): each turn's policy text (the
template's role lines `user` / `assistant` that are left once the special tokens are skipped are removed), the
tool it called and the arguments (the `<tool_call>` JSON), the result (the `<tool_response>` text, as verl cut
it to `max_tool_response_length`), the number of turns and of tool calls. Not recoverable: whether a call
succeeded in the environment (only verl's own refusals are recognised, `VERL_FAILURES`: unknown tool, bad JSON,
an exception in the tool); per-turn token counts (re-counted from the text when a tokenizer is at hand, which
may differ by a token at the joins); and why the episode ended when it ended right after an observation (the
environment's `done`, or the response budget: LENGTH only when the counted tokens reach the cap).

`HarnessAgentLoop` (env_tool.py) therefore writes one record per episode, `verl_dumps/trajectories/<step>/*.jsonl`,
keyed by the dump's uid, with the exact turns (success flags, token counts from verl's response mask) and stop
reason; the reader prefers it and falls back to splitting the text. Other tool formats are read from records
only: without a record such a rollout is one turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from diagnostics.schema import StopReason, Turn

TokenCounter = Callable[[str], int]

# The observation texts verl's ToolAgentLoop._call_tool writes itself when a call cannot run.
VERL_FAILURES = ("Unknown function '", "Invalid JSON in arguments for '", "Error executing tool '")


@dataclass(frozen=True)
class TurnMarkers:
    """Where a tool call and a tool response sit in a dump's decoded `output`, for one verl tool format."""

    call: re.Pattern[str]  # group 1: the call's JSON ({"name": ..., "arguments": {...}})
    response: re.Pattern[str]  # group 1: the tool's result text
    before_response: re.Pattern[str]  # the role line the template leaves before a response
    after_response: re.Pattern[str]  # the role line it leaves after one (the next assistant turn)


HERMES = TurnMarkers(
    call=re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S),
    response=re.compile(r"<tool_response>\n?(.*?)\n?</tool_response>", re.S),
    before_response=re.compile(r"\s*\buser\s*$"),
    after_response=re.compile(r"^\s*assistant[ \t]*\n?"),
)
MARKERS: dict[str, TurnMarkers] = {"hermes": HERMES}  # verl multi_turn.format -> markers


@dataclass(frozen=True)
class Trajectory:
    """A rollout's turns, tool-call count and stop reason (None: the reader decides from truncation)."""

    turns: tuple[Turn, ...]
    tool_calls: int
    stop_reason: StopReason | None


def _parse_call(text: str) -> tuple[str, str] | None:
    try:
        call = json.loads(text)
        return str(call["name"]), json.dumps(call.get("arguments", {}), ensure_ascii=False)
    except (ValueError, KeyError, TypeError):
        return None  # verl's hermes parser skips such a call too


def _success(result: str) -> bool | None:
    return False if result.startswith(VERL_FAILURES) else None


def split_turns(output: str, markers: TurnMarkers, count: TokenCounter | None = None) -> Trajectory:
    """Split one dump `output` into turns at the tool responses (see the module docstring)."""
    turns: list[Turn] = []
    pos = answered = 0  # each response answers one call
    for found in markers.response.finditer(output):
        answered += 1
        segment = output[pos : found.start()]
        if pos:
            segment = markers.after_response.sub("", segment, count=1)
        text = markers.before_response.sub("", segment)
        calls = [c for c in (_parse_call(m) for m in markers.call.findall(text)) if c is not None]
        tool, arguments = calls[0] if calls else (None, "")
        if not text.strip() and turns:  # a second response to the same turn (parallel calls): its own turn
            tool, arguments = _nth_call(turns, markers)
        result = found.group(1)
        turns.append(
            Turn(
                text=text,
                tool=tool,
                arguments=arguments,
                result=result,
                success=_success(result),
                policy_tokens=count(text) if count else 0,
                observation_tokens=count(result) if count else 0,
            )
        )
        pos = found.end()
    rest = output[pos:]
    if pos:
        rest = markers.after_response.sub("", rest, count=1)
    if rest.strip() or not turns:
        calls = [c for c in (_parse_call(m) for m in markers.call.findall(rest)) if c is not None]
        tool, arguments = calls[0] if calls else (None, "")  # a call in the last turn never ran
        turns.append(Turn(text=rest, tool=tool, arguments=arguments, policy_tokens=count(rest) if count else 0))
        stop = StopReason.MAX_TURNS if tool is not None else StopReason.ANSWER
    else:  # ended right after an observation: the environment's `done` (or the response budget, see above)
        stop = StopReason.TOOL_ERROR if turns[-1].success is False else StopReason.ANSWER
    return Trajectory(tuple(turns), answered, stop)


def _nth_call(turns: list[Turn], markers: TurnMarkers) -> tuple[str | None, str]:
    """The next call of the last turn that wrote text (parallel calls answered one response each)."""
    owner = next(i for i in range(len(turns) - 1, -1, -1) if turns[i].text.strip() or i == 0)
    calls = [c for c in (_parse_call(m) for m in markers.call.findall(turns[owner].text)) if c is not None]
    index = len(turns) - owner
    return calls[index] if index < len(calls) else (None, "")


def from_record(record: Mapping[str, Any]) -> Trajectory:
    """A trajectory from one `HarnessAgentLoop` record.

    Raises:
        ValueError: the record does not have the record's shape (the message names the field).
    """
    raw = record.get("turns")
    if not isinstance(raw, list):
        raise ValueError("trajectory record: 'turns' must be a list")
    turns = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping) or not isinstance(item.get("text"), str):
            raise ValueError(f"trajectory record: turns[{i}] must be an object with 'text'")
        tool, success = item.get("tool"), item.get("success")
        if (tool is not None and not isinstance(tool, str)) or (success is not None and not isinstance(success, bool)):
            raise ValueError(f"trajectory record: turns[{i}]: 'tool' must be a string or null, 'success' bool or null")
        turns.append(
            Turn(
                text=item["text"],
                tool=tool,
                arguments=str(item.get("arguments", "")),
                result=str(item.get("result", "")),
                success=success,
                policy_tokens=int(item.get("policy_tokens", 0)),
                observation_tokens=int(item.get("observation_tokens", 0)),
            )
        )
    return Trajectory(tuple(turns), int(record.get("tool_calls", 0)), StopReason(record.get("stop_reason", "answer")))


def index_records(rows: Iterable[Any]) -> dict[str, Mapping[str, Any]]:
    """`{uid: record}` over trajectory-record rows (rows without a string uid are skipped)."""
    return {row["uid"]: row for row in rows if isinstance(row, Mapping) and isinstance(row.get("uid"), str)}
