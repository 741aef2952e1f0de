"""The agentic half of the harness contract: an environment with tools, and how a tool call is written.

A harness becomes agentic when its manifest declares an environment::

    env:
      entry: harness/env.py:make_env            # make_env(row: dict) -> an environment for one episode
      call_pattern: '<call>(\\w+) (.*?)</call>'   # a call: group 1 the tool, group 2 its arguments
      call_end: '</call>'                       # the text a call ends with: generation of a turn stops there
      observation: '<obs>{result}</obs>'        # how a tool's result is appended to the context
      tools:                                    # what the environment offers (verl's tool config is made from this)
        - name: lookup
          description: the value stored under a key
          parameters: {type: object, properties: {key: {type: string}}, required: [key]}

The manifest is protected, so the tools and the call syntax are fixed for a harness; the environment's
code (`entry`, on the editable surface) is candidate code and runs where the reward runs (sandboxed).

Episode (local backend; verl's multi-turn agent loop does the same with its own tool-call parser): the
policy generates until it writes `call_end` (``</call>``; one token for the local tokenizer, which adds
it to its special tokens) or ends its response; a call is parsed with `parse_call`, executed by
the episode's environment (``env.call(tool, arguments)``), and the rendered observation is appended to the
context. The episode ends on a final answer (a turn without a call), when the environment says ``done``,
on a failed call the environment ends, or at the trainer's ``max_turns``. Observation tokens are context:
the trainer masks them out of the loss (a trainer setting, so that training on them is a realistic defect).

The environment object, written by the harness author::

    def make_env(row: dict) -> Env           # one per episode; row = the data row without its ground_truth
    class Env:
        def call(self, tool: str, arguments: dict) -> str | dict
            # the tool's result: text, or {"result": str, "success": bool, "done": bool}; a call the policy
            # got wrong is `success: False` (the episode goes on); raising is a bug of the candidate

**The episode contract**: an episode's environment depends on its row (and the seed the row carries, if
any) only. Whatever episodes ran before it in the same process (a module-level cache, a shared random
stream, a list that grows, a file left behind) must not change what its tools answer. The health report
checks this by replaying a sample of a run's recorded calls against fresh environments in a fresh sandbox
process, in another order (`diagnostics/env_replay.py`, alert ``agentic.env_carries_state``).

How episodes share the env module is declared in the env code itself (candidate code, on the editable
surface; read by the sandbox worker and `harness.calls.InProcessCalls`)::

    EVOTRAINER_ENV_ISOLATION = "fresh_module"  # default "shared": one import of the module for the run
    EVOTRAINER_ENV_RESET = "reset_env"         # optional: a module-level function called before every make_env

- ``shared`` (the default): the module is imported once per worker; `make_env` is called per episode. Right
  for an environment whose module holds nothing an episode changes;
- ``fresh_module``: every episode's `make_env` comes from a fresh execution of the module (a new module
  object: its globals, caches and classes are the episode's own). It isolates module state at the price of
  one import per episode (measured by ``benchmarks/bench_env_isolation.py``);
- an expensive environment that must be reused (a loaded index, a started service) stays ``shared`` and
  declares ``EVOTRAINER_ENV_RESET``: the function is called with no arguments before each episode's
  `make_env` and must leave what `make_env` reads as a fresh import would. Episodes of a training step are
  live at the same time, so what a live episode changes belongs on its env object, never in the module (the
  replay calls the reset as the trainer does, so a reset that forgets something is found like any leak).

`make_env` never gets the row's ``ground_truth``: the environment is candidate code that shapes what the
policy reads, and on held-out rows the answer the judge compares with must not reach it.

`call` gets the arguments as a JSON object: for `call_pattern`'s text, the arguments group is read as a
JSON object when it is one, else given to the tool's only declared parameter (``{"key": "k3"}`` for
``<call>lookup k3</call>``); a call that fits neither is a failed call, answered to the policy.

This module is pure (no I/O): the spec, parsing a call, and checking what an environment returned.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# The env module's isolation declaration (see the module docstring), defined once; the sandbox worker
# (`sandboxes/_worker_main.py`, stdlib only) repeats the names and says so.
ISOLATION_NAME = "EVOTRAINER_ENV_ISOLATION"
RESET_NAME = "EVOTRAINER_ENV_RESET"
Isolation = Literal["shared", "fresh_module"]
ISOLATIONS: tuple[Isolation, ...] = ("shared", "fresh_module")
MAX_RESULT_CHARS = 2000  # an observation longer than this is cut (and marked) before it enters the context
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class ToolSpec(BaseModel):
    """One tool the environment offers: its name, what it does and its JSON-schema parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(f"tool name {value!r} must be letters, digits and '_' (at most 64, not a digit first)")
        return value

    @field_validator("parameters")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object" or not isinstance(value.get("properties", {}), dict):
            raise ValueError("parameters must be a JSON schema of type 'object' with 'properties'")
        return value

    @property
    def parameter_names(self) -> list[str]:
        """The declared parameter names, in order."""
        return list(self.parameters.get("properties", {}))


