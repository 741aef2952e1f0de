"""Metrics tailer and dump reader on files written by verl's own FileLogger and dump code."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from diagnostics.schema import read_metrics, read_run_rollouts
from trainer_backend.verl import readers
from trainer_backend.verl.run import RunState, convert_dumps, sync_metrics

pytestmark = pytest.mark.verl
pytest.importorskip("verl")


def _file_logger(path: Path, monkeypatch: pytest.MonkeyPatch):
    from verl.utils.tracking import Tracking

    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    return Tracking(project_name="p", experiment_name="e", default_backend=["file"])


def test_tail_reads_verl_file_logger_with_half_line_and_restart(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "verl_metrics.1.jsonl"
    tail = readers.MetricsTail(path, tmp_path / "tail.json")
    tracking = _file_logger(path, monkeypatch)
    tracking.log({"val-core/openai/gsm8k/acc/mean@1": 0.25}, step=0)
    tracking.log({"critic/score/mean": 0.5, "actor/entropy": 1.5}, step=1)
    assert [r["step"] for r in tail.poll()] == [0, 1]
    # a line still being written: the same bytes verl writes, cut in half
    line = orjson.dumps({"step": 2, "data": {"critic/score/mean": 0.75}}) + b"\n"
    with open(path, "ab") as fh:
        fh.write(line[:10])
    assert tail.poll() == [] and tail.pending_bytes() == 10
    with open(path, "ab") as fh:
        fh.write(line[10:])
    # a fresh tail object (another process) continues from the persisted offset
    again = readers.MetricsTail(path, tmp_path / "tail.json")
    assert [r["data"] for r in again.poll()] == [{"critic/score/mean": 0.75}]
    tracking.logger["file"].finish()
    # restart: verl's FileLogger reopens the same path with "wb" and writes fewer bytes than before
    restarted = _file_logger(path, monkeypatch)
    restarted.log({"critic/score/mean": 0.9}, step=3)
    rows = again.poll()
    assert [r["step"] for r in rows] == [3] and again.restarts == 1
    # a restart that regrows past the old offset is caught by the prefix hash, not only by size
    for step in range(4, 12):
        restarted.log({"critic/score/mean": float(step)}, step=step)
    assert [r["step"] for r in again.poll()] == list(range(4, 12))
    restarted.logger["file"].finish()
    path.write_bytes(b"")
    _ = _file_logger(path, monkeypatch)  # truncates
    with open(path, "ab") as fh:
        for step in range(20, 40):
            fh.write(orjson.dumps({"step": step, "data": {"x": 1.0}}) + b"\n")
    assert [r["step"] for r in again.poll()] == list(range(20, 40)) and again.restarts == 2


def _state(tmp_path: Path, attempt: int = 1, harness_root: str = "/h", strict_eval: str = "") -> RunState:
    return RunState(
        run_id="r1",
        attempt=attempt,
        harness_root=harness_root,
        model_path=str(tmp_path / "no-tokenizer"),
        max_response_length=5,
        stall_timeout_s=60,
        started_at=time.time(),
        strict_eval=strict_eval,
    )


def _v1_trainer_cls():
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    return PPOTrainer


def test_sync_metrics_keeps_steps_across_a_truncating_restart(tmp_path: Path, monkeypatch) -> None:
    first = _file_logger(tmp_path / "verl_metrics.1.jsonl", monkeypatch)
    first.log({"val-core/openai/gsm8k/acc/mean@1": 0.25}, step=0)
    for step in (1, 2):
        first.log({"critic/score/mean": step / 10, "training/global_step": step}, step=step)
    assert sync_metrics(tmp_path, _state(tmp_path)) == 2
    # attempt 2 resumes at step 2: its logger truncates and re-logs validation at that step
    second = _file_logger(tmp_path / "verl_metrics.2.jsonl", monkeypatch)
    second.log({"val-core/openai/gsm8k/acc/mean@1": 0.5}, step=2)
    second.log({"critic/score/mean": 0.3, "training/global_step": 3}, step=3)
    assert sync_metrics(tmp_path, _state(tmp_path, attempt=2)) == 3
    rows = {r.step: r.data for r in read_metrics(tmp_path / "metrics.jsonl")}
    assert sorted(rows) == [0, 1, 2, 3]
    assert rows[0]["val/reward_acc"] == 0.25  # the reward's own `acc`: shown, never the strict score
    assert rows[2]["critic/score/mean"] == 0.2 and rows[2]["val/reward_acc"] == 0.5  # merged, not replaced
    assert not any("val/strict_acc" in d for d in rows.values())  # only the protected evaluator sets it


def test_v1_dumps_become_rollouts_and_dead_group_metrics(tmp_path: Path, monkeypatch) -> None:
    cls = _v1_trainer_cls()
    train_dir, val_dir = tmp_path / "verl_dumps/train", tmp_path / "verl_dumps/val"
    outputs = ["a b #### 1", "c #### 2", "one two three four five", "x", "y", "z"]
    uids = ["g1_0_0", "g1_1_0", "g1_2_0", "g2_0_0", "g2_1_0", "g2_2_0"]
    cls._write_generations(
        ["q1"] * 3 + ["q2"] * 3, outputs, ["1"] * 6, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0], {"uid": uids}, str(train_dir), 1
    )
    cls._write_generations(
        ["q1", "q1"],
        ["#### 1", "no"],
        ["1", "1"],
        [1.0, 0.0],
        {"uid": ["v_0_0", "v_1_0"], "reward": [1.0, 0.0], "acc": [1.0, 0.0], "has_answer": [1.0, 0.0]},
        str(val_dir),
        1,
    )
    _file_logger(tmp_path / "verl_metrics.1.jsonl", monkeypatch).log({"critic/score/mean": 1 / 6}, step=1)

    def words(text: str) -> int:
        return len(text.split())

    monkeypatch.setattr(readers, "load_token_counter", lambda _path: words)
    state = _state(tmp_path)
    sync_metrics(tmp_path, state)
    data = read_metrics(tmp_path / "metrics.jsonl")[0].data
    assert data["rollout/dead_group_ratio"] == 0.5  # g2 all zero, g1 varies
    assert data["rollout/truncation_rate"] == pytest.approx(
        1 / 6
    )  # only the 5-word output reaches max_response_length=5
    assert convert_dumps(tmp_path, state) == []
    result = read_run_rollouts(tmp_path)
    assert result.problems == []
    train = [r for r in result.rollouts if r.split == "train"]
    val = [r for r in result.rollouts if r.split == "val"]
    assert len(train) == 6 and len(val) == 2
    assert {r.group_id for r in train} == {"1/g1", "1/g2"} and [r.sample_index for r in train[:3]] == [0, 1, 2]
    assert train[2].truncated and train[2].response_tokens == 5 and train[2].stop_reason.value == "length"
    assert train[0].reward == 1.0 and train[0].ground_truth == "1" and train[0].prompt == "q1"
    assert val[0].reward_components == {"acc": 1.0, "has_answer": 1.0}


def test_v0_dump_rows_without_uid_group_by_prompt(tmp_path: Path) -> None:
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    RayPPOTrainer._write_generations(
        ["p", "p", "q", "q"],
        ["1", "2", "3", "4"],
        [1, 1, 2, 2],
        [1.0, 0.0, 0.5, 0.5],
        {"acc": [1.0, 0.0, 0.5, 0.5]},
        str(tmp_path),
        4,
    )
    rollouts, problems = readers.read_dump_file(tmp_path / "4.jsonl", "train", "r", 100, None)
    assert problems == []
    assert [r.sample_index for r in rollouts] == [0, 1, 0, 1]
    assert rollouts[0].group_id == rollouts[1].group_id != rollouts[2].group_id
    assert rollouts[0].reward_components == {"acc": 1.0} and rollouts[0].ground_truth == "1"
    rows = [orjson.loads(line) for line in (tmp_path / "4.jsonl").read_bytes().splitlines()]
    assert readers.dead_group_ratio(rows) == 0.5


def test_dump_reader_reports_a_half_written_line(tmp_path: Path) -> None:
    cls = _v1_trainer_cls()
    cls._write_generations(["q"], ["#### 1"], ["1"], [1.0], {"uid": ["g_0_0"]}, str(tmp_path), 2)
    with open(tmp_path / "2.jsonl", "ab") as fh:
        fh.write(b'{"input": "q", "outp')
    rollouts, problems = readers.read_dump_file(tmp_path / "2.jsonl", "train", "r", 100, None)
    assert len(rollouts) == 1 and len(problems) == 1 and problems[0].line == 2


STRICT = '''
def score(solution_str, ground_truth):
    """Exact: the text after the last '####' is the ground truth."""
    return float(solution_str.rsplit("####", 1)[-1].strip() == str(ground_truth).strip())
'''


def test_dumps_are_scored_by_the_protected_evaluator_not_by_the_reward(tmp_path: Path, monkeypatch) -> None:
    """A reward that claims acc=1 everywhere does not make the held-out strict score: the evaluator does."""
    harness = tmp_path / "harness"
    (harness / "eval").mkdir(parents=True)
    (harness / "eval" / "strict.py").write_text(STRICT)
    run = tmp_path / "run"
    cls = _v1_trainer_cls()
    val_dir = run / "verl_dumps/val"
    for step, outputs in ((0, ["#### 1", "#### 9"]), (4, ["#### 1", "#### 2"])):
        cls._write_generations(
            ["q1", "q2"],
            outputs,
            ["1", "2"],
            [1.0, 1.0],
            {"uid": [f"v{step}_0_0", f"v{step}_1_0"], "reward": [1.0, 1.0], "acc": [1.0, 1.0]},  # the hacked claim
            str(val_dir),
            step,
        )
    _file_logger(run / "verl_metrics.1.jsonl", monkeypatch).log({"val-core/arith/acc/mean@1": 1.0}, step=4)
    state = _state(tmp_path, harness_root=str(harness), strict_eval="eval/strict.py:score")
    assert convert_dumps(run, state) == []
    sync_metrics(run, state)
    val = [r for r in read_run_rollouts(run, ["val"]).rollouts]
    assert sorted((r.step, r.strict_score) for r in val) == [(0, 0.0), (0, 1.0), (4, 1.0), (4, 1.0)]
    rows = {r.step: r.data for r in read_metrics(run / "metrics.jsonl")}
    assert rows[0]["val/strict_acc"] == 0.5 and rows[4]["val/strict_acc"] == 1.0
    assert rows[4]["val/reward_acc"] == 1.0  # the reward's claim is kept under its own name
