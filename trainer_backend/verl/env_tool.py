"""The verl side of an agentic harness: the tool and agent loop that `agentic.py`'s generated configs name.

Imported by verl, inside its agent-loop workers (and by tests); it imports verl at module level, so the
controller never imports it (the controller composes configs in a child process, `validate.py`).

`HarnessEnvTool` (a `verl.tools.base_tool.BaseTool`): one instance per declared tool per worker. verl 0.9.1's
`ToolAgentLoop._call_tool` runs create → execute → release around *every* call, not once per trajectory, so
the episode's environment lives on the trajectory's `AgentData` (which verl passes to `execute`): the first
call of a trajectory, whichever tool it names, makes the environment with the harness's `make_env(row)` (the
row from `tools_kwargs.<tool>.create_kwargs.row`), and every later call of that trajectory reuses it. A call
runs `env.call(tool, arguments)`; its result is checked with `harness.env.validate_env_result` and goes back
to the policy as the tool message's text (verl's chat template renders it; the manifest's `observation`
template is the local model's syntax). An environment that raises, or returns something outside the
contract, raises here: verl turns that into the observation "Error executing tool '<name>': ..." (a failed
call, never a failed run); the trajectory record keeps it as a failed call.

`HarnessAgentLoop` (a `ToolAgentLoop`, registered as `evotrainer_env_agent` by the generated agent-loop
config; verl instantiates one per trajectory) adds what the harness contract has and verl's loop has not:
the episode ends when the environment says `done`; an optional per-turn token cap (`max_turn_tokens`, passed
to the rollout server as `max_tokens`); the episode's stop reason; the trajectory for the reward
(`extra_info`, see `REWARD_FIELDS`); and one JSON line per episode under `trajectory_dir/<global_step>/`,
keyed by the dump's uid, from which the reader takes turns, success flags and stop reasons verl's dumps lack.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.tool_agent_loop import AgentData, AgentState, ToolAgentLoop
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from diagnostics.schema import StopReason
from harness.calls import load_function
from harness.env import EnvResult, validate_env_result
from harness.manifest import Harness, load_harness
from trainer_backend.verl.agentic import ROW_KEY

log = logging.getLogger(__name__)
TRAJECTORY_ATTR = "_evotrainer_trajectory"  # the episode's state on verl's AgentData
# What HarnessAgentLoop adds to the trajectory's extra fields, which verl's reward managers merge into the
# reward's `extra_info` (next to verl's own `num_turns` = user + assistant turns + 1).
REWARD_FIELDS = ("policy_turns", "tool_calls", "stop_reason", "env_calls")


@dataclass
class CallRecord:
    """One call the environment ran (or refused by raising): what the policy asked and what came back."""

    tool: str
    arguments: str
    result: str
    success: bool
    done: bool = False


@dataclass
class TurnRecord:
    """One policy turn (the `diagnostics.schema.RawTurn` shape)."""

    text: str
    tool: str | None = None
    arguments: str = ""
    result: str = ""
    success: bool | None = None
    policy_tokens: int = 0
    observation_tokens: int = 0


@dataclass
class Trajectory:
    """One episode: its environment (made at its first call), the calls it ran and its turns."""

    env: Any = None
    calls: list[CallRecord] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    done: bool = False
    stop_reason: StopReason | None = None


def trajectory_of(agent_data: AgentData) -> Trajectory:
    """The episode state attached to verl's per-trajectory AgentData (created at first use)."""
    found = getattr(agent_data, TRAJECTORY_ATTR, None)
    if found is None:
        found = Trajectory()
        setattr(agent_data, TRAJECTORY_ATTR, found)
    return found  # type: ignore[no-any-return]


_CODE: dict[str, tuple[Harness, Any]] = {}  # per worker process: harness root -> (harness, make_env), loaded once


def harness_code(root: str) -> tuple[Harness, Any]:
    """The harness and its `make_env`, imported once per process (candidate code: import errors raise)."""
    if root not in _CODE:
        harness = load_harness(Path(root))
        if harness.env is None:
            raise ValueError(f"{root}/evotrainer.yaml declares no env:, so it has no tools to run")
        _CODE[root] = (harness, load_function(harness.root, harness.env))
    return _CODE[root]


