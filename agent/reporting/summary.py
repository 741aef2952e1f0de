"""The end-of-run summary: which version to use and why, the final version's health and its checkpoint.

`session_summary` reads the store and the runs' artefacts into a `SessionSummary`; `choose_version` is the
pure rule that picks the policy to use; `summary_lines` / `summary_renderables` turn the record into text
(plain, or rich with every value escaped, so a `[tag]` in a name prints as written). `print_summary` is the
one call `evotrainer run` / `resume` make at the end.

Why the final version is the default answer: it carries the session's whole lineage budget and every merge
into it passed the paired merge rule (strict gain of at least `min_effect` with the CI above zero,
replicated on fresh seeds; a candidate that only moves settings back into their documented range needs a
gain with the CI above -`min_effect`, and no loss on a fresh seed). An earlier version with a higher
single-run score is preferred only when a paired comparison of the two on the held-out prompts shows the
final version significantly and materially worse.

Every one of those decisions read the held-out *selection* split. Once the session has ended, the summary
also shows the version to use (and the final one) on the *sealed test* split no decision saw
(harness/splits.py): the figure to quote for new prompts, with its bootstrap 95% CI.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.adapters.pilots import candidate_name
from agent.adapters.runs import final_checkpoint
from agent.context import Context
from agent.reporting.artefacts import REPORT_FILE, compare_pilot
from diagnostics.stats import PairedComparison
from trainer_backend.base import SUMMARY_FILE

if TYPE_CHECKING:
    from rich.console import RenderableType
    from sqlalchemy.orm import Session

DEFAULT_MIN_EFFECT = Context.min_effect


@dataclass(frozen=True, slots=True)
class VersionLine:
    """One version as the summary shows it."""

    index: int
    how: str  # "starting harness" | "merged <candidate name>" | "v<n> harness trained on"
    strict: float | None
    lineage_steps: int
    run_dir: str
    alerts: tuple[str, ...] | None  # fired alert ids; None when the version was not diagnosed

    @property
    def checkpoint(self) -> str:
        """The policy checkpoint of this version's run."""
        found = final_checkpoint(Path(self.run_dir)) if self.run_dir else None
        return str(found) if found is not None else ""


@dataclass(frozen=True, slots=True)
class Choice:
    """The version to use and the evidence for it."""

    use: int
    reason: str


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """What the end of a run prints."""

    session_id: str
    status: str
    stop_reason: str
    versions: list[VersionLine]
    choice: Choice | None  # None when the session has no version (v0 failed)
    steps_used: int
    max_train_steps: int
    command_wall_s: float = 0.0  # how long the printing command (run / resume) ran; 0 = unknown
    sealed: dict[int, SealedScore] | None = None  # version index -> sealed score; None until the session ended

    def version(self, index: int) -> VersionLine:
        """The version with this index."""
        return next(v for v in self.versions if v.index == index)


@dataclass(frozen=True, slots=True)
class SealedScore:
    """A version's strict score on the sealed test split, or why it has none (`mean` None)."""

    mean: float | None
    ci_low: float = 0.0
    ci_high: float = 0.0
    n: int = 0
    note: str = ""

    def text(self) -> str:
        """`0.812 [0.745, 0.871], n=75`, or the reason there is no score."""
        if self.mean is None:
            return f"none ({self.note})"
        return f"{self.mean:.3f} [95% CI {self.ci_low:.3f}, {self.ci_high:.3f}], n={self.n}"


def sealed_score(run_dir: str) -> SealedScore:
    """The sealed split's per-prompt strict scores of a version's run (`rollouts/sealed/`, its last step).

    Call only once a session has ended: nothing that decides may read these (harness/splits.py).
    """
    from diagnostics.schema import read_rollout_file, rollout_files
    from diagnostics.stats import mean_ci
    from harness.splits import SEALED_SPLIT

    files = rollout_files(Path(run_dir), SEALED_SPLIT) if run_dir else []
    if not files:
        return SealedScore(None, note=_no_sealed_scores(Path(run_dir)) if run_dir else "no run")
    read = read_rollout_file(files[-1])
    scores = [r.strict_score for r in read.rollouts if r.strict_score is not None]
    if not scores:
        return SealedScore(None, note=f"{files[-1]} holds no strict scores")
    mean, low, high = mean_ci(scores)
    return SealedScore(mean, low, high, len(scores))


