"""The session's health reports (diagnose, evaluate and confirm nodes, through `cached_report`)
classify tools by the session harness's declared tools, as `evotrainer diagnose --harness` does: a declared
check tool the policy never calls is graded as laziness (act_then_verify_rate 0), where by tool names alone
the run shows no verify tool and the rule has no data."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).parent))
import agentic_episodes as E
from agentic_harness import SKELETON, make_agentic_harness

from agent.nodes.common import cached_report, session_roles
from agent.state import State
from diagnostics.schema import write_rollouts
from diagnostics.tool_roles import DEFAULT_ROLES, ToolRole


def _state(harness_dir: Path) -> State:
    return cast(State, {"harness_dir": str(harness_dir)})


def _run(folder: Path) -> Path:
    calls = [("search_notes", "k", True), ("edit_draft", "7", True)]  # never the declared check_draft
    rows = [E.episode(0, g, i, calls, reward=1.0, strict=1.0) for g in range(4) for i in range(4)]
    write_rollouts(folder / "rollouts" / "train" / "step_0.jsonl", rows)
    return folder


def test_session_roles_are_the_declared_tools_roles(tmp_path: Path) -> None:
    harness = make_agentic_harness(tmp_path / "h")
    roles = session_roles(_state(harness.root))
    assert roles.declared == {"search_notes": ToolRole.SEARCH, "edit_draft": ToolRole.ACT,
                              "check_draft": ToolRole.VERIFY}  # fmt: skip
    assert session_roles(_state(SKELETON)) is DEFAULT_ROLES  # no env: by tool name


def test_a_session_report_grades_a_declared_check_tool_left_unused(tmp_path: Path) -> None:
    harness = make_agentic_harness(tmp_path / "h")
    declared = cached_report(_run(tmp_path / "a"), None, None, session_roles(_state(harness.root)))
    by_name = cached_report(_run(tmp_path / "b"), None, None)
    metrics: dict[str, Any] = dict(declared.metrics)
    assert metrics["act_then_verify_rate"] == 0.0 and "agentic.act_then_verify" in {
        f.alert_id for f in declared.alerts()
    }
    assert math.isnan(by_name.metrics["act_then_verify_rate"])
