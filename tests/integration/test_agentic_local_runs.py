"""The local backend trains agentic episodes end to end on the lookup example (tiny model).

- a sandboxed run records every trajectory (turns, tools, successes, token counts, stop reasons) for train
  and val, and the reward gets the turns;
- exact continuation (2 + 2 steps == 4 steps) and resume keep working bit for bit for agentic runs;
- a hostile environment ends the run as a classified failure naming `harness/env.py`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from diagnostics.schema import StopReason, read_metrics, read_run_rollouts
from harness.failures import Outcome
from trainer_backend import BACKENDS
from trainer_backend.base import RunSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = """lr: 1.0e-3
group_size: 4
prompts_per_step: 4
val_every: 2
save_every: 2
n_layers: 1
hidden: 32
warmstart_steps: 150
max_turns: 4
max_turn_tokens: 16
"""
AGENTIC_STOPS = {s for s in StopReason if s not in (StopReason.EOS, StopReason.ABORT)}

pytestmark = pytest.mark.slow


@pytest.fixture()
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the lookup oracle with a tiny model, a short val set and a private warm-start cache."""
    monkeypatch.setenv("EVOTRAINER_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "h"
    shutil.copytree(EXAMPLES / "lookup-agent-oracle", root)
    (root / "harness" / "trainer.yaml").write_text(TINY)
    val = (root / "data" / "val.jsonl").read_text().splitlines()
    (root / "data" / "val.jsonl").write_text("\n".join(val[::15]) + "\n")
    return root


def _spec(harness: Path, out: Path, steps: int, **kw: object) -> RunSpec:
    return RunSpec(run_id="t", harness_dir=harness, out_dir=out, steps=steps, **kw)  # type: ignore[arg-type]


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "checkpoints" / "last.pt", weights_only=True)["model"]  # type: ignore[no-any-return]


def test_a_sandboxed_agentic_run_records_every_trajectory(harness: Path, tmp_path: Path) -> None:
    reward = harness / "harness" / "reward.py"
    reward.write_text(  # the fixed reward, plus what it saw of the trajectory
        reward.read_text() + "\n\n_fixed = compute_score\n\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
        "    out = _fixed(data_source, solution_str, ground_truth, extra_info)\n"
        "    turns = extra_info['turns']\n"
        "    assert len(turns) == extra_info['num_turns'] and 'table' in extra_info\n"
        "    out['seen_turns'] = float(len(turns))\n"
        "    out['seen_policy_tokens'] = float(sum(t['policy_tokens'] for t in turns))\n"
        "    return out\n"
    )
    out = tmp_path / "run"
    result = BACKENDS["local"].run(_spec(harness, out, steps=3, sandbox="process"))
    assert result.outcome is Outcome.OK, result.message
    rollouts = read_run_rollouts(out)
    assert not rollouts.problems
    train = [r for r in rollouts.rollouts if r.split == "train"]
    val = [r for r in rollouts.rollouts if r.split == "val"]
    assert len([r for r in train if r.step == 1]) == 16 and {r.step for r in val} == {0, 2, 3}
    for r in train + val:
        assert r.turns and r.num_turns == len(r.turns) and r.stop_reason in AGENTIC_STOPS
        assert r.response_tokens == sum(t.policy_tokens + t.observation_tokens for t in r.turns)
        assert r.tool_calls == sum(t.text.endswith("</call>") for t in r.turns)
        assert r.truncated is (r.stop_reason is StopReason.LENGTH)
        assert r.reward_components["seen_turns"] == r.num_turns
        assert r.reward_components["seen_policy_tokens"] == sum(t.policy_tokens for t in r.turns)
        for turn in r.turns:
            assert (turn.observation_tokens > 0) is (turn.success is not None)
    called = [t for r in train + val for t in r.turns if t.tool == "lookup" and t.success]
    assert called, "the warm-started policy looks values up"
    assert all(t.result.isdigit() and t.observation_tokens == 3 for t in called)
    rows = read_metrics(out / "metrics.jsonl")
    assert {"num_turns/mean", "rollout/tool_calls_mean", "rollout/stop/answer"} <= set(rows[1].data)
    assert {"val/num_turns_mean", "val/stop/abandon"} <= set(rows[0].data)
    shares = [v for k, v in rows[1].data.items() if k.startswith("rollout/stop/")]
    assert sum(shares) == pytest.approx(1.0)


def test_agentic_exact_continuation_and_resume_train_like_one_run(harness: Path, tmp_path: Path) -> None:
    backend = BACKENDS["local"]
    whole = backend.run(_spec(harness, tmp_path / "whole", steps=4, seed=3))
    assert whole.outcome is Outcome.OK, whole.message
    parent = tmp_path / "seg0"
    assert backend.run(_spec(harness, parent, steps=2, seed=3)).outcome is Outcome.OK
    init = parent / "checkpoints" / "last.pt"
    seg = tmp_path / "seg1"  # a control pilot: its own seed drives only validation sampling
    control = backend.run(_spec(harness, seg, steps=2, seed=51, init_checkpoint=init, init_state="exact"))
    assert control.outcome is Outcome.OK
    ref = _weights(tmp_path / "whole")
    assert not all(torch.equal(ref[k], _weights(parent)[k]) for k in ref)  # training moved the weights
    assert all(torch.equal(ref[k], _weights(seg)[k]) for k in ref)

    # a run stopped after its step-2 checkpoint and resumed: the same numbers as the uninterrupted one
    # (a killed trainer leaves no summary.json; one that exists reads as a finished run)
    (parent / "summary.json").unlink()
    resumed = backend.run(_spec(harness, parent, steps=4, seed=3, resume=True))
    assert resumed.outcome is Outcome.OK and resumed.steps_done == 4
    assert all(torch.equal(ref[k], _weights(parent)[k]) for k in ref)
    a = {r.step: r.data for r in read_metrics(tmp_path / "whole" / "metrics.jsonl")}
    b = {r.step: r.data for r in read_metrics(parent / "metrics.jsonl")}
    assert a.keys() == b.keys()
    for step, data in a.items():
        assert {k: v for k, v in data.items() if not k.startswith("timing_s/")} == {
            k: v for k, v in b[step].items() if not k.startswith("timing_s/")
        }, step
    assert read_run_rollouts(tmp_path / "whole").rollouts == read_run_rollouts(parent).rollouts


@pytest.mark.parametrize("sandbox", ["process", "none"])
def test_a_hostile_environment_fails_the_run_as_its_candidate(harness: Path, tmp_path: Path, sandbox: str) -> None:
    (harness / "harness" / "env.py").write_text(
        "class Env:\n"
        "    def call(self, tool, arguments):\n"
        "        return ['not', 'a', 'result']\n\n\n"
        "def make_env(row):\n"
        "    return Env()\n"
    )
    result = BACKENDS["local"].run(_spec(harness, tmp_path / "run", steps=2, sandbox=sandbox))
    assert result.outcome is Outcome.CANDIDATE_ERROR, result.message
    assert "harness/env.py" in result.message and "Traceback" not in result.message
