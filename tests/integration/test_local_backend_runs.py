"""The local GRPO backend end to end: smoke, failures, resume, determinism.

Every test runs twice: on the tiny character model, and on a real Hugging Face model folder (a random-init
Qwen2 with a BPE tokenizer, `tests/hf_models.py`, loaded through `from_pretrained` as a user's model is),
with the chat template.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from diagnostics.schema import read_metrics, read_run_rollouts
from harness.failures import Outcome
from trainer_backend import BACKENDS
from trainer_backend.base import RunSpec, RunStatus

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = """lr: 1.0e-3
group_size: 4
prompts_per_step: 4
max_new_tokens: 24
val_every: 3
save_every: 2
n_layers: 1
hidden: 32
warmstart_steps: 20
"""

HF = """model: {folder}
prompt_format: chat
lr: 1.0e-3
group_size: 4
prompts_per_step: 4
max_new_tokens: 24
val_every: 3
save_every: 2
warmstart_steps: 20
warmstart_batch_size: 8
warmstart_lr: 1.0e-3
"""

pytestmark = pytest.mark.slow


@pytest.fixture(params=["tiny", "hf"])
def harness(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the oracle harness with a small model, a short val set and a private warm-start cache."""
    monkeypatch.setenv("EVOTRAINER_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "h"
    shutil.copytree(EXAMPLES / "arithmetic-oracle", root)
    if request.param == "tiny":
        (root / "harness" / "trainer.yaml").write_text(TINY)
    else:  # a pretrained tokenizer writes the answer tags as text: the manifest declares no one-id tokens
        manifest = (root / "evotrainer.yaml").read_text().splitlines()
        kept = [line for line in manifest if not line.startswith(("special_tokens:", "alphabet:"))]
        (root / "evotrainer.yaml").write_text("\n".join(kept) + "\n")
        (root / "harness" / "trainer.yaml").write_text(HF.format(folder=request.getfixturevalue("hf_arith_folder")))
    val = (root / "data" / "val.jsonl").read_text().splitlines()
    (root / "data" / "val.jsonl").write_text("\n".join(val[::10]) + "\n")
    return root


def _spec(harness: Path, out: Path, steps: int, **kw: object) -> RunSpec:
    return RunSpec(run_id="t", harness_dir=harness, out_dir=out, steps=steps, **kw)  # type: ignore[arg-type]


def test_grpo_smoke_loss_finite_and_every_parameter_changed(
    harness: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    from trainer_backend.local import train

    # a dense reward, so every group has variance and every parameter gets gradient
    (harness / "harness" / "reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': solution_str.count('1') / max(1, len(solution_str)), 'chars': len(solution_str)}\n"
    )
    out = tmp_path / "run"
    out.mkdir()
    spec = _spec(harness, out, steps=3)
    (out / "spec.json").write_text(spec.model_dump_json())
    assert train.main(["--spec", str(out / "spec.json")]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["outcome"] == "ok" and summary["steps_done"] == 3
    ws = next((tmp_path / "cache" / "warmstart").glob("*.pt"))
    before = torch.load(ws, weights_only=True)
    after = torch.load(out / "checkpoints" / "last.pt", weights_only=True)["model"]
    unchanged = [k for k, v in before.items() if torch.equal(v, after[k])]
    assert unchanged == []
    rows = read_metrics(out / "metrics.jsonl")
    assert [r.step for r in rows] == [0, 1, 2, 3]
    for row in rows[1:]:
        for key in ("actor/pg_loss", "actor/entropy", "actor/grad_norm", "critic/score/mean", "response_length/mean"):
            assert torch.isfinite(torch.tensor(row.data[key])), key
    assert "val/strict_acc" in rows[0].data and "val/strict_acc" in rows[3].data
    result = read_run_rollouts(out)
    assert not result.problems
    assert {r.split for r in result.rollouts} == {"train", "val"}
    assert all(r.strict_score is not None for r in result.rollouts)
    assert len([r for r in result.rollouts if r.split == "train" and r.step == 1]) == 16
    assert all("chars" in r.reward_components for r in result.rollouts)
    assert {"strict_acc_before", "strict_acc_after", "wall_time_s", "final_checkpoint"} <= set(summary)
    assert "\nsteps_done: 3\n" in capsys.readouterr().out  # the grep-able summary block


def test_raising_reward_ends_run_as_candidate_error_naming_the_file(harness: Path, tmp_path: Path) -> None:
    (harness / "harness" / "reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    raise ZeroDivisionError('bad reward')\n"
    )
    result = BACKENDS["local"].run(_spec(harness, tmp_path / "run", steps=2))
    assert result.outcome is Outcome.CANDIDATE_ERROR
    assert "harness/reward.py" in result.message and "ZeroDivisionError" in result.message
    assert "Traceback" not in json.loads((tmp_path / "run" / "summary.json").read_text())["message"]


def test_nan_reward_is_a_contract_violation(harness: Path, tmp_path: Path) -> None:
    (harness / "harness" / "reward.py").write_text("def compute_score(*args, **kw):\n    return float('nan')\n")
    result = BACKENDS["local"].run(_spec(harness, tmp_path / "run", steps=2))
    assert result.outcome is Outcome.CANDIDATE_ERROR
    assert "harness/reward.py:compute_score returned a non-finite score" in result.message


def test_killed_run_resumes_with_contiguous_metrics_and_same_numbers(harness: Path, tmp_path: Path) -> None:
    backend = BACKENDS["local"]
    reference = backend.run(_spec(harness, tmp_path / "ref", steps=6, seed=3))
    assert reference.outcome is Outcome.OK

    out = tmp_path / "killed"
    handle = backend.submit(_spec(harness, out, steps=6, seed=3))
    deadline = time.time() + 300
    while not any(r.step >= 3 for r in read_metrics(out / "metrics.jsonl")):  # past the step-2 checkpoint
        assert time.time() < deadline and backend.poll(handle) is RunStatus.RUNNING
        time.sleep(0.05)
    os.killpg(handle.pid, signal.SIGKILL)
    backend.wait(handle, timeout_s=30)
    assert backend.poll(handle) is RunStatus.LOST
    with open(out / "metrics.jsonl", "ab") as fh:  # a half-written line from the killed process
        fh.write(b'{"step": 9, "da')

    resumed = backend.run(_spec(harness, out, steps=6, seed=3, resume=True))
    assert resumed.outcome is Outcome.OK and resumed.steps_done == 6
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == list(range(7))  # no duplicates, no gaps
    ref = {r.step: r.data for r in read_metrics(tmp_path / "ref" / "metrics.jsonl")}
    for row in lines:
        for key, value in row["data"].items():
            if not key.startswith(("timing_s/", "perf/")):  # wall-clock figures
                assert value == pytest.approx(ref[row["step"]][key], rel=1e-5, abs=1e-6), (row["step"], key)
    assert "resumed from" in (out / "train.log").read_text()


def test_cli_train_prints_summary_and_fails_loudly_on_a_bad_harness(harness: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agent.cli import app

    runner = CliRunner()
    out = tmp_path / "cli"
    result = runner.invoke(app, ["train", "--harness", str(harness), "--steps", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "strict accuracy (val)" in result.output and "steps" in result.output
    assert [r.step for r in read_metrics(out / "metrics.jsonl")] == [0, 1, 2]
    (harness / "evotrainer.yaml").write_text("name: x\n")
    bad = runner.invoke(app, ["train", "--harness", str(harness), "--steps", "2", "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "evotrainer.yaml" in bad.output


# Every stateful trainer setting: the KL term's reference policy (kl_coef > 0), the sampling
# temperature and clip range, a learning rate the candidate sets; the harness's stateful StdGroupFilter and
# data weights are on in every case (the oracle harness's own).
SETTINGS = {
    "defaults": {},
    "kl": {"kl_coef": 0.1},
    "every-setting": {"kl_coef": 0.05, "temperature": 0.7, "clip_low": 0.1, "clip_high": 0.15, "lr": 3.0e-3},
}


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_exact_continuation_in_segments_trains_like_one_run(harness: Path, tmp_path: Path, setting: str) -> None:
    """A control pilot (init_state="exact") continues its parent bit for bit: 2 + 2 + 2 steps == 6 steps.

    With `kl_coef > 0` that needs the lineage's reference policy carried in the checkpoint: a pilot that
    rebuilt it from its own starting checkpoint would anchor its KL term to the wrong policy.
    """
    import torch

    extra = "".join(f"{k}: {v}\n" for k, v in SETTINGS[setting].items())
    settings = harness / "harness" / "trainer.yaml"
    settings.write_text(settings.read_text() + extra)
    (harness / "harness" / "reward.py").write_text(  # dense: every group has variance, every step updates
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': solution_str.count('1') / max(1, len(solution_str))}\n"
    )
    backend = BACKENDS["local"]
    whole = backend.run(_spec(harness, tmp_path / "whole", steps=6, seed=3))
    assert whole.outcome is Outcome.OK
    parent = tmp_path / "seg0"
    assert backend.run(_spec(harness, parent, steps=2, seed=3)).outcome is Outcome.OK
    for i in (1, 2):  # the segment's own seed only drives validation sampling
        seg = tmp_path / f"seg{i}"
        init = parent / "checkpoints" / "last.pt"
        result = backend.run(_spec(harness, seg, steps=2, seed=50 + i, init_checkpoint=init, init_state="exact"))
        assert result.outcome is Outcome.OK
        assert "optimizer and random streams carried; filter state carried" in (seg / "train.log").read_text()
        parent = seg

    def checkpoint(run: Path) -> dict[str, dict[str, torch.Tensor]]:
        return torch.load(run / "checkpoints" / "last.pt", weights_only=True)  # type: ignore[no-any-return]

    def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    ref, seg = checkpoint(tmp_path / "whole"), checkpoint(parent)
    assert not same(ref["model"], checkpoint(tmp_path / "seg0")["model"])  # training moved the weights
    assert same(ref["model"], seg["model"])
    assert same(ref["reference"], seg["reference"])  # the lineage's reference: the warm start, in every segment
    ref_rows = {r.step: r.data for r in read_metrics(tmp_path / "whole" / "metrics.jsonl")}
    seg_rows = {r.step + 4: r.data for r in read_metrics(parent / "metrics.jsonl") if r.step > 0}
    for step, data in seg_rows.items():
        for key in ("critic/score/mean", "actor/pg_loss", "actor/kl_loss", "actor/ref_param_distance"):
            assert data[key] == ref_rows[step][key], (step, key)
    if SETTINGS[setting].get("kl_coef", 0) > 0:
        assert all(seg_rows[step]["actor/kl_loss"] > 0 for step in seg_rows)  # the KL term is live

    # weights only (fresh AdamW, streams from the seed) is a different run, so the check above can fail; a
    # fresh-seed replicate ("optimizer") keeps the lineage's reference, a new lineage ("weights") starts its own
    init = tmp_path / "seg0" / "checkpoints" / "last.pt"
    for mode in ("weights", "optimizer"):
        out = tmp_path / f"fresh-{mode}"
        assert backend.run(_spec(harness, out, steps=2, seed=3, init_checkpoint=init, init_state=mode)).outcome is (
            Outcome.OK
        )
        other = checkpoint(out)
        assert not same(checkpoint(tmp_path / "seg1")["model"], other["model"]), mode
        anchor = ref["reference"] if mode == "optimizer" else checkpoint(tmp_path / "seg0")["model"]
        assert same(other["reference"], anchor), mode


def test_a_run_whose_handle_was_never_written_is_adopted_not_launched_twice(harness: Path, tmp_path: Path) -> None:
    """A controller killed between launching a trainer and writing handle.json: the resumed one waits for it."""
    from agent.adapters.runs import HANDLE_FILE, ensure_run

    backend = BACKENDS["local"]
    spec = _spec(harness, tmp_path / "run", steps=4, seed=2)
    orphan = backend.submit(spec)  # launched, but no handle.json was recorded
    assert not (spec.out_dir / HANDLE_FILE).exists()
    again = backend.submit(spec)
    assert again.pid == orphan.pid and backend.poll(again) is RunStatus.RUNNING  # adopted, nothing launched
    result = ensure_run(spec, "local")
    assert result.outcome is Outcome.OK and result.steps_done == 4
    log = (spec.out_dir / "train.log").read_text()
    assert log.count("step 0 |") == 1, log
    assert backend.poll(again) is RunStatus.FINISHED
    from trainer_backend.local import _lock_held

    deadline = time.time() + 60
    while _lock_held(spec.out_dir) and time.time() < deadline:  # the summary is written just before it exits
        time.sleep(0.05)
    relaunched = backend.submit(spec.model_copy(update={"resume": True}))  # the lock is free once it exited
    assert relaunched.pid != orphan.pid
    backend.wait(relaunched, timeout_s=300)