class HarnessEnvTool(BaseTool):
    """A declared harness tool: runs its calls in the trajectory's environment (see the module docstring)."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema | None) -> None:
        """Keep the harness folder; the environment code is imported at the first call, never here."""
        super().__init__(config, tool_schema)
        self.harness_root = str(config["harness_root"])

    async def execute(  # type: ignore[override]
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        """Run the call in the trajectory's environment; return (result text, step reward 0, metrics)."""
        agent_data = kwargs.get("agent_data")
        if agent_data is None:
            raise RuntimeError(f"{self.name}: verl passed no agent_data; run it with the tool_agent loop (or ours)")
        trajectory = trajectory_of(agent_data)
        arguments = json.dumps(parameters, sort_keys=True)
        try:
            result = await self._run(agent_data, trajectory, parameters)
        except Exception as exc:  # candidate code: recorded as a failed call, then verl answers the policy
            text = f"Error executing tool '{self.name}': {exc}"
            trajectory.calls.append(CallRecord(self.name, arguments, text, False))
            raise
        trajectory.calls.append(CallRecord(self.name, arguments, result.result, result.success, result.done))
        trajectory.done = trajectory.done or result.done
        return ToolResponse(text=result.result), 0.0, {"success": result.success, "done": result.done}

    async def _run(self, agent_data: AgentData, trajectory: Trajectory, parameters: dict[str, Any]) -> EnvResult:
        harness, make_env = harness_code(self.harness_root)
        entry = str(harness.env)
        if trajectory.env is None:
            row = _row(agent_data.tools_kwargs, self.name)
            trajectory.env = await asyncio.to_thread(make_env, row)
        raw = await asyncio.to_thread(trajectory.env.call, self.name, parameters)
        return validate_env_result(raw, entry)


def _row(tools_kwargs: Any, tool: str) -> dict[str, Any]:
    try:
        text = tools_kwargs[tool]["create_kwargs"][ROW_KEY]
        row = json.loads(text)
    except (KeyError, TypeError, ValueError):
        raise ValueError(
            f"extra_info.tools_kwargs.{tool}.create_kwargs.{ROW_KEY} is missing or not JSON: the data was not "
            "converted for an agentic harness (trainer_backend/verl/data.py writes it)"
        ) from None
    if not isinstance(row, dict):
        raise ValueError(f"extra_info.tools_kwargs.{tool}.create_kwargs.{ROW_KEY} is not a JSON object")
    return row


