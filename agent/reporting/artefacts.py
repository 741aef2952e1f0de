"""Read what the report shows from a run's artefact folder: metric curves, sampled rollouts, health report.

Plain functions over one run folder returning frozen records; nothing here raises on a missing or corrupt
artefact: the record carries a `note` instead. Text from rollouts is model output (hostile by assumption):
it is cut to `MAX_TEXT_CHARS` here and escaped where it is rendered (`agent/reporting/html.py`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from agent.decisions.evidence import final_strict_scores, paired
from diagnostics.agentic import per_step
from diagnostics.behaviour import stop_shares_per_step
from diagnostics.findings import HealthReport
from diagnostics.model_card import ModelCard, read_card
from diagnostics.report import build_report
from diagnostics.schema import (
    HEALTH_REPORT_FILE,
    PEAK_RSS_GB,
    ROLLOUTS_DIR,
    STRICT_METRIC,
    SUMMARY_FILE,
    TRAIN_REWARD_METRIC,
    ReadProblem,
    ReadResult,
    Rollout,
    read_metrics,
    read_rollout_file,
    rollout_files,
)
from diagnostics.sources import heldout_by_source
from diagnostics.stats import PairedComparison, paired_bootstrap
from diagnostics.table import read_run_table
from diagnostics.tool_roles import DEFAULT_ROLES, ToolRoles
from trainer_backend.base import METRICS_FILE

# Metric name (verl's) -> label. Health curves: what the decision and the alerts are about.
CURVE_METRICS: dict[str, str] = {
    TRAIN_REWARD_METRIC: "training reward",
    STRICT_METRIC: "strict held-out accuracy",
    "rollout/dead_group_ratio": "dead-group ratio",
    "rollout/truncation_rate": "truncation rate",
    "response_length/mean": "response length (tokens)",
}
# Optimisation curves, the panels TensorBoard / W&B show for a verl run (the local trainer logs the same names).
OPTIM_METRICS: dict[str, str] = {
    "actor/kl_loss": "KL to the reference (kl_loss)",
    "actor/ppo_kl": "KL new vs old policy (ppo_kl)",
    "actor/entropy": "entropy",
    "actor/pg_loss": "policy-gradient loss",
    "actor/lr": "learning rate",
    "actor/grad_norm": "gradient norm",
    "actor/pg_clipfrac": "clip fraction",
}
# Curves read from the rollouts: an agentic run's episodes per training step (diagnostics.agentic,
# the run-level definitions), the strict held-out accuracy of each data source per validation step, and the
# share of each stop reason per training step (end of turn, token cap, turn cap, ...).
AGENTIC_PREFIX, SOURCE_PREFIX, STOP_PREFIX = "agentic/", "heldout_source/", "stop/"
AGENTIC_CURVES: dict[str, str] = {
    AGENTIC_PREFIX + "turns_mean": "turns per episode",
    AGENTIC_PREFIX + "tool_calls_mean": "tool calls per episode",
    AGENTIC_PREFIX + "tool_failure_rate": "tool failure rate (failed / calls)",
    AGENTIC_PREFIX + "abandon_rate": "abandonment rate",
}
REPORT_FILE = HEALTH_REPORT_FILE  # written next to a diagnosed run's artefacts
MAX_TEXT_CHARS = 400  # per prompt / response shown in the rollout viewer
VAL_SAMPLES = 6  # rollouts shown per run from its last validation step
TRAIN_SAMPLES = 3  # ... and from its last training step


@dataclass(frozen=True, slots=True)
class RunCurves:
    """One run's metric series (`{metric: [(step, value), ...]}`) and summary, or a note why it has none.

    Besides the logged metrics, `series` holds the curves read from its rollouts: `agentic/<metric>` for an
    agentic run, `heldout_source/<data source>` for held-out data from two or more sources, `stop/<reason>` when
    training responses stopped in two or more ways.
    """

    run_id: str
    label: str
    kind: str
    steps: int
    step_offset: int  # lineage steps before this run (its policy's starting point)
    outcome: str | None
    strict_acc: float | None
    train_reward: float | None
    wall_time_s: float | None
    artefact_dir: str
    peak_rss_gb: float | None = None  # summary.json's measured peak resident memory of the trainer
    series: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    note: str = ""
    replicate: int = 0


@dataclass(frozen=True, slots=True)
class RolloutSample:
    """One sampled response as the viewer shows it (texts already cut to `MAX_TEXT_CHARS`)."""

    split: str
    step: int
    prompt_id: str
    sample_index: int
    prompt: str
    response: str
    reward: float
    strict_score: float | None
    stop_reason: str
    truncated: bool
    response_tokens: int


@dataclass(frozen=True, slots=True)
class RunRollouts:
    """The sampled responses of one run (a version's or a pilot's), or a note why there are none."""

    run_id: str
    label: str
    samples: list[RolloutSample]
    note: str = ""


@dataclass(frozen=True, slots=True)
class RunHealth:
    """A run's health report as the report shows it; `source` says where it came from."""

    run_id: str
    report: HealthReport | None
    source: str  # "file" (health_report.json) | "computed" (built now from the artefacts) | "missing"
    note: str = ""


