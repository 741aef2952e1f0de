"""A real session (git repo copy of examples/arithmetic, migrated SQLite store) with a fabricated v0 run.

Used by the tests that drive the LLM tools and the propose node without training: the v0 run
folder holds cached rollouts of the defective demo harness (number spam rewarded by the lenient reward,
strict score 0) and a health report built from them by the real diagnostics.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TINY_TRAINER = """lr: 1.0e-3
group_size: 4
prompts_per_step: 4
max_new_tokens: 16
val_every: 2
save_every: 2
n_layers: 1
hidden: 32
warmstart_steps: 20
warmstart_data: data/warmstart.jsonl
data_selection: harness/data.yaml
"""


def copy_demo(dest: Path, tiny: bool = True) -> Path:
    """Copy the demo harness; with `tiny`, a trainer config small enough for CPU tests."""
    shutil.copytree(EXAMPLES / "arithmetic", dest, ignore=shutil.ignore_patterns("__pycache__"))
    if tiny:
        (dest / "harness" / "trainer.yaml").write_text(TINY_TRAINER)
    return dest


def _responses(answer: str, rng: random.Random) -> list[tuple[str, float]]:
    """Responses of one group and their strict scores: spam (rewarded, strict 0), wrong, exact."""
    spam = f"{answer} {rng.randint(1, 9)} {rng.randint(10, 99)} {rng.randint(1, 9)} 7"
    return [(spam, 0.0), (spam + " 3", 0.0), (f"{int(answer) + 1}", 0.0), (f"<ans>{answer}</ans>", 1.0)]


def fabricate_run(run_dir: Path, run_id: str, harness_dir: Path, steps: int = 3) -> None:
    """Write cached train/val rollouts and metrics of a defective run (lenient reward, spam rewarded)."""
    import orjson

    from diagnostics.schema import Rollout, append_metrics, write_rollouts

    rng = random.Random(0)
    prompts = [orjson.loads(line) for line in (harness_dir / "data" / "train.jsonl").read_text().splitlines()[:6]]
    for step in range(1, steps + 1):
        for split in ("train", "val"):
            rows = []
            for p in prompts[:4] if split == "train" else prompts[4:6]:
                for i, (text, strict) in enumerate(_responses(p["ground_truth"], rng)):
                    nums = len(text.replace("<ans>", " ").replace("</ans>", " ").split())
                    hit = p["ground_truth"] in text
                    reward = 1.0 if hit else min(0.5, 0.1 * nums)
                    rows.append(
                        Rollout(
                            run_id=run_id,
                            step=step,
                            split=split,
                            prompt_id=p["prompt_id"],
                            group_id=f"{step}-{p['prompt_id']}",
                            sample_index=i,
                            prompt=p["prompt"],
                            response=text,
                            ground_truth=p["ground_truth"],
                            reward=reward,
                            reward_components={"hit": float(hit), "numbers": float(nums)},
                            strict_score=strict,
                            response_tokens=len(text),
                            data_source=p["data_source"],
                        )
                    )
            write_rollouts(run_dir / "rollouts" / split / f"step_{step}.jsonl", rows)
        append_metrics(
            run_dir / "metrics.jsonl",
            step,
            {"critic/score/mean": 0.5 + 0.1 * step, "val/strict_acc": 0.3 - 0.05 * step, "response_length/mean": 12.0},
        )
    (run_dir / "config.json").write_text('{"max_new_tokens": 16}')


def fake_session(tmp_path: Path, **context: Any) -> tuple[Any, dict[str, Any]]:
    """Start a real session on a copy of the demo harness with a fabricated v0; return (Context, State)."""
    from agent.adapters import ledger
    from agent.adapters.ledger import store_url
    from agent.context import Context
    from agent.nodes.common import session_main_commit
    from agent.session import start_session
    from diagnostics.report import build_report

    settings: dict[str, Any] = {"workdir": str(tmp_path), "policy": "llm", "llm_model": "mock-model",
                                "sandbox": "process", "max_candidates": 2}  # fmt: skip
    ctx = Context(**{**settings, **context})
    session_id, root = start_session(ctx, copy_demo(tmp_path / "src"), tmp_path / "repo")
    run_id = f"{session_id}-v0"
    run_dir = ctx.session_dir(session_id) / "runs" / run_id
    fabricate_run(run_dir, run_id, root)
    report = build_report(run_dir)
    branch, commit = session_main_commit(root, session_id)
    with ledger.db(store_url(ctx)) as db:
        ledger.ensure_run(db, run_id=run_id, session_id=session_id, backend="local", kind="full", steps=3,
                          artefact_dir=str(run_dir), seed=0)  # fmt: skip
        ledger.ensure_version(db, session_id=session_id, run_id=run_id, branch=branch, commit_sha=commit,
                              rationale="v0")  # fmt: skip
    version = {"index": 0, "branch": branch, "commit": commit, "run_id": run_id, "run_dir": str(run_dir),
               "checkpoint": "", "strict_acc": 0.25, "train_reward": 0.8, "steps": 3}  # fmt: skip
    state = {"session_id": session_id, "harness_dir": str(root), "iteration": 1, "version": version,
             "report": report.to_json(), "candidates": [], "failures_in_row": 0, "steps_used": 3}  # fmt: skip
    return ctx, state
