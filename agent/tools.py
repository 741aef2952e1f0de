"""The meta LLM's tools: read the evidence, edit a candidate worktree, backtest, submit, search memory.

`Toolbox` holds one propose step's tools over the incumbent version. Every tool takes validated
arguments (a Pydantic model per tool; its JSON schema is what the model sees) and returns text. Every
refusal is text too, starting with ``ERROR:`` — bad arguments, a nonexistent or protected file, a patch
that does not apply, a multi-factor diff, a spent budget, and any exception a tool raises — so the model
can read the reason and act on it while the session goes on. Paths follow one rule (`harness.paths`) and
files are read, listed and written without following links (`sandboxes.worktree_files`). The tools
enforce what the design promises: files are read and written only on the editable surface (protected code
is never shown), a candidate goes through the same lifecycle and single-factor check as every policy
(`agent.candidates`), scripts run only in the sandbox, and results are truncated so the context stays
bounded. Lookups are written to the search trace; the ones a submitted
candidate references (its declared evidence, skills and changed files) are marked used.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent import accounting
from agent.candidates import FACTORS, OpenCandidate, finalise_candidate, open_candidate, refuse_candidate
from agent.context import Context
from agent.state import CandidateInfo, State
from agent.tool_args import (
    ApplyPatchArgs,
    CreateCandidateArgs,
    FinishArgs,
    NoArgs,
    PathArgs,
    ProposeDiagnosticArgs,
    ReadFileArgs,
    RunAnalysisArgs,
    SampleRolloutsArgs,
    SearchArgs,
    SubmitArgs,
    ToolArgs,
    WriteFileArgs,
)
from harness.manifest import Harness
from harness.paths import PathRuleError, normalise

log = logging.getLogger(__name__)

MAX_RESULT_CHARS = 4000
MAX_FILE_CHARS = 6000
ANALYSIS_TIMEOUT_S = 120.0
SKIP_DIRS = frozenset({".git", "__pycache__", ".venv", ".pytest_cache"})


class ToolError(Exception):
    """A refusal the model should read (the message says what was wrong and what to do instead)."""


@dataclass
class Tool:
    """One tool: its name, description, argument model and implementation."""

    name: str
    description: str
    args: type[ToolArgs]
    run: Callable[[Any], str]

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool schema."""
        params = self.args.model_json_schema()
        params.pop("title", None)
        params.pop("description", None)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }


@dataclass
class _Lookup:
    trace_id: int
    refs: set[str]


