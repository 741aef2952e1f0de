"""An agentic harness maps to verl's multi-turn agent loop (tools from the manifest, turn limits
from the verl settings, the row for the environment in every data row), and a verl dump's decoded output
splits into turns at the hermes markers. Pure: no verl needed (tests/integration/test_verl_agentic_* runs verl)."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
import yaml

from diagnostics.schema import StopReason
from harness.env import EnvSpec
from harness.manifest import load_harness
from trainer_backend.base import RunSpec
from trainer_backend.verl.agentic import AGENT_LOOP_NAME, TOOL_CLASS, schema_losses
from trainer_backend.verl.config import VerlTrainerConfig, build_plan, load_verl_config
from trainer_backend.verl.data import convert_row
from trainer_backend.verl.turns import HERMES, from_record, split_turns

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
AGENTIC, SINGLE = FIXTURES / "verl_agentic", FIXTURES / "verl_harness"


def _plan(harness_dir: Path, out: Path):
    harness = load_harness(harness_dir)
    spec = RunSpec(run_id="r1", harness_dir=harness_dir, out_dir=out, steps=5)
    return build_plan(harness, spec, load_verl_config(harness), 1, out / "t.parquet", out / "v.parquet")


def test_agentic_plan_turns_on_the_agent_loop_with_the_generated_tools(tmp_path: Path) -> None:
    plan = _plan(AGENTIC, tmp_path / "run")
    ov = dict(o.split("=", 1) for o in plan.overrides)
    mt = "actor_rollout_ref.rollout.multi_turn"
    assert ov[f"{mt}.enable"] == "True" and ov[f"{mt}.max_assistant_turns"] == "4"  # max_turns in verl.yaml
    assert ov[f"{mt}.format"] == "hermes" and ov[f"{mt}.max_parallel_calls"] == "1"
    assert ov[f"{mt}.max_tool_response_length"] == "256"
    assert plan.agent is not None and ov[f"{mt}.tool_config_path"] == str(plan.agent.tool_config)
    assert ov["actor_rollout_ref.rollout.agent.agent_loop_config_path"] == str(plan.agent.agent_loops)
    tools = yaml.safe_load(plan.agent.texts[plan.agent.tool_config])["tools"]
    manifest = load_harness(AGENTIC).manifest
    assert manifest.env is not None
    assert [t["tool_schema"]["function"] for t in tools] == [
        {"name": t.name, "description": t.description, "parameters": t.parameters} for t in manifest.env.tools
    ]
    assert {t["class_name"] for t in tools} == {TOOL_CLASS}
    assert all(t["config"] == {"type": "native", "harness_root": str(AGENTIC)} for t in tools)
    (loop,) = yaml.safe_load(plan.agent.texts[plan.agent.agent_loops])
    assert loop["name"] == AGENT_LOOP_NAME and loop["max_turn_tokens"] == 128
    assert loop["trajectory_dir"] == str((tmp_path / "run").resolve() / "verl_dumps/trajectories")
    assert any("no sandbox" in w for w in plan.warnings) and any("call_pattern" in w for w in plan.warnings)


def test_single_turn_plan_has_no_agent_loop_and_says_agentic_settings_are_unused(tmp_path: Path) -> None:
    harness = tmp_path / "h"
    shutil.copytree(SINGLE, harness)
    cfg = harness / "harness" / "verl.yaml"
    cfg.write_text(cfg.read_text() + "max_turns: 3\n")
    plan = _plan(harness, tmp_path / "run")
    assert plan.agent is None and not any("multi_turn" in o for o in plan.overrides)
    assert any(w.startswith("max_turns: set but unused") for w in plan.warnings)


def test_the_controller_owns_the_tool_and_agent_loop_config_keys() -> None:
    rollout = "actor_rollout_ref.rollout"
    for key in (f"{rollout}.multi_turn.tool_config_path", f"{rollout}.agent.agent_loop_config_path"):
        with pytest.raises(ValueError, match="is set by EvoTrainer"):
            VerlTrainerConfig(model_path="m", overrides=[f"{key}=/x.yaml"])


def test_agentic_rows_carry_the_agent_loop_and_the_row_for_every_tool() -> None:
    env = load_harness(AGENTIC).manifest.env
    row = {"id": "a", "prompt": "p", "ground_truth": "7", "table": {"k1": "7"}, "key": "k1"}
    out = convert_row(row, 0, "train", "src", "lookup", env)
    assert out["agent_name"] == AGENT_LOOP_NAME
    kwargs = out["extra_info"]["tools_kwargs"]
    assert set(kwargs) == {"lookup", "submit"}
    assert all(orjson.loads(k["create_kwargs"]["row"]) == row for k in kwargs.values())
    assert "agent_name" not in convert_row(row, 0, "train", "src", "lookup")  # single-turn rows stay as they were


def test_schema_parts_verl_drops_are_named() -> None:
    env = EnvSpec.model_validate(
        {
            "entry": "harness/env.py:make_env",
            "call_pattern": r"<call>(\w+) (.*?)</call>",
            "call_end": "</call>",
            "tools": [
                {
                    "name": "grep",
                    "parameters": {"type": "object", "properties": {"paths": {"type": "array", "items": {}}}},
                },
                {"name": "ok", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
            ],
        }
    )
    (note,) = schema_losses(env)
    assert note.startswith("env.tools grep:") and "properties.paths.items" in note


CALL = '<tool_call>\n{"name": "lookup", "arguments": {"key": "k2"}}\n</tool_call>'


def test_hermes_output_splits_at_tool_responses() -> None:
    output = f"let me look. {CALL}\nuser\n<tool_response>\n29\n</tool_response>\nassistant\nso <ans>29</ans>"
    traj = split_turns(output, HERMES, count=len)
    assert [t.text for t in traj.turns] == [f"let me look. {CALL}", "so <ans>29</ans>"]
    first = traj.turns[0]
    assert (first.tool, orjson.loads(first.arguments)) == ("lookup", {"key": "k2"})
    assert (first.result, first.success) == ("29", None)
    assert first.observation_tokens == 2 and traj.turns[1].tool is None
    assert traj.tool_calls == 1 and traj.stop_reason is StopReason.ANSWER


def test_hermes_split_of_refusals_parallel_calls_and_unrun_calls() -> None:
    refusal = "Unknown function 'x'. Available tools: ['lookup']"
    refused = CALL.replace("lookup", "x") + f"\nuser\n<tool_response>\n{refusal}\n</tool_response>"
    traj = split_turns(refused, HERMES)
    assert traj.turns[0].success is False and traj.stop_reason is StopReason.TOOL_ERROR  # verl's own refusal
    two = CALL + CALL.replace("k2", "k3")
    answers = "<tool_response>\n29\n</tool_response>\n<tool_response>\n61\n</tool_response>"
    parallel = f"{two}\nuser\n{answers}\nassistant\ndone"
    traj = split_turns(parallel, HERMES)
    assert [(t.tool, t.arguments, t.result) for t in traj.turns[:2]] == [
        ("lookup", '{"key": "k2"}', "29"),
        ("lookup", '{"key": "k3"}', "61"),
    ]
    assert traj.tool_calls == 2 and traj.turns[2].text == "done"
    unrun = split_turns(f"{CALL}\nuser\n<tool_response>\n29\n</tool_response>\nassistant\n{CALL}", HERMES)
    assert unrun.stop_reason is StopReason.MAX_TURNS and unrun.turns[-1].tool == "lookup" and unrun.tool_calls == 1
    assert unrun.turns[-1].success is None and unrun.turns[-1].result == ""
    plain = split_turns("no tools here <ans>1</ans>", HERMES)
    assert len(plain.turns) == 1 and plain.tool_calls == 0 and plain.stop_reason is StopReason.ANSWER


def test_bad_trajectory_records_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="'turns' must be a list"):
        from_record({"uid": "u", "turns": "x"})
    with pytest.raises(ValueError, match=r"turns\[0\]"):
        from_record({"uid": "u", "turns": [{"text": "t", "success": "yes"}]})
    turn = {"text": "a", "tool": "lookup", "success": True}
    good = from_record({"uid": "u", "stop_reason": "max_turns", "tool_calls": 2, "turns": [turn]})
    assert good.stop_reason is StopReason.MAX_TURNS and good.turns[0].success is True and good.tool_calls == 2