def read_curves(
    run_id: str,
    artefact_dir: str,
    label: str,
    *,
    step_offset: int = 0,
    replicate: int = 0,
    roles: ToolRoles = DEFAULT_ROLES,
    **summary: object,
) -> RunCurves:
    """Read a run's `metrics.jsonl` into series of `CURVE_METRICS` and `OPTIM_METRICS`, and its rollouts into the
    agentic and per-source curves (`roles`: the harness's tool roles); a missing file is a note.

    `summary` carries the run row's columns (kind, steps, outcome, strict_acc, train_reward, wall_time_s).
    """
    base = {"run_id": run_id, "label": label, "step_offset": step_offset, "artefact_dir": artefact_dir, **summary}
    base["peak_rss_gb"] = _peak_rss_gb(Path(artefact_dir))
    path = Path(artefact_dir) / METRICS_FILE
    if not path.is_file():
        why = "run folder missing" if not Path(artefact_dir).exists() else f"no {METRICS_FILE}"
        return RunCurves(**base, note=f"{why}: {path}", replicate=replicate)  # type: ignore[arg-type]
    problems: list[ReadProblem] = []
    rows = read_metrics(path, problems)
    series: dict[str, list[tuple[int, float]]] = {}
    for name in (*CURVE_METRICS, *OPTIM_METRICS):
        points = [(r.step, float(r.data[name])) for r in rows if name in r.data and math.isfinite(r.data[name])]
        if points:
            series[name] = points
    table = read_run_table(Path(artefact_dir))
    series.update({AGENTIC_PREFIX + k: v for k, v in per_step(table.train, roles).items()})
    series.update({SOURCE_PREFIX + k: v for k, v in heldout_by_source(table.val).items()})
    series.update({STOP_PREFIX + k: v for k, v in stop_shares_per_step(table.train).items()})
    note = f"{len(problems)} unreadable metric lines in {path}" if problems else ""
    if not rows:
        note = f"{path} holds no metric rows"
    return RunCurves(**base, series=series, note=note, replicate=replicate)  # type: ignore[arg-type]


def _peak_rss_gb(run_dir: Path) -> float | None:
    """The trainer's measured peak resident memory from summary.json (None: not measured or unreadable)."""
    try:
        value = json.loads((run_dir / SUMMARY_FILE).read_text()).get(PEAK_RSS_GB)
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + f"… [{len(text) - MAX_TEXT_CHARS} more]"


def _sample(r: Rollout) -> RolloutSample:
    return RolloutSample(
        split=r.split,
        step=r.step,
        prompt_id=r.prompt_id,
        sample_index=r.sample_index,
        prompt=_cut(r.prompt),
        response=_cut(r.response),
        reward=r.reward,
        strict_score=r.strict_score,
        stop_reason=str(r.stop_reason),
        truncated=r.truncated,
        response_tokens=r.response_tokens,
    )


