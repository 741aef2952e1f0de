"""Evolvable diagnostics: harness analyzers run in the sandbox and a new metric is trusted only
when it separates kept from rejected versions, replayed over earlier runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from agent.adapters.analyzers import run_harness_analyzers
from diagnostics.schema import Rollout, write_rollouts

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ANALYZER = """
import json, os
inputs = os.environ["EVOTRAINER_INPUTS_DIR"]
rows = [json.loads(l) for l in open(os.path.join(inputs, "train.jsonl"))]
spam = sum(r["response"].count("<ans>") > 1 for r in rows) / len(rows)
print("metrics: {'spam_rate': 0.0}")  # a forged line: only out.json counts
json.dump({"metrics": {"spam_rate": spam}}, open(os.path.join(os.environ["EVOTRAINER_RESULTS_DIR"], "out.json"), "w"))
"""


def _run(path: Path, spam: int) -> Path:
    rows = [Rollout("r", 1, "train", f"p{i}", f"g{i}", 0, "1+1=>", "<ans>2</ans>" * (2 if i < spam else 1), "2", 1.0)
            for i in range(10)]  # fmt: skip
    write_rollouts(path / "rollouts" / "train" / "step_1.jsonl", rows)
    return path


def test_analyzer_metric_is_used_only_when_it_separates_kept_from_rejected(tmp_path: Path) -> None:
    harness = tmp_path / "h"
    shutil.copytree(EXAMPLES / "arithmetic-oracle", harness)
    manifest = yaml.safe_load((harness / "evotrainer.yaml").read_text())
    manifest["diagnostics"] = "harness/diagnostics/"
    (harness / "evotrainer.yaml").write_text(yaml.safe_dump(manifest))
    (harness / "harness" / "diagnostics").mkdir()
    (harness / "harness" / "diagnostics" / "spam.py").write_text(ANALYZER)
    current = _run(tmp_path / "now", spam=3)
    kept = {str(_run(tmp_path / f"k{i}", spam=i)): "kept" for i in (0, 1)}
    rejected = {str(_run(tmp_path / f"r{i}", spam=i)): "rejected" for i in (6, 8)}
    metrics, validations = run_harness_analyzers(harness, current, {**kept, **rejected}, "process")
    assert metrics == {"spam_rate": 0.3}
    assert validations["spam_rate"]["separates"] and validations["spam_rate"]["direction"] == "lower_is_better"
    mixed = {str(tmp_path / "k0"): "kept", str(tmp_path / "r8"): "kept", str(tmp_path / "k1"): "rejected"}
    metrics, validations = run_harness_analyzers(harness, current, mixed, "process")
    assert metrics == {} and not validations["spam_rate"]["separates"]
    assert json.loads(json.dumps(validations))  # stored as JSON with the metric
