"""Run the harness's own analyzers (evolvable diagnostics) in the sandbox and validate their metrics.

Adapter: the contract and the validation rule are pure (`diagnostics/analyzers.py`); this module finds
the analyzer scripts, runs each in the sandbox over a run's latest rollout files, and replays it over the
session's earlier runs labelled kept/rejected, so a new metric is trusted only when it separates them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from diagnostics.analyzers import AnalyzerOutputError, parse_analyzer_output, validate_metric_retrospectively
from diagnostics.schema import rollout_files
from harness.manifest import load_harness

ANALYZER_TIMEOUT_S = 60.0


def analyzer_scripts(harness_dir: Path) -> list[Path]:
    """The analyzer scripts of a harness (its manifest's diagnostics folder), sorted."""
    harness = load_harness(harness_dir)
    if harness.manifest.diagnostics is None:
        return []
    return sorted(harness.path(harness.manifest.diagnostics).glob("*.py"))


def run_analyzer(script: Path, run_dir: Path, mode: Literal["docker", "process", "none"]) -> dict[str, float]:
    """Run one analyzer over a run's latest train/val rollout files; raise `AnalyzerOutputError` on failure."""
    from sandboxes.worker import run_script

    inputs = {f"{split}.jsonl": files[-1] for split in ("train", "val") if (files := rollout_files(run_dir, split))}
    result = run_script(script, inputs, ANALYZER_TIMEOUT_S, mode="process" if mode == "none" else mode)
    if result.outcome.value != "ok" or "out.json" not in result.files:
        raise AnalyzerOutputError(f"{script.name} ended {result.outcome.value}: {result.stderr_tail[-300:]}")
    return parse_analyzer_output(json.loads(result.files["out.json"]))


def run_harness_analyzers(
    harness_dir: Path, run_dir: Path, labelled_runs: dict[str, str], mode: Literal["docker", "process", "none"]
) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """Run every analyzer on `run_dir` and validate each metric on `labelled_runs` ({run_dir: kept|rejected}).

    Returns:
        (metrics of validated analyzers only, {metric: validation record incl. `source` and `separates`}).
    """
    metrics: dict[str, float] = {}
    validations: dict[str, dict[str, Any]] = {}
    for script in analyzer_scripts(harness_dir):
        try:
            current = run_analyzer(script, run_dir, mode)
            past = {d: run_analyzer(script, Path(d), mode) for d in labelled_runs}
        except AnalyzerOutputError as exc:
            validations[script.stem] = {"source": str(script), "separates": False, "error": str(exc)}
            continue
        kept = {d for d, label in labelled_runs.items() if label == "kept"}
        rejected = {d for d, label in labelled_runs.items() if label == "rejected"}
        for name, value in current.items():
            check = validate_metric_retrospectively({d: v[name] for d, v in past.items() if name in v}, kept, rejected)
            validations[name] = {
                "source": str(script),
                "separates": check.separates,
                "margin": check.margin,
                "n_kept": check.n_kept,
                "n_rejected": check.n_rejected,
                "direction": check.direction,
            }
            if check.separates:
                metrics[name] = value
    return metrics, validations