class EnvSpec(BaseModel):
    """The manifest's `env:` section (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    entry: str = Field(description="path.py:function that makes one episode's environment from a data row")
    call_pattern: str = Field(description="regular expression: group 1 the tool name, group 2 its arguments")
    call_end: str = Field(min_length=1, description="the text a call ends with; a turn's generation stops there")
    observation: str = Field("{result}", description="how a tool result enters the context; {result} is replaced")
    tools: tuple[ToolSpec, ...] = Field(min_length=1)

    @field_validator("call_pattern")
    @classmethod
    def _two_groups(cls, value: str) -> str:
        try:
            compiled = re.compile(value, re.S)
        except re.error as exc:
            raise ValueError(f"call_pattern {value!r} is not a valid regular expression ({exc})") from None
        if compiled.groups != 2:
            raise ValueError(f"call_pattern {value!r} needs exactly two groups: the tool name, then its arguments")
        return value

    @field_validator("observation")
    @classmethod
    def _one_slot(cls, value: str) -> str:
        if value.count("{result}") != 1 or value.replace("{result}", "").count("{"):
            raise ValueError(f"observation {value!r} must hold '{{result}}' exactly once (and no other braces)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> EnvSpec:
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"env.tools repeats a name: {names}")
        if not self.call_pattern.rstrip("$").endswith(re.escape(self.call_end)) and not self.call_pattern.rstrip(
            "$"
        ).endswith(self.call_end):
            raise ValueError(f"call_pattern {self.call_pattern!r} must end with call_end {self.call_end!r}")
        return self

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """The compiled call pattern."""
        return re.compile(self.call_pattern, re.S)

    def tool(self, name: str) -> ToolSpec | None:
        """The declared tool called `name`."""
        return next((t for t in self.tools if t.name == name), None)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call parsed from the policy's text: the tool, its arguments, and why it cannot run (if it cannot)."""

    tool: str
    raw_arguments: str
    arguments: dict[str, Any] | None  # None: the arguments do not fit the tool (`problem` says why)
    problem: str = ""


def parse_call(text: str, spec: EnvSpec) -> ToolCall | None:
    """The tool call the turn's text ends with (the last match), or None when the turn makes no call."""
    matches = list(spec.regex.finditer(text))
    if not matches:
        return None
    return parse_arguments(matches[-1].group(1).strip(), matches[-1].group(2), spec)


