"""An agentic harness runs in verl 0.9.1's own multi-turn agent loop on CPU, its reward gets the
trajectory through verl's own reward manager, verl's own dump writer records the episodes, and the reader
recovers the trajectories from those dumps.

Everything is verl's real code (Hydra config, `initialize_tools_from_config`, the generated agent-loop config
instantiated as `AgentLoopWorker` does, `ToolAgentLoop`, the Qwen continuous-token builder, `RLHFDataset`,
`load_reward_manager` + `NaiveRewardManager.run_single`, `PPOTrainer._write_generations`) except the LLM:
a scripted rollout server returns the policy's turns (no GPU, no model weights here).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from diagnostics.schema import StopReason, read_run_rollouts
from harness.manifest import load_harness
from trainer_backend.base import RunSpec
from trainer_backend.verl import VerlConfigError, dry_run, prepare, validate_plans

pytestmark = pytest.mark.verl
pytest.importorskip("verl")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "verl_agentic"
STEP = 3

# A Qwen2.5-style ChatML template with tools (the shape of the real one: hermes <tool_call> / <tool_response>).
CHATML_TOOLS = (
    "{%- if tools %}{{- '<|im_start|>system\\nYou are a helpful assistant.\\n\\n# Tools\\n\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}{{- '\\n</tools><|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'assistant' and not message.tool_calls) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>assistant' }}"
    "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
    "{%- for tc in message.tool_calls %}{%- set tc = tc.function if tc.function is defined else tc %}"
    '{{- \'\\n<tool_call>\\n{"name": "\' + tc.name + \'", "arguments": \' }}{{- tc.arguments | tojson }}'
    "{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _chatml_tokenizer() -> Any:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.add_tokens([AddedToken("<tool_call>", special=False), AddedToken("</tool_call>", special=False)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML_TOOLS
    return fast


def _call(name: str, **arguments: str) -> str:
    return "<tool_call>\n" + orjson.dumps({"name": name, "arguments": arguments}).decode() + "\n</tool_call><|im_end|>"


class ScriptedServer:
    """The rollout server verl's agent loop calls (`generate`): the policy's turns, scripted, as token ids."""

    def __init__(self, tokenizer: Any, turns: list[str]) -> None:
        self.tokenizer, self.turns, self.max_tokens = tokenizer, list(turns), []

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict, **_: Any) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        self.max_tokens.append(sampling_params.get("max_tokens"))
        ids = self.tokenizer.encode(self.turns.pop(0), add_special_tokens=False)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


@dataclass
class Episode:
    name: str
    row: int  # index into the training parquet
    turns: list[str]
    output: Any = None  # verl's AgentLoopOutput
    uid: str = ""
    server: ScriptedServer | None = None


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Plan the fixture harness on verl, then run five scripted episodes through verl's own agent loop."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.tools.tool_registry import initialize_tools_from_config
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.ray_utils import get_event_loop

    from trainer_backend.verl import env_tool
    from trainer_backend.verl.validate import compose

    out = tmp_path_factory.mktemp("agentic") / "run"
    _, plan = prepare(RunSpec(run_id="a1", harness_dir=FIXTURE, out_dir=out, steps=STEP))
    cfg = compose(plan.overrides)
    tokenizer = _chatml_tokenizer()
    dataset = RLHFDataset(data_files=cfg.data.train_files, tokenizer=tokenizer, config=cfg.data)
    tools = initialize_tools_from_config(cfg.actor_rollout_ref.rollout.multi_turn.tool_config_path)
    for entry in OmegaConf.load(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path):
        _agent_loop_registry[entry.name] = entry  # exactly what AgentLoopWorker.__init__ does

    made: list[dict] = []
    harness, make_env = env_tool.harness_code(str(FIXTURE))
    env_tool._CODE[str(FIXTURE)] = (harness, lambda row: made.append(row) or make_env(row))

    def truth(i: int) -> str:
        return str(dataset[i]["reward_model"]["ground_truth"])

    def key(i: int) -> str:
        return str(dataset[i]["extra_info"]["key"])

    episodes = [
        Episode("lookup-then-answer", 0, [_call("lookup", key=key(0)), f"so <ans>{truth(0)}</ans><|im_end|>"]),
        Episode(
            "wrong-key-then-submit",
            1,
            [_call("lookup", key="k9"), _call("lookup", key=key(1)), _call("submit", answer=truth(1))],
        ),
        Episode("turn-cap", 2, [_call("lookup", key="k1")] * 4),
        Episode("unknown-tool", 3, [_call("search", query="x"), "<ans>0</ans><|im_end|>"]),
        Episode("wrong-submit", 4, [_call("submit", answer="nope")]),
        Episode("abandons", 5, ["I cannot do this.<|im_end|>"]),
    ]
    loop = get_event_loop()
    for k, ep in enumerate(episodes):
        sample = dict(dataset[ep.row])
        agent_name = sample.pop("agent_name")
        ep.server = ScriptedServer(tokenizer, ep.turns)
        agent = instantiate(
            config=_agent_loop_registry[agent_name],
            trainer_config=DictConfigWrap(config=cfg),
            server_manager=ep.server,
            tokenizer=tokenizer,
            processor=None,
            hf_model_type="qwen2",
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(cfg.data),
            tools=ToolListWrap(tools),
        )
        uid = f"prompt{k}"
        ep.output = loop.run_until_complete(
            agent.run({"temperature": 1.0}, uid=uid, session_id=0, global_steps=STEP, **sample)
        )
        ep.uid = f"{uid}_0_0"
    return {"plan": plan, "cfg": cfg, "tokenizer": tokenizer, "dataset": dataset, "episodes": episodes, "made": made}


def _episode(run: dict[str, Any], name: str) -> Episode:
    return next(e for e in run["episodes"] if e.name == name)


def test_dry_run_of_an_agentic_harness_prints_the_validated_command_and_tool_config(tmp_path: Path) -> None:
    text = dry_run(RunSpec(run_id="a1", harness_dir=FIXTURE, out_dir=tmp_path / "run", steps=3))
    assert "(config validated)" in text
    assert "actor_rollout_ref.rollout.multi_turn.tool_config_path=" in text
    assert "class_name: trainer_backend.verl.env_tool.HarnessEnvTool" in text and "name: submit" in text
    resolved = yaml.safe_load(text.split("# resolved verl config:\n", 1)[1])
    mt = resolved["actor_rollout_ref"]["rollout"]["multi_turn"]
    assert mt["max_assistant_turns"] == 4 and mt["format"] == "hermes" and mt["max_parallel_calls"] == 1
    tools = yaml.safe_load(Path(mt["tool_config_path"]).read_text())["tools"]
    assert [t["tool_schema"]["function"]["name"] for t in tools] == ["lookup", "submit"]


def test_every_row_names_the_agent_loop_and_carries_its_row_for_the_environment(run: dict[str, Any]) -> None:
    first = run["dataset"][0]
    assert first["agent_name"] == "evotrainer_env_agent"
    carried = orjson.loads(first["tools_kwargs"]["lookup"]["create_kwargs"]["row"])
    source = orjson.loads((FIXTURE / "data" / "train.jsonl").read_bytes().splitlines()[0])
    assert carried == source  # make_env gets the harness row as it is in data/train.jsonl


def test_each_episode_gets_one_environment_from_its_own_row(run: dict[str, Any]) -> None:
    acted = [e for e in run["episodes"] if e.name not in ("unknown-tool", "abandons")]
    assert len(run["made"]) == len(acted)  # one make_env per episode that called a harness tool, not per call
    assert [m["id"] for m in run["made"]] == [run["dataset"][e.row]["extra_info"]["id"] for e in acted]


def test_the_agent_loop_ends_episodes_as_the_harness_contract_says(run: dict[str, Any]) -> None:
    stops = {e.name: e.output.extra_fields["stop_reason"] for e in run["episodes"]}
    assert stops == {
        "lookup-then-answer": "answer",
        "wrong-key-then-submit": "answer",  # the environment said done after a right submit
        "turn-cap": "max_turns",
        "unknown-tool": "answer",
        "wrong-submit": "tool_error",  # done with success False
        "abandons": "abandon",  # no action, no answer (the manifest's answer protocol)
    }
    submit = _episode(run, "wrong-key-then-submit")
    assert submit.server is not None and submit.server.turns == []  # nothing generated after done
    calls = submit.output.extra_fields["env_calls"]
    assert [(c["tool"], c["success"], c["done"]) for c in calls] == [
        ("lookup", False, False),
        ("lookup", True, False),
        ("submit", True, True),
    ]
    cap = _episode(run, "turn-cap")
    assert cap.output.extra_fields["policy_turns"] == 4 and cap.output.extra_fields["tool_calls"] == 3
    assert cap.server is not None and set(cap.server.max_tokens) <= set(range(1, 129))  # max_turn_tokens: 128


def test_observation_tokens_are_masked_out_of_the_policy_tokens(run: dict[str, Any]) -> None:
    ep = _episode(run, "lookup-then-answer")
    mask, tokenizer = ep.output.response_mask, run["tokenizer"]
    zeros = [i for i, m in enumerate(mask) if m == 0]
    observation = tokenizer.decode([ep.output.response_ids[i] for i in zeros], skip_special_tokens=True)
    table = run["dataset"][0]["extra_info"]["table"]
    assert table[run["dataset"][0]["extra_info"]["key"]] in observation and "<tool_response>" in observation


def _reward_manager_result(run: dict[str, Any], ep: Episode) -> dict[str, Any]:
    """Score one episode with verl's own reward manager, fed as AgentLoopWorker._compute_score feeds it."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager

    manager = load_reward_manager(run["cfg"], run["tokenizer"])
    sample = dict(run["dataset"][ep.row])
    prompts = torch.tensor([ep.output.prompt_ids])
    responses = torch.tensor([ep.output.response_ids])
    data = DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "attention_mask": torch.ones((1, prompts.shape[1] + responses.shape[1]), dtype=torch.long),
        },
        non_tensors={
            **{k: np.array([v], dtype=object) for k, v in sample.items() if k != "dummy_tensor"},
            "__num_turns__": np.array([ep.output.num_turns]),
            "tool_extra_fields": np.array([ep.output.extra_fields], dtype=object),
        },
    )
    return dict(manager.loop.run_until_complete(manager.run_single(data)))