def _no_sealed_scores(run_dir: Path) -> str:
    """Why a run folder holds no sealed scores, from its summary (the trainer records how many rows it sealed)."""
    import orjson

    try:
        sealed_n = orjson.loads((run_dir / SUMMARY_FILE).read_bytes()).get("sealed_n")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        sealed_n = None
    if sealed_n == 0:
        return "the harness seals no held-out rows: data.sealed_fraction is 0 or each source has a single row"
    return "its run scored no sealed split: a verl run, or one from before the split existed"


def sealed_lines(s: SessionSummary) -> list[str]:
    """The version to use (and the final one) on the sealed test split, beside the selection score."""
    if s.choice is None or not s.versions:
        return []
    if s.sealed is None:
        return ["sealed test split: scored, and shown here, once the session has ended"]
    out = []
    for v in dict.fromkeys([s.version(s.choice.use), s.versions[-1]]):
        role = "the version to use" if v.index == s.choice.use else "the final version"
        sealed = s.sealed.get(v.index) or SealedScore(None, note="not read")
        out.append(
            f"v{v.index} ({role}): selection split {_f(v.strict)} (every decision read it); "
            f"sealed test split {sealed.text()} (no decision read it)"
        )
    return out


def choose_version(
    final: VersionLine, best: VersionLine, comparison: PairedComparison | None, min_effect: float
) -> Choice:
    """Pick the policy to use: the final version unless `best` beats it by a significant, material margin.

    `comparison` pairs `best` (a) with `final` (b) on the held-out prompts (delta = final - best), or is None
    when the rollouts are gone.
    """
    budget = f"the whole lineage budget ({final.lineage_steps} training steps"
    if best.index == final.index or (best.strict or 0.0) <= (final.strict or 0.0):
        return Choice(final.index, f"v{final.index} is the final version, has the best strict score and {budget})")
    scores = f"v{best.index} {_f(best.strict)} vs v{final.index} {_f(final.strict)}"
    final_case = (
        f"v{final.index} has {budget} vs {best.lineage_steps}) and descends from every merge, each of which "
        f"passed the paired merge rule"
    )
    if comparison is not None:
        ci = (
            f"Δ {comparison.delta:+.3f}, 95% CI [{comparison.ci_low:+.3f}, {comparison.ci_high:+.3f}], n={comparison.n}"
        )
        if comparison.ci_high < 0 and -comparison.delta >= min_effect:
            return Choice(
                best.index,
                f"v{best.index} is significantly better than the final v{final.index} on the same held-out prompts "
                f"({scores}; {ci}): the later training lost accuracy",
            )
        why = "the CI spans zero" if comparison.ci_high >= 0 else f"below the {min_effect:.2f} noise floor"
        return Choice(
            final.index,
            f"{final_case}; v{best.index}'s higher single-run score ({scores}; {ci}) is seed noise: {why}",
        )
    gap = (best.strict or 0.0) - (final.strict or 0.0)
    if gap < min_effect:
        return Choice(
            final.index,
            f"{final_case}; v{best.index}'s higher score ({scores}) is below the {min_effect:.2f} noise floor",
        )
    return Choice(
        best.index,
        f"v{best.index} scores {gap:.3f} above the final v{final.index} ({scores}), more than the {min_effect:.2f} "
        "noise floor; not confirmed by a paired comparison (rollouts missing)",
    )


