"""A real pretrained model learns through EvoTrainer, on the CPU, through the product's own paths.

The model is SmolLM2-135M-Instruct from the models cache (`make test` runs `evotrainer models get
smollm2-135m-instruct` first; the fixture fetches it otherwise), trained by the real CLI (subprocesses, real
torch, no mocks) on copies of `examples/arithmetic-smollm2` shrunk to a CPU smoke budget in their
`harness/trainer.yaml` (`device: cpu`, groups of 4 on 2 prompts, short responses) and a held-out file of a
few rows (it is always evaluated whole: its size is the main cost of a run). The asserts are on measured
directions and exact equalities, never on fixed scores:

1. As shipped the model never writes ``<ans>N</ans>`` (format rate 0 on the held-out rows, and the run says
   so); a warm start of 4 steps of 4 worked solutions (at a higher learning rate than the example's, capped
   at those 4 steps so the evidence-driven warm start cannot run on) makes the answer format a positive
   share of greedy answers, on training prompts (`warmstart_format_rate`) and on the held-out rows.
2. One GRPO step, a kill -9 of the trainer after its first checkpoint, and `evotrainer train --resume`: the
   weights, AdamW moments, metrics and rollouts equal those of the same run left alone, bit for bit (a dense
   reward in the copy gives every group reward variance, so the steps really move the weights).
3. A whole `evotrainer run` session of the example on a smoke budget (v0, propose, backtest in the process
   sandbox, pilots, decide, record) finishes on the CPU and records its decision. The suite asserts outcomes,
   never wall-clock limits (a busy CI machine would fail them and prove nothing about speed): `WALL_S` is only
   a generous hang guard, and timings belong in `benchmarks/`.
   v0 gets test 1's 4-step warm start: started as shipped, the policy never writes the format, and the
   controller's first move is then the example's own warm start (200 steps of 64 examples: GPU work), which
   no CPU smoke budget holds.

The two runs of tests 1 and 2 run side by side (one torch thread each, the trainer's default), so the module
costs about as much wall time as three single runs and one short session: measured on a 2-core machine busy
with other jobs (load 4 to 6), 93 s, 113 s and 208 s. Every checkpoint of this model is 1.2 to 2.3 GB (weights,
the KL reference, AdamW moments): a test that passes deletes its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "arithmetic-smollm2"
SMOKE = {"device": "cpu", "group_size": 4, "prompts_per_step": 2, "max_new_tokens": 24, "warmstart_steps": 0}
WARM = {"warmstart_steps": 4, "warmstart_batch_size": 4, "warmstart_lr": 2.0e-4, "warmstart_max_steps": 4}
DENSE_REWARD = (  # the share of digits in a response: the samples of a group differ, so groups train
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
    "    return {'score': sum(c.isdigit() for c in solution_str) / max(1, len(solution_str))}\n"
)
WALL_CLOCK = ("timing_s/", "perf/")  # metrics that are wall-clock figures, not training numbers
WALL_S = 1800.0  # a hang guard only (a busy 2-core machine runs a smoke session in minutes), never a speed check


def _harness(dest: Path, val_rows: int, **settings: object) -> Path:
    """A copy of the example with `settings` written into its trainer.yaml and `val_rows` held-out rows."""
    shutil.copytree(EXAMPLE, dest)
    val = (dest / "data" / "val.jsonl").read_text().splitlines()  # sorted by level: spread the rows over them
    (dest / "data" / "val.jsonl").write_text("\n".join(val[:: len(val) // val_rows][:val_rows]) + "\n")
    trainer = yaml.safe_load((dest / "harness" / "trainer.yaml").read_text())
    trainer.update(SMOKE, **settings)
    (dest / "harness" / "trainer.yaml").write_text(yaml.safe_dump(trainer, sort_keys=False))
    return dest


def _env(cwd: Path) -> dict[str, str]:
    """The CLI's environment: this checkout, a private warm-start cache, no store from the caller's shell."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOTRAINER_CACHE": str(cwd / "cache"), "COLUMNS": "200"}
    env.pop("EVOTRAINER_DB", None)
    env.pop("EVOTRAINER_DEVICE", None)
    return env