def parse_arguments(name: str, raw: str, spec: EnvSpec) -> ToolCall:
    """Read the arguments text `raw` of a call to tool `name` (the rules of `parse_call`; a recorded turn's
    ``tool`` and ``arguments`` are read back with it)."""
    tool = spec.tool(name)
    if tool is None:
        known = ", ".join(t.name for t in spec.tools)
        return ToolCall(name, raw, None, f"unknown tool {name!r}; the tools are {known}")
    stripped = raw.strip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return ToolCall(name, raw, value)
        return ToolCall(name, raw, None, "the arguments start like a JSON object but are not one")
    params = tool.parameter_names
    if len(params) == 1:
        return ToolCall(name, raw, {params[0]: stripped})
    if not params and not stripped:
        return ToolCall(name, raw, {})
    return ToolCall(name, raw, None, f"{name} takes {params or 'no arguments'}: write them as a JSON object")


@dataclass(frozen=True, slots=True)
class EnvResult:
    """What one tool call returned, checked: the observation text, whether the call succeeded, and whether
    the environment ended the episode."""

    result: str
    success: bool
    done: bool = False


class EnvContractError(ValueError):
    """An environment returned something outside the contract; the message names `file.py:function`."""


def validate_env_result(value: object, entry: str) -> EnvResult:
    """Check one raw `env.call` return value: a string, or a dict with a string ``result`` and optional
    boolean ``success`` (default True) and ``done`` (default False). Long results are cut to
    `MAX_RESULT_CHARS` (marked), so an environment cannot flood the context.

    Raises:
        EnvContractError: any other type or field; the message names `entry`.
    """
    if isinstance(value, str):
        return EnvResult(_cut(value), True)
    if not isinstance(value, dict):
        raise EnvContractError(f"{entry} returned {type(value).__name__}; return a string or a dict with 'result'")
    unknown = sorted(set(map(str, value)) - {"result", "success", "done"})
    if unknown:
        raise EnvContractError(f"{entry} returned unknown keys {unknown[:5]}; allowed: result, success, done")
    result, success, done = value.get("result"), value.get("success", True), value.get("done", False)
    if not isinstance(result, str) or not isinstance(success, bool) or not isinstance(done, bool):
        raise EnvContractError(f"{entry} must return 'result' as a string and 'success'/'done' as booleans")
    return EnvResult(_cut(result), success, done)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + " [... cut]"


def render_observation(spec: EnvSpec, result: EnvResult) -> str:
    """The text appended to the context for a tool result."""
    return spec.observation.replace("{result}", result.result)


_DECLARED_ISOLATION = re.compile(rf"^{ISOLATION_NAME}\s*(?::[^=\n]*)?=.*$", re.M)


def declare_isolation(source: str, isolation: Isolation) -> tuple[str, str]:
    """The env module `source` with its isolation declared `isolation` (the line replaced, or appended at the
    end), and the isolation it declared before ("shared" when it declared none).

    Raises:
        ValueError: `isolation` is not one of `ISOLATIONS`, or `source` declares the name more than once.
    """
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation {isolation!r}: use one of {', '.join(ISOLATIONS)}")
    found = list(_DECLARED_ISOLATION.finditer(source))
    if len(found) > 1:
        raise ValueError(f"the env module assigns {ISOLATION_NAME} {len(found)} times; keep one")
    line = f"{ISOLATION_NAME} = {json.dumps(isolation)}"
    if found:
        old = found[0].group(0).split("=", 1)[1].split("#", 1)[0].strip().strip("'\"")
        return source[: found[0].start()] + line + source[found[0].end() :], old
    why = "# Each episode's environment comes from a fresh import of this module (harness/env.py: isolation)."
    return source.rstrip("\n") + f"\n\n\n{why}\n{line}\n", "shared"


def declared_isolation(source: str) -> Isolation | None:
    """The isolation an env module's text declares ("shared" when it declares none), read without running it;
    None when the declaration is not one plain string of `ISOLATIONS` (its run refuses it, saying why)."""
    found = list(_DECLARED_ISOLATION.finditer(source))
    if not found:
        return "shared"
    value = found[-1].group(0).split("=", 1)[1].split("#", 1)[0].strip().strip("'\"")
    return next((i for i in ISOLATIONS if i == value), None) if len(found) == 1 else None
