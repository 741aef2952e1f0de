"""A policy that starts out never writing the answer format gets a warm start.

The evidence is the run's own: `answer_written_rate_first_steps` (the share of the first training responses
that ended on their own and hold an answer the declared protocol reads) below 0.01 is the
`format_never_written` symptom; the one
move that addresses it (`teach_format`) is the local trainer's `warmstart_steps`, raised from 0 to its
`from_zero` value. A warm start happens only where a run starts from the model as it ships, so a candidate that
changes a warm-start setting (`BackendPlugin.start_settings`) has its pilot restart from there instead of
continuing the incumbent; without the symptom the move is never offered, not even as a last resort.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from agent.adapters.pilots import plan_pilot
from agent.context import Context
from agent.decisions.knobs import harness_knobs, start_changes
from agent.nodes.propose import probe_metrics
from agent.policies.explore import propose_probes
from harness.manifest import Harness, load_harness
from skills.patches import apply_skill

ROOT = Path(__file__).resolve().parents[2]
# v0 of the instruct model as shipped (the smoke run of `examples/arithmetic-smollm2` with warmstart_steps 0,
# measured on CPU): no response in the answer format, every group flat, nothing updated, held-out strict 0.
SHIPPED = {
    "strict_acc_delta": 0.0,
    "answer_written_rate": 0.0,
    "answer_written_rate_first_steps": 0.0,
    "format_failure_rate": 1.0,
    "dead_group_ratio": 1.0,
    "reward_spread": 0.0,
    "no_update_share": 1.0,
    "truncation_rate": 0.69,
}


def _no_warm_start(tmp_path: Path) -> Harness:
    work = tmp_path / "smollm2"
    shutil.copytree(ROOT / "examples" / "arithmetic-smollm2", work)
    settings = work / "harness" / "trainer.yaml"
    raw = yaml.safe_load(settings.read_text())
    settings.write_text(yaml.safe_dump({**raw, "warmstart_steps": 0}))
    return load_harness(work)


def _settings(harness: Harness) -> dict[str, object]:
    return dict(yaml.safe_load((harness.root / "harness" / "trainer.yaml").read_text()))


def test_a_policy_that_never_writes_the_format_is_warm_started_by_a_restarting_pilot(tmp_path: Path) -> None:
    harness = _no_warm_start(tmp_path)
    knobs = harness_knobs(harness, "local")
    [warm] = [k for k in knobs.trainer if k.spec.key == "warmstart_steps"]
    assert warm.current == 0 and warm.restarts
    props = propose_probes(knobs, probe_metrics(SHIPPED, harness, knobs), tried=(), blocked={}, max_candidates=2)
    first = props[0]
    assert first.probe is not None and first.probe.probe_id == "trainer:warmstart_steps:up:m0"
    assert "format_never_written" in first.probe.symptom_key and "restarts" in first.hypothesis
    parent = load_harness(harness.root)
    candidate = tmp_path / "candidate"
    shutil.copytree(harness.root, candidate)
    apply_skill(first.skill, candidate, load_harness(candidate))
    assert _settings(load_harness(candidate))["warmstart_steps"] == 200  # from_zero: 0 x 2 is still 0
    assert start_changes(parent, load_harness(candidate), "local") == ("warmstart_steps",)
    assert start_changes(parent, load_harness(harness.root), "local") == ()
    rows = harness.root / "data" / "warmstart.jsonl"  # the file a warm-start setting names counts as the setting
    edited = tmp_path / "edited"
    shutil.copytree(harness.root, edited)
    (edited / "data" / "warmstart.jsonl").write_text(rows.read_text().splitlines()[0] + "\n")
    assert start_changes(parent, load_harness(edited), "local") == ("warmstart_data",)


def test_without_the_symptom_no_warm_start_move_is_offered_even_as_a_last_resort(tmp_path: Path) -> None:
    harness = _no_warm_start(tmp_path)
    knobs = harness_knobs(harness, "local")
    writes = {**SHIPPED, "answer_written_rate_first_steps": 0.4, "answer_written_rate": 0.4}
    for metrics in (writes, {"strict_acc_delta": 0.0}):  # other symptoms; none at all (unsupported probes)
        props = propose_probes(knobs, probe_metrics(metrics, harness, knobs), tried=(), blocked={}, max_candidates=20)
        assert props and not [p for p in props if p.probe and "warmstart" in p.probe.probe_id]


def test_a_restarting_candidate_pilots_from_the_starting_model_and_the_control_continues(tmp_path: Path) -> None:
    ctx = Context(workdir=str(tmp_path), db_url=f"sqlite:///{tmp_path / 's.db'}")
    version = {"checkpoint": "/runs/v1/final.pt", "steps": 80}
    payload = {"version": version, "iteration": 2, "session_id": "s0", "harness_dir": "/h"}
    candidate = {"id": "s0-v2.1-warm", "worktree": "/w"}
    moved = plan_pilot(ctx, {**payload, "candidate": candidate})
    assert (moved.init_checkpoint, moved.start_steps) == ("/runs/v1/final.pt", 80)
    restarted = plan_pilot(ctx, {**payload, "candidate": {**candidate, "restarts": ["warmstart_steps"]}})
    assert (restarted.init_checkpoint, restarted.start_steps) == ("", 0)
    rollback = {"checkpoint": "/runs/v0/start.pt", "steps": 0}
    both = plan_pilot(ctx, {**payload, "rollback": rollback, "candidate": {**candidate, "restarts": ["warmstart_lr"]}})
    assert both.init_checkpoint == ""  # the warm start acts before any checkpoint, a rollback's too
    control = plan_pilot(ctx, payload)
    assert (control.init_checkpoint, control.start_steps) == ("/runs/v1/final.pt", 80)
