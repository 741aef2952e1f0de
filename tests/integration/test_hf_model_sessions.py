"""Whole `evotrainer run` sessions on a real Hugging Face model folder, single-turn and agentic.

The folders are random-init Qwen2 models with a BPE tokenizer trained on each example's data
(`tests/hf_models.py`), saved with ``save_pretrained`` and named by ``model:`` as a user names theirs; the
prompts go through the chat template. A short session proposes, backtests (process sandbox), pilots,
decides and records on them, through the real CLI (subprocesses, real torch, git, SQLite). The asserts
are on what the session did, not on scores: random-init weights learn little in a few steps.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hf_models import harness_texts, make_model_folder

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SESSION = ("--sandbox", "process", "--iterations", "1", "--base-steps", "3", "--pilot-steps", "3",
           "--candidates", "1", "--replicates", "0", "--escalate-after", "0")  # fmt: skip


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EVOTRAINER_CACHE": str(cwd / "cache"), "COLUMNS": "200"}
    env.pop("EVOTRAINER_DB", None)
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=1200
    )


def on_hf_model(example: str, tmp_path: Path, **settings: object) -> Path:
    """A copy of `example` training a fresh Hugging Face folder made for its data (chat format, small budget)."""
    harness = tmp_path / example
    shutil.copytree(ROOT / "examples" / example, harness)
    manifest = yaml.safe_load((harness / "evotrainer.yaml").read_text())
    manifest.pop("special_tokens", None)  # a pretrained tokenizer writes the answer tags as text
    manifest.pop("alphabet", None)
    (harness / "evotrainer.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    env = manifest.get("env")
    extra = (env["call_end"],) if env else ()  # a turn stops on the call's end: one token of the tokenizer
    folder = make_model_folder(tmp_path / "model", harness_texts(harness), extra_special=extra)
    val = (harness / "data" / "val.jsonl").read_text().splitlines()
    (harness / "data" / "val.jsonl").write_text("\n".join(val[::10]) + "\n")
    trainer = yaml.safe_load((harness / "harness" / "trainer.yaml").read_text())
    for key in ("n_layers", "hidden"):
        trainer.pop(key, None)
    trainer.update(
        model=str(folder), prompt_format="chat", lr=1.0e-4, group_size=4, prompts_per_step=4, val_every=3,
        save_every=3, warmstart_steps=10, warmstart_batch_size=8, warmstart_lr=1.0e-3, **settings,
    )  # fmt: skip
    (harness / "harness" / "trainer.yaml").write_text(yaml.safe_dump(trainer))
    return harness


def _session(harness: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    repo = tmp_path / "repo"
    run = cli("run", "--harness", str(harness), "--repo", str(repo), *SESSION, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    status = cli("status", cwd=tmp_path)
    assert status.returncode == 0 and "finished" in status.stdout, status.stdout + status.stderr
    branches = subprocess.run(
        ["git", "-C", str(repo), "branch", "--list", "evo/*", "--format=%(refname:short)"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return repo, branches


def _runs(tmp_path: Path) -> list[Path]:
    return sorted(p.parent for p in (tmp_path / ".evotrainer").glob("sessions/*/runs/*/config.json"))


def test_a_session_on_a_hugging_face_model_proposes_backtests_pilots_and_decides(
    tmp_path: Path, git_available: None
) -> None:
    harness = on_hf_model("arithmetic", tmp_path, max_new_tokens=16)
    _, branches = _session(harness, tmp_path)
    assert branches, "no candidate was proposed"
    runs = _runs(tmp_path)
    assert len(runs) >= 2  # v0 and at least the candidate's pilot or the control
    for run in runs:
        config = json.loads((run / "config.json").read_text())
        policy = config["policy"]
        assert policy["model"] == str(tmp_path / "model") and policy["stop_tokens"] == ["<|im_end|>"]
        assert json.loads((run / "summary.json").read_text())["outcome"] in ("ok", "candidate_error")
    pilots = [r for r in runs if json.loads((r / "config.json").read_text())["spec"]["init_checkpoint"]]
    assert pilots and all(json.loads((r / "summary.json").read_text())["outcome"] == "ok" for r in pilots)


def test_an_agentic_session_on_a_hugging_face_model_runs_episodes(tmp_path: Path, git_available: None) -> None:
    harness = on_hf_model("lookup-agent", tmp_path, max_turns=3, max_turn_tokens=16)
    _session(harness, tmp_path)
    runs = _runs(tmp_path)
    assert runs
    rollouts = [json.loads(x) for x in (runs[0] / "rollouts" / "train" / "step_1.jsonl").read_text().splitlines()]
    assert all(r["turns"] for r in rollouts) and {r["stop_reason"] for r in rollouts} <= {
        "answer", "abandon", "length", "max_turns", "tool_error", "echo_trap",
    }  # fmt: skip
    metrics = [json.loads(x) for x in (runs[0] / "metrics.jsonl").read_text().splitlines()]
    assert any("num_turns/mean" in m["data"] for m in metrics)