def _start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    """Start `evotrainer ARGS` (as `python -m agent.cli`) as the leader of a new process group."""
    return subprocess.Popen(
        [sys.executable, "-m", "agent.cli", *args],
        cwd=cwd,
        env=_env(cwd),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """Wait for `proc`; its exit code and output."""
    try:
        out, _ = proc.communicate(timeout=WALL_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{proc.args!r} ran past {WALL_S:.0f} s:\n{out[-3000:]}")
    return proc.returncode, out


def _train(harness: Path, out: Path, steps: int, *extra: str) -> subprocess.Popen[str]:
    return _start("train", "--harness", str(harness), "--out", str(out), "--steps", str(steps), *extra, cwd=out.parent)


def _stop(procs: list[subprocess.Popen[str]], runs: list[Path]) -> None:
    """Leave nothing running when a test fails half-way: the CLI processes and their trainers (own groups)."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for run in runs:
        lock = run / "trainer.lock"  # the trainer's pid, as `submit` wrote it
        pid = lock.read_text().strip() if lock.is_file() else ""
        if pid.isdigit() and not (run / "summary.json").exists():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid), signal.SIGKILL)


def _ok(proc: subprocess.Popen[str]) -> None:
    code, out = _finish(proc)
    assert code == 0, out[-3000:]


def _summary(run: Path) -> dict[str, Any]:
    return json.loads((run / "summary.json").read_text())  # type: ignore[no-any-return]


def _metrics(run: Path) -> dict[int, dict[str, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["data"] for row in rows}


def _rollouts(run: Path, split: str, step: int) -> list[dict[str, Any]]:
    lines = (run / "rollouts" / split / f"step_{step}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _checkpoint(run: Path, name: str = "last.pt") -> dict[str, Any]:
    import torch

    return torch.load(run / "checkpoints" / name, map_location="cpu", weights_only=True)  # type: ignore[no-any-return]


def _same(a: Any, b: Any) -> bool:
    """Exactly equal, tensors bit for bit, through nested dicts, lists and tuples."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _drop_checkpoints(root: Path) -> None:
    """Delete the checkpoints under `root` once a test's asserts passed: 1.2 to 2.3 GB each for this model
    (weights, the KL reference, AdamW moments), and pytest keeps the folders of its last runs."""
    for path in root.rglob("*.pt"):
        path.unlink()


def test_a_short_warm_start_turns_the_answer_format_from_none_into_a_positive_share(
    smollm2_folder: Path, tmp_path: Path
) -> None:
    cold = _harness(tmp_path / "cold", val_rows=4)
    warm = _harness(tmp_path / "warm", val_rows=4, **WARM)
    cold_run, warm_run = tmp_path / "cold-run", tmp_path / "warm-run"
    procs = [_train(cold, cold_run, 1), _train(warm, warm_run, 1)]  # side by side
    try:
        for proc in procs:
            _ok(proc)
    finally:
        _stop(procs, [cold_run, warm_run])
    for run in (cold_run, warm_run):
        policy = json.loads((run / "config.json").read_text())["policy"]
        assert policy["folder"] == str(smollm2_folder) and policy["device"] == "cpu"
        assert policy["stop_tokens"] == ["<|im_end|>"] and policy["sampler"] == "fast"

    # As shipped: no held-out answer in the format; the run says so, and no warm start ran.
    shipped = _summary(cold_run)
    assert shipped["outcome"] == "ok" and "warmstart_format_rate" not in shipped
    assert _metrics(cold_run)[0]["val/format_rate"] == 0.0
    assert [r["reward_components"]["formatted"] for r in _rollouts(cold_run, "val", 0)] == [0.0] * 4
    assert any("wrote the answer format (<ans>N</ans>) in none of 4" in w for w in shipped["warnings"])

    # Warm-started: exactly the 4 steps asked for (the cap), trained now, and the format is a positive share.
    warmed = _summary(warm_run)
    assert warmed["outcome"] == "ok"
    assert warmed["warmstart_steps"] == 4.0 and warmed["warmstart_cache_hit"] == 0.0
    assert 0.0 < warmed["warmstart_format_rate"] <= 1.0  # greedy answers to training prompts
    assert _metrics(warm_run)[0]["val/format_rate"] > _metrics(cold_run)[0]["val/format_rate"]
    assert sum(r["reward_components"]["formatted"] for r in _rollouts(warm_run, "val", 0)) > 0
    assert not any("in none of" in w for w in warmed.get("warnings", []))
    log = (warm_run / "train.log").read_text()
    assert "warmstart: trained 4 steps" in log and "warmstart: answer-format rate" in log
    assert len(list((tmp_path / "cache" / "warmstart").glob("*.pt"))) == 1  # cached in the test's own cache
    _drop_checkpoints(tmp_path)


def test_a_grpo_step_then_kill_nine_then_resume_equals_the_run_left_alone(smollm2_folder: Path, tmp_path: Path) -> None:
    harness = _harness(tmp_path / "h", val_rows=2, max_new_tokens=12, save_every=1, val_every=2)
    (harness / "harness" / "reward.py").write_text(DENSE_REWARD)
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    procs = [_train(harness, whole, 2), _train(harness, killed, 2)]  # side by side
    reference, first = procs
    try:
        # kill -9 the trainer (its own process group) once step 1's checkpoint is on disk, while step 2 runs
        checkpoint = killed / "checkpoints" / "last.pt"
        deadline = time.monotonic() + WALL_S
        while not checkpoint.is_file():
            assert time.monotonic() < deadline and first.poll() is None, "no step-1 checkpoint:\n" + _finish(first)[1]
            time.sleep(0.05)
        os.killpg(int((killed / "trainer.lock").read_text()), signal.SIGKILL)
        code, out = _finish(first)
        assert code == 1 and "rerun with --resume" in out, out[-3000:]
        assert not (killed / "summary.json").exists(), "the trainer finished before the kill"
        assert _checkpoint(killed)["state"]["step"] == 1

        procs.append(_train(harness, killed, 2, "--resume"))
        _ok(procs[-1])
        _ok(reference)
    finally:
        _stop(procs, [whole, killed])
    log = (killed / "train.log").read_text()
    assert f"resumed from {checkpoint} at step 1" in log
    assert log.count("step 0 |") == 1 and log.count("step 1 |") == 1 and log.count("step 2 |") == 1

    ref, res = _checkpoint(whole), _checkpoint(killed)
    assert not _same(ref["model"], _checkpoint(whole, "start.pt")["model"]), "the GRPO steps did not move the weights"
    for key in ("model", "optimizer", "reference", "torch_rng", "py_rng"):
        assert _same(ref[key], res[key]), key
    assert ref["state"]["step"] == res["state"]["step"] == 2 and _same(ref["state"]["filter"], res["state"]["filter"])
    ref_rows, res_rows = _metrics(whole), _metrics(killed)
    assert sorted(ref_rows) == sorted(res_rows) == [0, 1, 2]
    for step, data in ref_rows.items():
        numbers = {k: v for k, v in data.items() if not k.startswith(WALL_CLOCK)}
        assert numbers == {k: v for k, v in res_rows[step].items() if not k.startswith(WALL_CLOCK)}, step
        if step:  # groups with reward variance were kept: a real update, in both runs alike
            assert numbers["rollout/kept_group_ratio"] > 0.0 and numbers["actor/grad_norm"] > 0.0, step
    for split, step in (("train", 1), ("train", 2), ("val", 0), ("val", 2)):
        assert _rollouts(whole, split, step) == _rollouts(killed, split, step), (split, step)
    assert _summary(whole)["steps_done"] == _summary(killed)["steps_done"] == 2
    _drop_checkpoints(tmp_path)


def test_a_whole_session_of_the_example_finishes_on_the_cpu_and_records_its_decision(
    smollm2_folder: Path, tmp_path: Path, git_available: None
) -> None:
    from sqlalchemy import select

    from store import models as tables
    from store.engine import make_engine, session_scope

    harness = _harness(tmp_path / "h", val_rows=4, val_every=2, save_every=2, **WARM)
    session = ("--sandbox", "process", "--iterations", "1", "--base-steps", "2", "--pilot-steps", "2",
               "--candidates", "1", "--replicates", "0", "--escalate-after", "0")  # fmt: skip
    proc = _start("run", "--harness", str(harness), "--repo", str(tmp_path / "repo"), *session, cwd=tmp_path)
    code, out = _finish(proc)
    assert code == 0, out[-3000:]

    engine = make_engine(f"sqlite:///{tmp_path / '.evotrainer' / 'evotrainer.db'}")
    try:
        with session_scope(engine) as db:
            [evo] = db.scalars(select(tables.EvoSession)).all()
            assert evo.status == "finished", evo.status_reason
            versions = {v.index: v for v in db.scalars(select(tables.Version)).all()}
            assert sorted(versions) == [0, 1]
            decided = versions[1]
            assert decided.decision is not None and decided.outcome is not None and decided.rationale
            candidates = db.scalars(select(tables.Candidate)).all()
            assert candidates and all(c.iteration == 1 and c.status != "proposed" for c in candidates)
            runs = db.scalars(select(tables.Run)).all()
            kinds = sorted(r.kind for r in runs)
            assert kinds[0] == "full" and "pilot" in kinds and all(r.outcome == "ok" for r in runs), kinds
            dirs = [Path(r.artefact_dir) for r in runs]
            [base] = [Path(r.artefact_dir) for r in runs if r.kind == "full"]
    finally:
        engine.dispose()
    for run in dirs:
        policy = json.loads((run / "config.json").read_text())["policy"]
        assert policy["folder"] == str(smollm2_folder) and policy["device"] == "cpu"
        assert policy["stop_tokens"] == ["<|im_end|>"]
        assert _summary(run)["steps_done"] == 2
    assert _summary(base)["warmstart_format_rate"] > 0.0  # v0 writes the format: its reward groups can vary
    _drop_checkpoints(tmp_path)
