"""Tool roles for the agentic diagnostics and skills: what a tool call does for the task.

Tool roles (domain-neutral, paper §6.2's search / edit / test split)
--------------------------------------------------------------------
A tool is a *search* (gathers information), an *act* (changes the state the task is about: edits, writes,
submits) or a *verify* (checks the work: tests, checks, validators); anything else is *other*. The role
comes, in this order, from an explicit mapping the caller gives (`ToolRoles.overrides`), from the tools the
harness declares (`ToolRoles.from_env`: each declared tool classified by its name, then its description),
or from the tool's name alone: the name is split into words (``run_tests`` -> run, tests; ``readFile`` ->
read, file) and matched against `ROLE_WORDS`, verify before act before search (``search_replace`` is an act,
``run_tests`` a verify). A harness steers the classification by naming its tools.

An *action* is a call of an act-role tool. A harness without any act-role tool (declared, or else seen in
the run), such as an environment whose only tool is a lookup, acts by answering: its final answer is the
action (`ActMode.ANSWER`), so "search before act" reads "looked something up before answering" and "act
then verify" reads "checked before answering", and abandonment means answering without any tool call.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from harness.env import EnvSpec


class ToolRole(enum.StrEnum):
    """What a tool call does for the task (see the module docstring)."""

    SEARCH = "search"
    ACT = "act"
    VERIFY = "verify"
    OTHER = "other"


class ActMode(enum.StrEnum):
    """What counts as the action of an episode: an act-role tool call, or the final answer."""

    TOOLS = "tools"
    ANSWER = "answer"


# Words of a tool's name (or description) that give its role; the first role in this order that matches wins.
ROLE_WORDS: dict[ToolRole, frozenset[str]] = {
    ToolRole.VERIFY: frozenset(
        [
            "test",
            "tests",
            "tester",
            "pytest",
            "unittest",
            "check",
            "checks",
            "checker",
            "verify",
            "verifier",
            "validate",
            "validator",
            "assert",
            "lint",
            "linter",
            "evaluate",
            "eval",
            "grade",
            "judge",
            "typecheck",
            "confirm",
        ]
    ),
    ToolRole.ACT: frozenset(
        [
            "edit",
            "edits",
            "editor",
            "write",
            "writer",
            "create",
            "replace",
            "patch",
            "apply",
            "insert",
            "delete",
            "remove",
            "rm",
            "move",
            "mv",
            "rename",
            "set",
            "put",
            "update",
            "modify",
            "append",
            "submit",
            "commit",
            "save",
            "add",
        ]
    ),
    ToolRole.SEARCH: frozenset(
        [
            "search",
            "searcher",
            "find",
            "grep",
            "lookup",
            "look",
            "read",
            "reader",
            "open",
            "view",
            "list",
            "ls",
            "cat",
            "get",
            "fetch",
            "query",
            "browse",
            "inspect",
            "retrieve",
            "show",
            "explore",
            "locate",
            "navigate",
            "describe",
            "peek",
        ]
    ),
}
_ROLE_ORDER = (ToolRole.VERIFY, ToolRole.ACT, ToolRole.SEARCH)
# Role codes inside the table (UInt8): 0 is a turn without a tool call.
ROLE_CODE = {ToolRole.SEARCH: 1, ToolRole.ACT: 2, ToolRole.VERIFY: 3, ToolRole.OTHER: 4}
NO_CALL = 0
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def tool_role(name: str, description: str = "") -> ToolRole:
    """The role of a tool from the words of its name, else of its description (`ROLE_WORDS`)."""
    for text in (name, description):
        words = set(_words(text))
        for role in _ROLE_ORDER:
            if words & ROLE_WORDS[role]:
                return role
    return ToolRole.OTHER


@dataclass(frozen=True)
class ToolRoles:
    """How the report classifies tools: explicit `overrides`, then the harness's `declared` tools, then names.

    `declared` (tool name -> role) also decides the act mode: with declared tools, the harness acts through
    tools when one of them is an act; without, when a tool seen in the run is.
    """

    overrides: Mapping[str, ToolRole] = field(default_factory=dict)
    declared: Mapping[str, ToolRole] | None = None

    @classmethod
    def from_env(cls, env: EnvSpec, overrides: Mapping[str, ToolRole] | None = None) -> ToolRoles:
        """Roles of a harness's declared tools (`env.tools`), each from its name, then its description."""
        return cls(dict(overrides or {}), {t.name: tool_role(t.name, t.description) for t in env.tools})

    def role(self, name: str) -> ToolRole:
        """The role of tool `name`."""
        if name in self.overrides:
            return self.overrides[name]
        if self.declared is not None and name in self.declared:
            return self.declared[name]
        return tool_role(name)

    def act_mode(self, seen: Iterable[str]) -> ActMode:
        """`TOOLS` when an act-role tool exists (declared, else among the tools `seen` in the run)."""
        names = set(self.declared) | set(self.overrides) if self.declared is not None else set(seen)
        return ActMode.TOOLS if any(self.role(n) is ToolRole.ACT for n in names) else ActMode.ANSWER


DEFAULT_ROLES = ToolRoles()