def pick_samples(rollouts: Sequence[Rollout], limit: int) -> list[Rollout]:
    """Choose up to `limit` rollouts that show what a run does: rewarded-but-wrong first, then wrong, then right,
    then cut-off ones, taking turns between the kinds so each shows up; stable order (prompt id, sample)."""
    ordered = sorted(rollouts, key=lambda r: (r.prompt_id, r.sample_index))
    wrong = [r for r in ordered if r.strict_score is not None and r.strict_score < 1]
    kinds = [
        [r for r in wrong if r.reward > 0],  # the reward paid for a wrong answer: what a hack looks like
        [r for r in wrong if r.reward <= 0],
        [r for r in ordered if r.strict_score is not None and r.strict_score >= 1],
        [r for r in ordered if r.truncated],
        ordered,
    ]
    out: list[Rollout] = []
    seen: set[tuple[str, int]] = set()
    while len(out) < limit and any(kinds):
        for kind in kinds:
            while kind and (kind[0].prompt_id, kind[0].sample_index) in seen:
                kind.pop(0)
            if kind and len(out) < limit:
                r = kind.pop(0)
                seen.add((r.prompt_id, r.sample_index))
                out.append(r)
    return out


def read_samples(run_id: str, artefact_dir: str, label: str) -> RunRollouts:
    """Sample responses from the run's last validation and last training step (bounded: see the constants)."""
    folder = Path(artefact_dir)
    if not folder.is_dir():
        return RunRollouts(run_id, label, [], note=f"run folder missing: {folder}")
    samples: list[RolloutSample] = []
    problems = 0
    for split, limit in (("val", VAL_SAMPLES), ("train", TRAIN_SAMPLES)):
        files = rollout_files(folder, split)
        if not files:
            continue
        read = read_rollout_file(files[-1], ReadResult())
        problems += len(read.problems)
        samples += [_sample(r) for r in pick_samples(read.rollouts, limit)]
    note = "" if samples else f"no rollout files under {folder / ROLLOUTS_DIR}"
    if problems:
        note = (note + "; " if note else "") + f"{problems} unreadable rollout lines"
    return RunRollouts(run_id, label, samples, note=note)


def read_health(
    run_id: str, artefact_dir: str, parent: HealthReport | None, roles: ToolRoles = DEFAULT_ROLES
) -> RunHealth:
    """The run's health report: its `health_report.json`, else built now from its artefacts (not written), with
    the harness's tool `roles`."""
    folder = Path(artefact_dir)
    path = folder / REPORT_FILE
    if path.is_file():
        try:
            return RunHealth(run_id, HealthReport.from_json(orjson.loads(path.read_bytes())), "file")
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            note = f"{path} is unreadable ({exc}); rebuilt from the artefacts"
            return RunHealth(run_id, build_report(folder, parent=parent, roles=roles), "computed", note)
    if not folder.is_dir():
        return RunHealth(run_id, None, "missing", f"not diagnosed: run folder missing ({folder})")
    return RunHealth(run_id, build_report(folder, parent=parent, roles=roles), "computed", "diagnosed for this report")


def compare_pilot(control_dir: str, pilot_dir: str) -> tuple[PairedComparison | None, str]:
    """Recompute the paired strict comparison of a pilot against its control from their val rollouts."""
    for what, folder in (("control", control_dir), ("pilot", pilot_dir)):
        if not Path(folder).is_dir():
            return None, f"{what} run folder missing: {folder}"
    a_scores = final_strict_scores(read_run_table(Path(control_dir), splits=("val",)).val)
    b_scores = final_strict_scores(read_run_table(Path(pilot_dir), splits=("val",)).val)
    a, b = paired(a_scores, b_scores)
    if not a:
        return None, "no paired strict validation scores in the control and pilot rollouts"
    return paired_bootstrap(a, b), ""


@dataclass(frozen=True)
class ModelTrained:
    """A model some of a session's runs trained (from their ``summary.json``), and which runs."""

    card: ModelCard
    run_ids: tuple[str, ...]


def models_trained(runs: Sequence[tuple[str, str]]) -> list[ModelTrained]:
    """The distinct models `runs` (run id, artefact folder) recorded, in run order; runs without a card (not
    finished, another backend, or from before runs recorded one) are left out. A session trains one model: more
    than one here means the folder under its ``model:`` path changed between runs."""
    found: dict[tuple[object, ...], list[tuple[ModelCard, str]]] = {}
    for run_id, folder in runs:
        card = read_card(Path(folder))
        if card is not None:
            found.setdefault((*card.identity(), card.path, card.dtype, card.device), []).append((card, run_id))
    return [ModelTrained(entries[0][0], tuple(rid for _, rid in entries)) for entries in found.values()]