def test_verl_reward_manager_passes_the_trajectory_to_the_harness_reward(run: dict[str, Any]) -> None:
    right = _reward_manager_result(run, _episode(run, "lookup-then-answer"))
    assert right["reward_score"] == 1.0
    assert right["reward_extra_info"]["num_turns"] == 4.0  # verl's count: user + assistant turns + 1
    assert right["reward_extra_info"]["tool_calls"] == 1.0  # from HarnessAgentLoop's extra fields
    wrong = _reward_manager_result(run, _episode(run, "wrong-submit"))
    assert wrong["reward_score"] == 0.0 and wrong["reward_extra_info"]["tool_calls"] == 1.0


def _write_dumps(run: dict[str, Any], folder: Path) -> None:
    """verl's own writer, given what PPOTrainer._log_rollout_data / _validate give it."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    tok, eps = run["tokenizer"], run["episodes"]
    inputs = [tok.decode(e.output.prompt_ids, skip_special_tokens=True) for e in eps]
    outputs = [_decoded(run, e) for e in eps]
    gts = [run["dataset"][e.row]["reward_model"]["ground_truth"] for e in eps]
    scores = [_reward_manager_result(run, e)["reward_score"] for e in eps]
    uids = {"uid": [e.uid for e in eps]}
    PPOTrainer._write_generations(inputs, outputs, gts, scores, uids, str(folder / "verl_dumps/train"), STEP)
    extras = {**uids, "reward": scores, "acc": scores}
    PPOTrainer._write_generations(inputs, outputs, gts, scores, extras, str(folder / "verl_dumps/val"), STEP)


def _decoded(run: dict[str, Any], ep: Episode) -> str:
    return str(run["tokenizer"].decode(ep.output.response_ids, skip_special_tokens=True))


def _state(run_dir: Path, tool_format: str | None) -> Any:
    from trainer_backend.verl.run import RunState

    return RunState(
        run_id="a1",
        attempt=1,
        harness_root=str(FIXTURE),
        model_path=str(run_dir / "no-tokenizer"),
        max_response_length=512,
        stall_timeout_s=60,
        started_at=0.0,
        strict_eval="eval/strict.py:score",
        tool_format=tool_format,
    )


def test_reader_takes_trajectories_from_the_episode_records(run: dict[str, Any]) -> None:
    from trainer_backend.verl.run import convert_dumps

    folder = run["plan"].checkpoint_dir.parent
    _write_dumps(run, folder)
    assert convert_dumps(folder, _state(folder, "hermes")) == []
    rollouts = {r.response: r for r in read_run_rollouts(folder, ["train"]).rollouts}
    assert len(rollouts) == len(run["episodes"])
    by_name = {e.name: rollouts[_decoded(run, e)] for e in run["episodes"]}
    submit = by_name["wrong-key-then-submit"]
    assert submit.num_turns == 3 and submit.tool_calls == 3 and submit.stop_reason is StopReason.ANSWER
    assert [(t.tool, t.success) for t in submit.turns] == [("lookup", False), ("lookup", True), ("submit", True)]
    assert orjson.loads(submit.turns[1].arguments) == {"key": run["dataset"][1]["extra_info"]["key"]}
    assert all(t.policy_tokens > 0 for t in submit.turns) and submit.turns[0].observation_tokens > 0
    assert by_name["turn-cap"].stop_reason is StopReason.MAX_TURNS and by_name["turn-cap"].turns[-1].success is None
    assert by_name["wrong-submit"].stop_reason is StopReason.TOOL_ERROR
    assert by_name["abandons"].stop_reason is StopReason.ABANDON and by_name["abandons"].num_turns == 1
    assert by_name["lookup-then-answer"].strict_score == 1.0  # the protected evaluator scored the trajectory


def test_reader_splits_verl_dump_text_into_the_same_turns_without_records(run: dict[str, Any], tmp_path: Path) -> None:
    """What verl's dump alone gives (turns.py): the same texts, tools, arguments and results; no success flag
    from the environment (only verl's own refusals), and the stop reason from the text."""
    from trainer_backend.verl.run import convert_dumps

    exact_dir = run["plan"].checkpoint_dir.parent
    folder = tmp_path / "run"
    _write_dumps(run, folder)  # the same dumps, no trajectory records
    assert convert_dumps(folder, _state(folder, "hermes")) == []
    _write_dumps(run, exact_dir)
    assert convert_dumps(exact_dir, _state(exact_dir, "hermes")) == []
    exact = {r.response: r for r in read_run_rollouts(exact_dir, ["train"]).rollouts}
    split = {r.response: r for r in read_run_rollouts(folder, ["train"]).rollouts}
    assert split.keys() == exact.keys()
    for response, want in exact.items():
        got = split[response]
        calls = [(t.tool, t.arguments, t.result) for t in got.turns]
        assert calls == [(t.tool, t.arguments, t.result) for t in want.turns]
        assert [t.text.strip() for t in got.turns] == [t.text.strip() for t in want.turns]
        assert got.num_turns == want.num_turns and got.tool_calls == want.tool_calls
    unknown = next(r for r in split.values() if "Unknown function 'search'" in r.response)
    assert unknown.turns[0].success is False  # verl's own refusal is recognised from its text
    submit = split[_decoded(run, _episode(run, "wrong-key-then-submit"))]
    assert submit.turns[0].result.startswith("no key")
    assert [t.success for t in submit.turns] == [None, None, None]  # the environment's flags are not in the dump
    # a wrong submit (the environment's done) and an abandonment (the answer protocol) read as answers from text
    assert sorted(r.stop_reason.value for r in split.values()) == ["answer"] * 5 + ["max_turns"]


def test_a_candidate_environment_is_parsed_not_imported_and_bad_tools_fail_naming_the_field(tmp_path: Path) -> None:
    harness = tmp_path / "h"
    shutil.copytree(FIXTURE, harness)
    env = harness / "harness" / "env.py"
    env.write_text("raise RuntimeError('imported outside its sandbox')\n" + env.read_text())
    _, plan = prepare(RunSpec(run_id="c", harness_dir=harness, out_dir=tmp_path / "run", steps=2))
    (_, as_candidate), (_, as_incumbent) = validate_plans([(plan, False), (plan, True)], tmp_path, "t")
    assert as_candidate == []  # parsed: make_env is defined at top level, the module never ran
    assert any("imported outside its sandbox" in p for p in as_incumbent)
    manifest = harness / "evotrainer.yaml"
    declared = "{key: {type: string, description: a key such as k2}}"
    manifest.write_text(manifest.read_text().replace(declared, "{key: {}}"))
    verl_cfg = harness / "harness" / "verl.yaml"
    verl_cfg.write_text(verl_cfg.read_text().replace("tool_format: hermes", "tool_format: hermez"))
    with pytest.raises(VerlConfigError) as err:
        dry_run(RunSpec(run_id="c", harness_dir=harness, out_dir=tmp_path / "run2", steps=2))
    assert "properties.key.type" in str(err.value) and "fix the manifest's env.tools" in str(err.value)
    assert "multi_turn.format=hermez: no such verl tool-call parser" in str(err.value)
    load_harness(FIXTURE)  # the fixture stays a valid harness