def _f(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _alerts(db: Session, session_id: str, run_id: str, run_dir: str) -> tuple[str, ...] | None:
    """Fired alert ids of a version's run: its health_report.json, else the store's findings, else None."""
    import orjson

    from diagnostics.findings import HealthReport
    from store.repository import health_reports

    path = Path(run_dir) / REPORT_FILE
    if path.is_file():
        try:
            report = HealthReport.from_json(orjson.loads(path.read_bytes()))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            report = None
        if report is not None:
            return tuple(f.alert_id for f in report.alerts())
    stored = next(iter(health_reports(db, session_id, run_id)), None)
    return None if stored is None else tuple(f.alert_id for f in stored.findings if f.severity != "ok")


def session_summary(
    db: Session, session_id: str, *, min_effect: float = DEFAULT_MIN_EFFECT, stop_reason: str = ""
) -> SessionSummary:
    """Read the session's versions, their health and the final-vs-best comparison from the store and artefacts.

    Raises:
        store.repository.NotFoundError: no such session.
    """
    from store.repository import session_ledger, session_row, session_runs

    session = session_row(db, session_id)
    versions = session_ledger(db, session_id)
    runs = {r.id: r for r in session_runs(db, session_id)}
    by_id = {v.id: v for v in versions}
    lines: list[VersionLine] = []
    steps: dict[int, int] = {}
    for v in versions:
        run = runs.get(v.run_id or "")
        parent = by_id.get(v.parent_id) if v.parent_id is not None else None
        steps[v.id] = (run.steps if run else 0) + (steps.get(parent.id, 0) if parent else 0)
        if parent is None:
            how = "starting harness"
        elif run is not None and run.candidate_id:
            how = f"merged {candidate_name(session_id, run.candidate_id)}"
        else:
            how = f"v{parent.index} harness trained on"
        run_dir = run.artefact_dir if run else ""
        alerts = _alerts(db, session_id, v.run_id, run_dir) if v.run_id else None
        lines.append(VersionLine(v.index, how, v.strict_score, steps[v.id], run_dir, alerts))
    choice = None
    if lines:
        final = lines[-1]
        best = max(lines, key=lambda x: (x.strict if x.strict is not None else -1.0, x.index))
        cmp = None
        if best.index != final.index and best.run_dir and final.run_dir:
            cmp, _ = compare_pilot(best.run_dir, final.run_dir)
        choice = choose_version(final, best, cmp, min_effect)
    sealed = None
    if session.status == "finished" and choice is not None:
        shown = {choice.use, lines[-1].index}
        sealed = {v.index: sealed_score(v.run_dir) for v in lines if v.index in shown}
    return SessionSummary(
        session_id=session.id,
        status=session.status,
        stop_reason=stop_reason,
        versions=lines,
        choice=choice,
        steps_used=session.steps_used,
        max_train_steps=session.max_train_steps,
        sealed=sealed,
    )


def summary_lines(s: SessionSummary, report_hint: bool = True) -> list[str]:
    """The summary's sentences, plain text (the table of versions is `summary_renderables`' job); `report_hint`
    adds the command that writes the HTML report."""
    if s.choice is None or not s.versions:
        return [f"session {s.session_id} has no trained version ({s.stop_reason or s.status})"]
    final, use = s.versions[-1], s.version(s.choice.use)
    best = max(s.versions, key=lambda x: (x.strict if x.strict is not None else -1.0, x.index))
    first = s.versions[0]
    alerts = "not diagnosed" if final.alerts is None else (", ".join(final.alerts) or "none")
    out = [
        f"final v{final.index}: strict {_f(final.strict)} after {final.lineage_steps} lineage steps "
        f"(v0 {_f(first.strict)}); best v{best.index}: strict {_f(best.strict)}",
        f"use v{use.index}: {s.choice.reason}",
        *sealed_lines(s),
        f"final checkpoint (v{final.index}): {final.checkpoint}",
    ]
    if use.index != final.index:
        out.append(f"checkpoint of v{use.index}, the one to use: {use.checkpoint}")
    wall = f"; this command ran {s.command_wall_s:.0f} s" if s.command_wall_s else ""
    out += [
        f"alerts of the final version v{final.index}: {alerts}",
        f"steps used {s.steps_used}/{s.max_train_steps}{wall}",
    ]
    if report_hint:
        out.append(f"report: evotrainer report {s.session_id} --out report.html")
    return out


def summary_renderables(s: SessionSummary) -> Sequence[RenderableType]:
    """A rich table of the versions plus the summary's sentences; every value is plain text, never markup."""
    from rich.table import Table
    from rich.text import Text

    title = f"session {s.session_id}: {s.stop_reason or s.status}"
    table = Table(title=Text(title))
    for col in ("version", "how", "strict", "lineage steps", "alerts"):
        table.add_column(col)
    use = s.choice.use if s.choice else None
    for v in s.versions:
        alerts = "not diagnosed" if v.alerts is None else str(len(v.alerts))
        mark = " ← use" if v.index == use else ""
        table.add_row(*(Text(x) for x in (f"v{v.index}{mark}", v.how, _f(v.strict), str(v.lineage_steps), alerts)))
    return [table, *(Text(line) for line in summary_lines(s))]


def print_summary(ctx: Any, session_id: str, stop_reason: str, wall_s: float, console: Any) -> None:
    """Print the end-of-run summary of `session_id` (the store of `ctx`, its `min_effect` noise floor) on the
    rich `console`; `wall_s` is this command's wall time (the store's counts the whole session, resumes
    included)."""
    import dataclasses

    from agent.adapters import ledger

    with ledger.db(ledger.store_url(ctx)) as db:
        summary = session_summary(db, session_id, min_effect=ctx.min_effect, stop_reason=stop_reason)
    summary = dataclasses.replace(summary, command_wall_s=wall_s)
    for item in summary_renderables(summary):
        console.print(item)