class HarnessAgentLoop(ToolAgentLoop):
    """verl's tool agent loop with the harness contract's episode end, turn cap and trajectory record."""

    def __init__(
        self,
        *args: Any,
        harness_root: str,
        trajectory_dir: str | None = None,
        max_turn_tokens: int | None = None,
        **kwargs: Any,
    ) -> None:
        """`harness_root`, `trajectory_dir` and `max_turn_tokens` come from the generated agent-loop config."""
        super().__init__(*args, **kwargs)
        self.answer = load_harness(Path(harness_root)).manifest.answer
        self.trajectory_dir = trajectory_dir
        self.max_turn_tokens = max_turn_tokens
        self._current: Trajectory | None = None

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        """Run one episode with verl's loop, then add the trajectory fields and write its record."""
        output = await super().run(sampling_params, **kwargs)
        trajectory = self._current or Trajectory(stop_reason=StopReason.ABORT)
        summary = {
            "policy_turns": len(trajectory.turns),
            "tool_calls": sum(t.tool is not None and t.success is not None for t in trajectory.turns),
            "stop_reason": (trajectory.stop_reason or StopReason.ANSWER).value,
            "env_calls": [asdict(c) for c in trajectory.calls],
        }
        output.extra_fields.update(summary)
        uid, session = kwargs.get("uid"), kwargs.get("session_id")
        if self.trajectory_dir and uid is not None and session is not None:
            record = {
                "uid": f"{uid}_{session}_0",
                "step": _int(kwargs.get("global_steps")),
                "num_turns": summary["policy_turns"],
                "tool_calls": summary["tool_calls"],
                "stop_reason": summary["stop_reason"],
                "turns": [asdict(t) for t in trajectory.turns],
            }
            write_record(Path(self.trajectory_dir), record)
        return output

    async def _handle_pending_state(self, agent_data: AgentData, sampling_params: dict[str, Any]) -> AgentState:
        self._current = trajectory_of(agent_data)
        return await super()._handle_pending_state(agent_data, sampling_params)

    async def _handle_generating_state(
        self, agent_data: AgentData, sampling_params: dict[str, Any], ignore_termination: bool = False
    ) -> AgentState:
        if self.max_turn_tokens:  # the per-turn budget, never beyond what is left of the response budget
            left = max(1, self.response_length - len(agent_data.response_mask))
            sampling_params = {**sampling_params, "max_tokens": min(self.max_turn_tokens, left)}
        agent_data.tool_calls = []
        state = await super()._handle_generating_state(agent_data, sampling_params, ignore_termination)
        trajectory = trajectory_of(agent_data)
        ids = list(agent_data.response_ids)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        turn = TurnRecord(text=text, policy_tokens=len(ids))
        trajectory.turns.append(turn)
        if state == AgentState.PROCESSING_TOOLS and agent_data.tool_calls:
            turn.tool, turn.arguments = agent_data.tool_calls[0].name, agent_data.tool_calls[0].arguments
        elif state == AgentState.TERMINATED:
            trajectory.stop_reason = await self._why_stopped(agent_data, trajectory, turn)
        return state

    async def _why_stopped(self, agent_data: AgentData, trajectory: Trajectory, turn: TurnRecord) -> StopReason:
        """Why verl ended the episode after a generation (its checks, in its order)."""
        if len(agent_data.response_mask) >= self.response_length:
            return StopReason.LENGTH
        turn_cap = (self.max_assistant_turns and agent_data.assistant_turns >= self.max_assistant_turns) or (
            self.max_user_turns and agent_data.user_turns >= self.max_user_turns
        )
        if turn_cap:  # verl stops before parsing the turn: a call in it was never run
            tools = [t.tool_schema for t in self.tools.values()]
            _, calls = await self.tool_parser.extract_tool_calls(agent_data.response_ids, tools)
            if calls:
                turn.tool, turn.arguments = calls[0].name, calls[0].arguments
                return StopReason.MAX_TURNS
        elif self.max_turn_tokens and turn.policy_tokens >= self.max_turn_tokens:
            return StopReason.LENGTH  # cut by the per-turn budget before it wrote a call or an answer
        acted = any(t.success is not None for t in trajectory.turns)
        if self.answer is not None and not acted and self.answer.extract(turn.text) is None:
            return StopReason.ABANDON
        return StopReason.ANSWER

    async def _handle_processing_tools_state(self, agent_data: AgentData) -> AgentState:
        trajectory = trajectory_of(agent_data)
        ran = len(trajectory.calls)
        messages, mask = len(agent_data.messages), len(agent_data.response_mask)
        state = await super()._handle_processing_tools_state(agent_data)
        turn = trajectory.turns[-1]
        answered = [m for m in agent_data.messages[messages:] if m.get("role") == "tool"]
        if answered:
            content = answered[0].get("content", "")
            turn.result = content if isinstance(content, str) else json.dumps(content)
        own = trajectory.calls[ran:]  # the call our tool ran; none when verl refused it (unknown tool, bad JSON)
        turn.success = own[0].success if own else False
        turn.observation_tokens = len(agent_data.response_mask) - mask
        if state == AgentState.TERMINATED:
            trajectory.stop_reason = StopReason.LENGTH  # the observation used up the response budget
        elif own and own[-1].done:
            trajectory.stop_reason = StopReason.ANSWER if own[-1].success else StopReason.TOOL_ERROR
            return AgentState.TERMINATED
        return state


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def write_record(folder: Path, record: dict[str, Any]) -> None:
    """Append one trajectory record to this process's file under `folder/<step>/` (never raises)."""
    step = record["step"] if record["step"] is not None else "unknown"
    path = folder / str(step) / f"{socket.gethostname()}-{os.getpid()}.jsonl"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:  # one file per process: lines never interleave
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    except OSError as exc:  # the record is an aid to the reader, never a reason to fail an episode
        log.warning("trajectory record not written to %s: %s", path, exc)
