"""Run the harness's own analyzers (evolvable diagnostics) in the sandbox and validate their metrics.

Adapter: the contract and the validation rule are pure (`diagnostics/analyzers.py`); this module finds
the analyzer scripts, runs each in the sandbox over a run's latest rollout files, and replays it over the
session's earlier runs labelled kept/rejected, so a new metric is trusted only when it separates them.
`run_builtin_analyzers` does the same for the built-in analyzers (trusted code, in process, over the runs'
latest training rollout files) and replays the check on the health reports' explanatory metrics.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from diagnostics.analyzers import (
    EXPLANATORY_METRICS,
    AnalyzerOutputError,
    builtin_metrics,
    parse_analyzer_output,
    validate_metric_retrospectively,
)
from diagnostics.schema import ReadResult, read_rollout_file, rollout_files
from harness.answers import AnswerProtocol
from harness.manifest import load_harness
from sandboxes.modes import SandboxMode

ANALYZER_TIMEOUT_S = 60.0
BUILTIN_SOURCE = "builtin:diagnostics/analyzers.py"  # the source recorded for built-in and report metrics
BUILTIN_STEP_FILES = 10  # latest training step files a built-in analyzer reads per run


def analyzer_scripts(harness_dir: Path) -> list[Path]:
    """The analyzer scripts of a harness (its manifest's diagnostics folder), sorted."""
    harness = load_harness(harness_dir)
    if harness.manifest.diagnostics is None:
        return []
    return sorted(harness.path(harness.manifest.diagnostics).glob("*.py"))


def run_analyzer(script: Path, run_dir: Path, mode: SandboxMode) -> dict[str, float]:
    """Run one analyzer over a run's latest training rollouts and held-out scores; raise `AnalyzerOutputError`.

    The inputs are those of the model's own analyses (`agent.adapters.held_out.analysis_inputs`): the analyzer is
    model-written code whose metrics reach later health reports, so it never sees held-out text or answers.
    """
    from agent.adapters.held_out import analysis_inputs
    from sandboxes.worker import run_script

    with tempfile.TemporaryDirectory(prefix="evotrainer-analyzer-") as tmp:
        inputs = analysis_inputs(run_dir, Path(tmp), all_steps=False)
        result = run_script(script, inputs, ANALYZER_TIMEOUT_S, mode="process" if mode == "none" else mode)
    if result.outcome.value != "ok" or "out.json" not in result.files:
        raise AnalyzerOutputError(f"{script.name} ended {result.outcome.value}: {result.stderr_tail[-300:]}")
    return parse_analyzer_output(json.loads(result.files["out.json"]))


def run_harness_analyzers(
    harness_dir: Path, run_dir: Path, labelled_runs: dict[str, str], mode: SandboxMode
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


def _validation(
    source: str, current: float, past: Mapping[str, float], labelled_runs: dict[str, str]
) -> dict[str, Any]:
    kept = {d for d, label in labelled_runs.items() if label == "kept"}
    rejected = {d for d, label in labelled_runs.items() if label == "rejected"}
    check = validate_metric_retrospectively(past, kept, rejected)
    return {
        "source": source,
        "value": current,
        "separates": check.separates,
        "margin": check.margin,
        "n_kept": check.n_kept,
        "n_rejected": check.n_rejected,
        "direction": check.direction,
    }


def _latest_train_rollouts(run_dir: Path) -> ReadResult:
    result = ReadResult()
    for path in rollout_files(run_dir, "train")[-BUILTIN_STEP_FILES:]:
        read_rollout_file(path, result)
    return result


def run_builtin_analyzers(
    run_dir: Path,
    labelled_runs: dict[str, str],
    answer: AnswerProtocol | None,
    report_metrics: Mapping[str, float | None],
    past_report: Callable[[Path], Mapping[str, float | None]],
) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """The built-in analyzers on `run_dir`, and the explanatory report metrics, validated on `labelled_runs`.

    `report_metrics` is `run_dir`'s health report metrics; `past_report(run_dir)` returns a labelled run's.
    Returns (the built-in metrics that separate kept from rejected versions, {metric: validation record});
    an explanatory report metric is in the report already, so only its validation comes back, as
    `report/<metric>`.
    """
    current = builtin_metrics(_latest_train_rollouts(run_dir).rollouts, answer)
    past = {d: builtin_metrics(_latest_train_rollouts(Path(d)).rollouts, answer) for d in labelled_runs}
    metrics: dict[str, float] = {}
    validations: dict[str, dict[str, Any]] = {}
    for name, value in current.items():
        values = {d: v[name] for d, v in past.items() if name in v}
        validations[name] = _validation(f"{BUILTIN_SOURCE}:{name}", value, values, labelled_runs)
        if validations[name]["separates"]:
            metrics[name] = value
    reports = {d: past_report(Path(d)) for d in labelled_runs}
    for name in EXPLANATORY_METRICS:
        now = report_metrics.get(name)
        if now is None or not math.isfinite(now):
            continue
        before = {d: float(x) for d, m in reports.items() if (x := m.get(name)) is not None}
        validations[f"report/{name}"] = _validation(f"{BUILTIN_SOURCE}:report", float(now), before, labelled_runs)
    return metrics, validations