@dataclass
class Toolbox:
    """The tools of one propose step (one iteration), with their budgets and what they produced."""

    ctx: Context
    state: State
    harness: Harness
    max_backtests: int = 0
    max_analyses: int = 3
    made: list[CandidateInfo] = field(default_factory=list)
    open: OpenCandidate | None = None
    finished: bool = False
    summary: str = ""
    _opened: int = 0
    _backtests: int = 0
    _analyses: int = 0
    _lookups: list[_Lookup] = field(default_factory=list)
    _rollouts: dict[str, list[Any]] = field(default_factory=dict)
    _evidence: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.max_backtests = self.max_backtests or 2 * self.ctx.max_candidates
        from agent import ledger

        self.url = ledger.store_url(self.ctx)
        self.tools = {
            t.name: t
            for t in (
                Tool("read_health_report", "The incumbent's health report: alerts per layer and key metrics.",
                     NoArgs, self.read_health_report),
                Tool("sample_rollouts", "Cached rollouts of the incumbent, filtered (truncated text).",
                     SampleRolloutsArgs, self.sample_rollouts),
                Tool("run_analysis", "Run an analysis script over the incumbent's rollouts in the sandbox.",
                     RunAnalysisArgs, self.run_analysis),
                Tool("list_files", "List files on the editable surface (open candidate, else the incumbent).",
                     PathArgs, self.list_files),
                Tool("read_file", "Read a file on the editable surface.", ReadFileArgs, self.read_file),
                Tool("write_file", "Replace a file of the open candidate (editable surface only).",
                     WriteFileArgs, self.write_file),
                Tool("apply_patch", "Apply a unified diff to the open candidate (editable surface only).",
                     ApplyPatchArgs, self.apply_patch),
                Tool("create_candidate", "Open a candidate: a branch + worktree off the incumbent.",
                     CreateCandidateArgs, self.create_candidate),
                Tool("request_backtest", "Backtest the open candidate's reward/filter on cached rollouts.",
                     NoArgs, self.request_backtest),
                Tool("submit_candidate", "Check (surface, single factor), commit and record the open candidate.",
                     SubmitArgs, self.submit_candidate),
                Tool("search_skills", "Stored skills: those the health report triggers, or a text search.",
                     SearchArgs, self.search_skills),
                Tool("search_cases", "Past cases of this domain (patterns and negative evidence).",
                     SearchArgs, self.search_cases),
                Tool("propose_diagnostic", "Write a new analyzer into the open candidate's diagnostics folder "
                     "(factor 'diagnostic') and run it once on the incumbent's rollouts.",
                     ProposeDiagnosticArgs, self.propose_diagnostic),
                Tool("finish", "End this iteration's proposals.", FinishArgs, self.finish),
            )
        }  # fmt: skip

    # --- dispatch ---------------------------------------------------------------------------------------

    def schemas(self) -> list[dict[str, Any]]:
        """Every tool's schema, for `bind_tools`."""
        return [t.schema() for t in self.tools.values()]

    def call(self, name: str, args: Any) -> str:
        """Run one tool call; every refusal comes back as ``ERROR: ...`` text, never as an exception."""
        from sandboxes.git_worktree import GitWorktreeError

        tool = self.tools.get(name)
        if tool is None:
            return f"ERROR: unknown tool {name!r}; the tools are {sorted(self.tools)}"
        try:
            parsed = tool.args.model_validate(args if args is not None else {})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'args'}: {e['msg']}" for e in exc.errors())
            return f"ERROR: bad arguments for {name}: {problems}"
        try:
            result = tool.run(parsed)
        except (ToolError, GitWorktreeError, OSError, ValueError) as exc:
            result = f"ERROR: {exc}"
        except Exception as exc:  # model output never ends a session (issue 13 §4): the model reads why
            log.warning("tool %s failed on %r", name, args, exc_info=True)
            result = f"ERROR: {name} failed ({type(exc).__name__}: {str(exc)[:500]}); the session goes on"
        return _truncate(str(result), MAX_RESULT_CHARS)

    # --- evidence ---------------------------------------------------------------------------------------

    def read_health_report(self, _: NoArgs) -> str:
        """The report as text (alerts with a few evidence ids, then metrics), never raw logs."""
        from diagnostics.findings import HealthReport, render_text

        report = HealthReport.from_json(self.state["report"])
        text = render_text(report)
        alerts = [f.alert_id for f in report.findings if f.fired]
        self._trace("read_health_report", report.run_id, f"alerts: {alerts}", {report.run_id, *alerts})
        return text

    def sample_rollouts(self, a: SampleRolloutsArgs) -> str:
        """Rollouts matching the filters, newest first, with truncated prompt and response."""
        from diagnostics.findings import rollout_ref

        rows = self._load_rollouts(a.split)
        if a.alert_id is not None:
            finding = next((f for f in self.state["report"]["findings"] if f["alert_id"] == a.alert_id), None)
            if finding is None:
                known = sorted({f["alert_id"] for f in self.state["report"]["findings"]})
                raise ToolError(f"no alert {a.alert_id!r} in the health report; alerts: {known}")
            wanted = set(finding["evidence_rollout_ids"])
            rows = [r for r in rows if rollout_ref(r.run_id, r.step, r.prompt_id, r.sample_index) in wanted]
        if a.group_id is not None:
            rows = [r for r in rows if r.group_id == a.group_id]
        if a.step is not None:
            rows = [r for r in rows if r.step == a.step]
        if a.reward_min is not None:
            rows = [r for r in rows if r.reward >= a.reward_min]
        if a.reward_max is not None:
            rows = [r for r in rows if r.reward <= a.reward_max]
        picked = sorted(rows, key=lambda r: (-r.step, r.group_id, r.sample_index))[: a.limit]
        ids = [rollout_ref(r.run_id, r.step, r.prompt_id, r.sample_index) for r in picked]
        query = a.model_dump_json(exclude_none=True)
        self._trace(
            "sample_rollouts", query, f"{len(rows)} matched; shown: {ids}", {*ids, *_opt(a.alert_id, a.group_id)}
        )
        if not picked:
            return f"no rollout matches {query} (of {len(self._load_rollouts(a.split))} {a.split} rollouts)"
        lines = [f"{len(rows)} rollouts match; showing {len(picked)}:"]
        for r, rid in zip(picked, ids, strict=True):
            components = ", ".join(f"{k}={v:.3g}" for k, v in r.reward_components.items())
            lines.append(
                f"- {rid} group {r.group_id} reward {r.reward:.3f} ({components}) strict {r.strict_score} "
                f"tokens {r.response_tokens} truncated {r.truncated}\n  prompt: {r.prompt[:200]!r}\n"
                f"  answer: {r.ground_truth!r}\n  response: {r.response[:400]!r}"
            )
        return "\n".join(lines)

    def run_analysis(self, a: RunAnalysisArgs) -> str:
        """Run the script in the sandbox; return its outcome, out.json and the tail of stderr."""
        self._spend("analysis", "_analyses", self.max_analyses)
        folder = self._scratch("analyses")
        script = folder / f"analysis_{self._analyses}.py"
        script.write_text(a.script)
        result = self._run_script(script, all_steps=True)
        text = result.files.get("out.json", b"").decode(errors="replace")
        self._trace("run_analysis", a.script[:500], f"{result.outcome.value}: {text[:300]}", set())
        lines = [f"outcome: {result.outcome.value}", f"out.json: {text[:2500]}"]
        if result.outcome.value != "ok":
            lines.append(f"reason: {result.reason}\nstderr (tail): {result.stderr_tail[-800:]}")
        return "\n".join(lines)

    # --- files ------------------------------------------------------------------------------------------

    def list_files(self, a: PathArgs) -> str:
        """Files under `path` that lie on the editable surface, with sizes (links are shown, never followed)."""
        from sandboxes import worktree_files as wf

        try:
            entries = wf.list_tree(self._root(), a.path, skip=SKIP_DIRS)
        except FileNotFoundError:
            raise ToolError(f"no such folder {a.path!r}; list_files with no path shows the editable files") from None
        found = [
            f"{e.path} ({e.size} bytes)" if e.kind == "file" else f"{e.path} ({e.kind}: not followed, not readable)"
            for e in entries
            if self.harness.is_editable(e.path)
        ]
        self._trace("list_files", a.path or ".", f"{len(found)} files", set())
        surface = self.harness.manifest.surface
        head = f"editable files under {a.path or '.'} (editable: {surface.editable}; protected files are not shown):"
        return "\n".join([head, *found[:200]]) if found else f"no editable file under {a.path or '.'}"

    def read_file(self, a: ReadFileArgs) -> str:
        """The file's text from `offset` (protected or off-surface files are refused, never shown)."""
        from sandboxes import worktree_files as wf

        rel = self._surface(a.path)
        try:
            text = wf.read_file(self._root(), rel)  # no link followed, regular files only
        except (FileNotFoundError, IsADirectoryError):
            raise ToolError(f"no such file {rel!r} in {self._where()}; list_files shows what exists") from None
        self._trace("read_file", rel, f"{len(text)} chars", {rel})
        chunk = text[a.offset : a.offset + MAX_FILE_CHARS]
        more = len(text) - a.offset - len(chunk)
        return chunk + (
            f"\n[... {more} more characters: read_file with offset {a.offset + len(chunk)}]" if more > 0 else ""
        )

    def write_file(self, a: WriteFileArgs) -> str:
        """Replace a file in the open candidate's worktree."""
        from sandboxes import worktree_files as wf

        cand = self._require_open(editing=True)
        rel = self._surface(a.path)
        wf.write_file(Path(cand.info["worktree"]), rel, a.content, self.harness)
        return f"wrote {rel} ({len(a.content)} chars) in candidate {cand.info['id']}"

    def apply_patch(self, a: ApplyPatchArgs) -> str:
        """Apply a unified diff to the open candidate's worktree (checked against the surface first)."""
        from sandboxes import worktree_files as wf

        cand = self._require_open(editing=True)
        paths = wf.apply_patch(Path(cand.info["worktree"]), a.diff, self.harness)
        return f"patch applied to {paths} in candidate {cand.info['id']}"

    # --- candidates -------------------------------------------------------------------------------------

    def create_candidate(self, a: CreateCandidateArgs) -> str:
        """Open a branch + worktree; refused while another is open or when the candidate budget is spent."""
        from skills.repository import SkillNotFoundError, get_skill

        if self.open is not None:
            raise ToolError(f"candidate {self.open.info['id']} is still open: submit_candidate it first")
        live = [c for c in self.made if c["status"] != "refused"]
        if len(live) >= self.ctx.max_candidates or self._opened >= 2 * self.ctx.max_candidates:
            raise ToolError(
                f"over budget: this iteration allows {self.ctx.max_candidates} candidate(s) "
                f"({len(live)} submitted, {self._opened} opened); call finish"
            )
        unknown = sorted(set(a.factors) - set(FACTORS))
        if unknown:
            raise ToolError(f"unknown factor(s) {unknown}; use {list(FACTORS)}")
        if len(a.factors) > 1 and not a.justification.strip():
            raise ToolError("a bundle of several factors needs a justification (or make one candidate per factor)")
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", a.slug):
            raise ToolError(f"slug {a.slug!r} must be lowercase letters, digits and dashes")
        with _db(self.url) as db:
            for name in a.skills:
                try:
                    get_skill(db, name)
                except SkillNotFoundError:
                    raise ToolError(f"no stored skill {name!r}; search_skills lists them") from None
        cand = open_candidate(
            self.ctx,
            self.state,
            len(self._existing()) + self._opened + 1,
            a.slug,
            hypothesis=a.hypothesis,
            factors=tuple(dict.fromkeys(a.factors)),
            success_criterion=a.success_criterion,
            justification=a.justification,
            skill=",".join(a.skills),
        )
        self._opened += 1
        self.open = cand
        self._evidence = {*a.evidence, *a.skills}
        note = " (already committed by an earlier run: submit it as it is)" if cand.committed else ""
        return f"opened candidate {cand.info['id']} on branch {cand.info['branch']}{note}; edit files, then submit"

    def request_backtest(self, _: NoArgs) -> str:
        """Backtest the open candidate (as edited now) on the incumbent's cached rollouts."""
        from sandboxes import worktree_files as wf
        from sandboxes.backtest import run_backtest

        cand = self._require_open()
        self._spend("backtest", "_backtests", self.max_backtests)
        worktree = Path(cand.info["worktree"])
        digest = hashlib.sha256(wf.diff(worktree, cand.base_sha).encode()).hexdigest()[:12]
        out_dir = self._scratch("backtests") / cand.info["id"] / digest
        result = run_backtest(worktree, Path(self.state["version"]["run_dir"]), out_dir, mode=self.ctx.sandbox)
        metrics = result.to_json().get("metrics")
        return json.dumps(
            {"verdict": result.verdict.value, "outcome": result.outcome.value, "reasons": list(result.reasons),
             "metrics": metrics}, default=str, indent=1,
        )  # fmt: skip

    def submit_candidate(self, a: SubmitArgs) -> str:
        """Run the surface and single-factor checks, commit and record; a refusal reason comes back."""
        from sandboxes.git_worktree import GitWorktreeError

        cand = self._require_open()
        self.open = None
        try:
            info = finalise_candidate(self.ctx, self.state, self.harness, cand, a.title)
        except GitWorktreeError as exc:
            info = refuse_candidate(self.ctx, self.state, cand.info, f"commit failed: {exc}")
        self.made.append(info)
        if info["status"] == "refused":
            return (
                f"REFUSED: {info['reason']}. Candidate {info['id']} is recorded as refused; to retry, "
                "create_candidate again with a change that respects the rule."
            )
        self._settle(info, cand.base_sha)
        return f"submitted {info['id']} (factor {info['factor']}, commit {info['commit'][:10]}); it will be " \
               "backtested and trained against a control run after you finish"  # fmt: skip

    def propose_diagnostic(self, a: ProposeDiagnosticArgs) -> str:
        """Write `<diagnostics folder>/<name>.py` in the open candidate and run it once on the incumbent."""
        from diagnostics.analyzers import AnalyzerOutputError, parse_analyzer_output
        from sandboxes import worktree_files as wf

        cand = self._require_open(editing=True)
        folder = self.harness.manifest.diagnostics or _first_editable_folder(self.harness) + "diagnostics/"
        rel = folder.rstrip("/") + f"/{a.name}.py"
        target = wf.write_file(Path(cand.info["worktree"]), rel, a.script, self.harness)
        self._spend("analysis", "_analyses", self.max_analyses)
        result = self._run_script(target, all_steps=False)
        try:
            raw = json.loads(result.files["out.json"])
            metrics = parse_analyzer_output(raw)
        except (KeyError, ValueError, AnalyzerOutputError) as exc:
            why = f"{result.outcome.value}: {result.reason} {exc}".strip()
            return f"wrote {rel}, but its run on the incumbent failed ({why}); stderr: {result.stderr_tail[-500:]}"
        return f"wrote {rel}; on the incumbent's rollouts it reports {metrics}"

    def finish(self, a: FinishArgs) -> str:
        """Stop proposing for this iteration."""
        self.finished, self.summary = True, a.summary
        return "finished" + ("" if self.open is None else f"; open candidate {self.open.info['id']} is refused")

    # --- searches ---------------------------------------------------------------------------------------

    def search_skills(self, a: SearchArgs) -> str:
        """Skills the current health metrics trigger (ranked), or every skill matching the query words."""
        from agent.triggers import trigger_metrics
        from skills.models import SkillRecord
        from skills.repository import list_skills, rank

        rows: list[tuple[SkillRecord, str, tuple[str, ...]]]
        with _db(self.url) as db:
            if a.query.strip():
                words = a.query.lower().split()
                records = [
                    r for r in list_skills(db)
                    if any(w in f"{r.spec.name} {r.spec.factor} {r.spec.trigger} {r.spec.expected_outcome}".lower()
                           for w in words)
                ]  # fmt: skip
                rows = [(r, "text match", ()) for r in records]
            else:
                matches = rank(
                    db, trigger_metrics(self.state["report"]["metrics"], self.harness), self.harness.manifest.domain
                )
                rows = [(m.record, f"{m.tier}{' (guard: a warning)' if m.is_warning else ''}", m.matched_terms)
                        for m in matches]  # fmt: skip
        names = [r.spec.name for r, _, _ in rows]
        self._trace("search_skills", a.query or "<health report triggers>", f"{names}", set(names))
        if not rows:
            return "no stored skill matches"
        return "\n".join(
            f"- {r.spec.name} [{r.spec.factor}; {how}; {r.wins} win(s) {r.losses} loss(es)] trigger: {r.spec.trigger}"
            f"{'; matched ' + ', '.join(terms) if terms else ''}\n  expected: {r.spec.expected_outcome}\n"
            f"  validation: {r.spec.validation_rule}\n  patch ({r.spec.patch_kind}): {r.spec.patch[:400]}"
            for r, how, terms in rows[:10]
        )

    def search_cases(self, a: SearchArgs) -> str:
        """The domain's cases (newest first), filtered by the query words."""
        from store.repository import cases_for_domain

        with _db(self.url) as db:
            cases = [
                (c.id, c.kind, c.outcome, c.summary, c.candidate_id)
                for c in cases_for_domain(db, self.harness.manifest.domain)
            ]
        words = a.query.lower().split()
        cases = [c for c in cases if not words or any(w in c[3].lower() for w in words)][:10]
        refs = {f"case:{c[0]}" for c in cases} | {str(c[4]) for c in cases if c[4]}
        self._trace("search_cases", a.query or "<all>", f"{[c[0] for c in cases]}", refs)
        if not cases:
            return f"no case in domain {self.harness.manifest.domain!r} matches"
        return "\n".join(
            f"- case:{i} [{kind}, {outcome or '-'}] {summary[:300]}" for i, kind, outcome, summary, _ in cases
        )

    # --- plumbing ---------------------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse a candidate left open when the loop ends (recorded, never silently dropped)."""
        if self.open is not None:
            cand, self.open = self.open, None
            self.made.append(refuse_candidate(self.ctx, self.state, cand.info, "not submitted before the LLM stopped"))

    def _existing(self) -> list[CandidateInfo]:
        return [c for c in self.state.get("candidates", []) if c["iteration"] == self.state["iteration"]]

    def _root(self) -> Path:
        return Path(self.open.info["worktree"]) if self.open is not None else Path(self.state["harness_dir"])

    def _where(self) -> str:
        return f"candidate {self.open.info['id']}" if self.open is not None else "the incumbent harness"

    def _surface(self, path: str) -> str:
        """Normalise `path` (`harness.paths`) and refuse anything off the editable surface (protected: never shown).

        Returns the canonical path.
        """
        try:
            rel = normalise(path)
        except PathRuleError as exc:
            raise ToolError(f"{exc}; give a relative path inside the harness, e.g. harness/reward.py") from None
        if self.harness.is_protected(rel):
            raise ToolError(f"{rel} is on the protected surface (strict evaluator, held-out data, manifest): "
                            "it is never shown or edited")  # fmt: skip
        if not self.harness.is_editable(rel):
            raise ToolError(f"{rel} is outside the editable surface {self.harness.manifest.surface.editable}")
        return rel

    def _require_open(self, editing: bool = False) -> OpenCandidate:
        if self.open is None:
            raise ToolError("no open candidate: create_candidate first")
        if editing and self.open.committed:
            raise ToolError(f"candidate {self.open.info['id']} was committed by an earlier run: submit it as it is")
        return self.open

    def _spend(self, what: str, counter: str, limit: int) -> None:
        used = getattr(self, counter)
        if used >= limit:
            raise ToolError(f"over budget: {limit} {what} run(s) per iteration, all used")
        setattr(self, counter, used + 1)

    def _scratch(self, kind: str) -> Path:
        folder = self.ctx.session_dir(self.state["session_id"]) / "llm" / f"iter{self.state['iteration']}" / kind
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _run_script(self, script: Path, *, all_steps: bool) -> Any:
        from diagnostics.schema import rollout_files
        from sandboxes.worker import run_script

        run_dir = Path(self.state["version"]["run_dir"])
        inputs = {f"{s}.jsonl": files[-1] for s in ("train", "val") if (files := rollout_files(run_dir, s))}
        if all_steps and (files := rollout_files(run_dir, "train")):
            merged = self._scratch("inputs") / "train_all.jsonl"
            if not merged.exists():
                merged.write_text("".join(f.read_text() for f in files))
            inputs["train_all.jsonl"] = merged
        mode = "process" if self.ctx.sandbox == "none" else self.ctx.sandbox
        return run_script(script, inputs, ANALYSIS_TIMEOUT_S, mode=mode)

    def _load_rollouts(self, split: str) -> list[Any]:
        from diagnostics.schema import read_run_rollouts

        if split not in self._rollouts:
            read = read_run_rollouts(Path(self.state["version"]["run_dir"]), [split])  # type: ignore[list-item]
            self._rollouts[split] = read.rollouts
        return self._rollouts[split]

    def _trace(self, tool: str, query: str, summary: str, refs: set[str]) -> None:
        trace_id = accounting.trace_lookup(
            self.url, session_id=self.state["session_id"], tool=tool, query=query, result_summary=summary
        )
        self._lookups.append(_Lookup(trace_id, refs))

    def _settle(self, info: CandidateInfo, base_sha: str) -> None:
        """Mark the lookups this submitted candidate references as used; count its skills' uses."""
        from agent.triggers import trigger_metrics
        from sandboxes import worktree_files as wf
        from skills.repository import evidence, get_skill, record_use

        changed = set(wf.changed_files(Path(info["worktree"]), base_sha))
        refs = self._evidence | changed
        text = f"{info['hypothesis']} {info['justification']} {info['success_criterion']}"
        used = [lk.trace_id for lk in self._lookups if lk.refs & refs or any(r in text for r in lk.refs if len(r) > 3)]
        accounting.mark_used(self.url, used)
        names = [n for n in info["skill"].split(",") if n]
        if names:
            metrics = trigger_metrics(self.state["report"]["metrics"], self.harness)
            with _db(self.url) as db:
                for name in names:
                    record_use(
                        db, name, self.state["session_id"], info["id"], evidence(get_skill(db, name).spec, metrics)
                    )


def _db(url: str) -> Any:
    from agent import ledger

    return ledger.db(url)


def _opt(*values: str | None) -> set[str]:
    return {v for v in values if v}


def _first_editable_folder(harness: Harness) -> str:
    first = harness.manifest.surface.editable[0]
    return first if first.endswith("/") else first + "/"


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... truncated {len(text) - limit} characters]"
