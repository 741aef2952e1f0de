"""The tools that read: the incumbent's evidence, the editable files, and the skill and case memory.

Mixed into `agent.llm.tools.Toolbox`. None of them changes a candidate. Each writes its lookup to the search
trace with the references it showed (evidence ids, paths, skill names, case ids; none for a listing or an
analysis), so a candidate that later cites them marks the lookup used. Files are listed and read only on
the editable surface and never through a link (`sandboxes.worktree_files`): protected files are neither
listed nor shown. A file is shown `MAX_FILE_CHARS` at a time from an offset; an analysis script runs in
the sandbox within the iteration's analysis budget. Held-out rollouts are shown, and handed to scripts, as
scores only (`agent.adapters.held_out.HELD_OUT_RULE`).
"""

from __future__ import annotations

from agent.adapters.held_out import HELD_OUT_RULE, HELD_OUT_SPLIT
from agent.llm.tool_args import NoArgs, PathArgs, ReadFileArgs, RunAnalysisArgs, SampleRolloutsArgs, SearchArgs
from agent.llm.tool_base import ToolboxBase, ToolError, open_db

MAX_FILE_CHARS = 6000
SKIP_DIRS = frozenset({".git", "__pycache__", ".venv", ".pytest_cache"})


class ReadingTools(ToolboxBase):
    """Evidence, file and memory lookups of the toolbox."""

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

        if a.split == HELD_OUT_SPLIT:
            return self._sample_held_out(a)
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

    def _sample_held_out(self, a: SampleRolloutsArgs) -> str:
        """Held-out rollouts as scores only (`HELD_OUT_RULE`): filtered by group and step, newest first."""
        from diagnostics.findings import rollout_ref

        if a.alert_id is not None or a.reward_min is not None or a.reward_max is not None:
            raise ToolError(f"{HELD_OUT_RULE}; filter them by group_id or step only")
        rows = [r for r in self._held_out_scores() if a.group_id in (None, r.get("group_id"))]
        rows = [r for r in rows if a.step in (None, r.get("step"))]
        picked = sorted(rows, key=lambda r: (-r["step"], r["group_id"], r["sample_index"]))[: a.limit]
        ids = [rollout_ref(r["run_id"], r["step"], r["prompt_id"], r["sample_index"]) for r in picked]
        strict = [r["strict_score"] for r in rows if isinstance(r.get("strict_score"), (int, float))]
        mean = f"{sum(strict) / len(strict):.3f}" if strict else "n/a"
        query = a.model_dump_json(exclude_none=True)
        self._trace("sample_rollouts", query, f"{len(rows)} matched; shown: {ids}", {*ids, *_opt(a.group_id)})
        head = f"{len(rows)} held-out rollouts match (mean strict score {mean}); showing {len(picked)}"
        lines = [f"{head}: {HELD_OUT_RULE}"]
        lines += [
            f"- {rid} group {r['group_id']} strict {r.get('strict_score')} tokens {r.get('response_tokens')} "
            f"truncated {r.get('truncated')} stop {r.get('stop_reason')}"
            for r, rid in zip(picked, ids, strict=True)
        ]
        return "\n".join(lines)

    def run_analysis(self, a: RunAnalysisArgs) -> str:
        """Run the script in the sandbox; return its outcome, out.json and the tail of stderr."""
        self._may_run_model_code()
        self._spend("analysis", "_analyses", self.max_analyses)
        folder = self._scratch("analyses")
        script = folder / f"analysis_{self._analyses}.py"
        script.write_text(a.script)
        result = self._run_script(script, all_steps=True)
        text = result.files.get("out.json", b"").decode(errors="replace")
        self._trace("run_analysis", a.script[:500], f"{result.outcome.value}: {text[:300]}", set())
        lines = [f"outcome: {result.outcome.value}", f"out.json: {text[:2500]}"]  # docker only: no protected file there
        if result.outcome.value != "ok":
            reason, stderr = self._candidate_text(result.reason), self._candidate_text(result.stderr_tail[-800:], 800)
            lines.append(f"reason: {reason}\nstderr (tail): {stderr}")
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

    # --- searches ---------------------------------------------------------------------------------------

    def search_skills(self, a: SearchArgs) -> str:
        """Skills the current health metrics trigger (ranked), or every skill matching the query words."""
        from agent.decisions.triggers import trigger_metrics
        from skills.models import SkillRecord
        from skills.repository import list_skills, rank

        rows: list[tuple[SkillRecord, str, tuple[str, ...]]]
        with open_db(self.url) as db:
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

        with open_db(self.url) as db:
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
            f"- case:{i} [{kind}, {outcome or '-'}] {self._candidate_text(summary)}"
            for i, kind, outcome, summary, _ in cases
        )


def _opt(*values: str | None) -> set[str]:
    return {v for v in values if v}
