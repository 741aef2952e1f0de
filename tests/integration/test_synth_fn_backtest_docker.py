"""`evotrainer backtest` runs its reward in the Docker sandbox on cached
programs that include hostile ones, and the verdict follows the strict evaluator.

The cached run is built from the example's own training problems: per problem the canonical program, an
equivalent rewrite, the hard-coded shown examples, the family's structural slip and four hostile programs
(huge loops, huge powers, `__import__`, strings, deep nesting). Its rewards are the fixed reward's, so the
fixed form is the incumbent. Through the real CLI and the real sandbox image:

- the fixed form (`examples/synth-fn-oracle`) passes, outcome ok: hostile programs are scored failures,
  never a crashed or hung sandbox call;
- the defective form (`examples/synth-fn`) is refused: its reward fails correct programs (format gate,
  step limit), so it disagrees with the strict evaluator more than the incumbent does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from diagnostics.schema import Rollout, write_rollouts
from sandboxes.image import ensure_image

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HOSTILE = (
    "sum(range(10**18))",
    "9**9**9**9",
    "__import__('os').system('touch /tmp/escaped')",
    "'a'*10**9",
    "(" * 60 + "x" + ")" * 60,
    "+".join(["sum(range(x*x*x))"] * 20),
    "open('/eval/strict.py').read()",
    "x//0",
)
PER_FAMILY = 4


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sandbox_image(docker_client: Any) -> str:
    """Build the sandbox image once (instant when it exists)."""
    return ensure_image(docker_client)


def _programs(gen: ModuleType, fn: tuple[str, int, int, int], k: int) -> list[str]:
    family, a, b, m = fn
    right = gen.program(fn)
    rewrite = {"affine": f"{b}+x*{a}", "mod": f"{b}+{a}*(x%{m})", "loop": f"x*(x+1)//2*{a}+{b}"}[family]
    lookup = "[" + ",".join(str(gen.value(fn, x)) for x in gen.SHOWN_INPUTS) + "][x]"
    slip = {"affine": f"{a + 1}*x+{b}", "mod": f"x%{m + 1}*{a}+{b}", "loop": f"sum(range(x))*{a}+{b}"}[family]
    hostile = [HOSTILE[(4 * k + i) % len(HOSTILE)] for i in range(4)]
    return [right, rewrite, lookup, slip, *hostile]


def make_synth_run(run: Path) -> int:
    """Write a cached train run of the example's problems scored by the fixed reward; return its size."""
    gen = _load(EXAMPLES / "make_synth_data.py", "make_synth_data_for_backtest")
    reward = _load(EXAMPLES / "synth-fn-oracle" / "harness" / "reward.py", "synth_fn_reward_for_backtest")
    strict = _load(EXAMPLES / "synth-fn-oracle" / "eval" / "strict.py", "synth_fn_strict_for_backtest")
    train_fns, _ = gen.split_functions(seed=1001)
    by_prompt = {gen.prompt_text(fn): fn for family in gen.FAMILIES for fn in train_fns[family]}
    rows = [json.loads(line) for line in (EXAMPLES / "synth-fn-oracle" / "data" / "train.jsonl").open()]
    picked = [
        r for family in gen.FAMILIES for r in [r for r in rows if r["data_source"] == f"synth/{family}"][:PER_FAMILY]
    ]
    rollouts = []
    for k, row in enumerate(picked):
        for i, text in enumerate(_programs(gen, by_prompt[row["prompt"]], k)):
            out = reward.compute_score(row["data_source"], text, row["ground_truth"], {})
            rollouts.append(
                Rollout(
                    "v0", 0, "train", row["prompt_id"], f"g{k}", i, row["prompt"], text, row["ground_truth"],
                    out["score"], reward_components={"parsed": out["parsed"], "timeouts": out["timeouts"]},
                    strict_score=strict.score(text, row["ground_truth"]), response_tokens=min(len(text), 40),
                    data_source=row["data_source"],
                )
            )  # fmt: skip
    write_rollouts(run / "rollouts" / "train" / "step_0.jsonl", rollouts)
    (run / "config.json").write_text(json.dumps({"trainer": {"max_new_tokens": 40}}))
    return len(rollouts)


def backtest(harness: Path, run: Path, out: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "backtest", "--harness", str(harness), "--rollouts", str(run),
         "--out", str(out), "--sandbox", "docker"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    report = out / "report.json"
    assert report.is_file(), proc.stdout + proc.stderr
    return proc, json.loads(report.read_text())


def test_fixed_form_passes_with_hostile_programs_in_the_docker_sandbox(sandbox_image: str, tmp_path: Path) -> None:
    n = make_synth_run(tmp_path / "run")
    proc, report = backtest(EXAMPLES / "synth-fn-oracle", tmp_path / "run", tmp_path / "bt-fixed")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["outcome"] == "ok" and report["verdict"] == "pass", report["reasons"]
    metrics = report["metrics"]
    assert metrics["n_rollouts"] == n and metrics["strict_wrong_paid_after"] == 0
    assert any("sandbox: docker" in r for r in report["reasons"])
    assert not Path("/tmp/escaped").exists()


def test_defective_form_is_refused_for_disagreeing_with_the_strict_evaluator(
    sandbox_image: str, tmp_path: Path
) -> None:
    make_synth_run(tmp_path / "run")
    proc, report = backtest(EXAMPLES / "synth-fn", tmp_path / "run", tmp_path / "bt-defective")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert report["outcome"] == "ok" and report["verdict"] == "fail"
    assert any("disagrees with the strict evaluator" in r for r in report["reasons"]), report["reasons"]
    metrics = report["metrics"]
    # the format gate and the step limit fail correct loop and mod programs (the gate also stops the lookups)
    assert metrics["strict_right_failed_after"] > metrics["strict_right_failed_before"] == 0
