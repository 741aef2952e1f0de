"""The tools that act on a candidate: open it, edit its files, backtest it, submit it, add a diagnostic.

Mixed into `agent.llm.tools.Toolbox`. At most one candidate is open at a time and the iteration's candidate
and backtest budgets bound how many are opened and backtested. A candidate goes through the same
lifecycle and single-factor check as every policy's (`agent.decisions.candidates`): `submit_candidate` commits and
records it, or records it as refused with the reason, which comes back to the model. Edits are written
only on the editable surface and never through a link (`sandboxes.worktree_files`); a candidate committed
by an earlier run is submitted as it is, never edited. `request_backtest` runs the candidate's edited code,
so like the model's scripts it runs only under the docker sandbox; what candidate code said (a failure's
text, stderr) reaches the model capped and with every quote of a protected file withheld.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from agent.adapters.held_out import model_code_refusal
from agent.decisions.candidates import FACTORS, finalise_candidate, open_candidate, refuse_candidate
from agent.llm.tool_args import (
    ApplyPatchArgs,
    CreateCandidateArgs,
    FinishArgs,
    NoArgs,
    ProposeDiagnosticArgs,
    SubmitArgs,
    WriteFileArgs,
)
from agent.llm.tool_base import ToolboxBase, ToolError, open_db
from harness.manifest import Harness

MAX_REASONS = 10  # backtest reasons shown to the model


class EditingTools(ToolboxBase):
    """Candidate lifecycle and editing tools of the toolbox."""

    # --- edits ------------------------------------------------------------------------------------------

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
        with open_db(self.url) as db:
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
        from sandboxes import git_worktree as gw
        from sandboxes import worktree_files as wf
        from sandboxes.backtest import run_backtest
        from sandboxes.compiled_code import COMPILED_RULE, compiled_code

        cand = self._require_open()
        worktree = Path(cand.info["worktree"])
        wf.drop_bytecode_caches(worktree)
        unreviewed = gw.unreviewed_files(worktree)
        compiled = compiled_code(worktree, [*wf.changed_files(worktree, cand.base_sha), *unreviewed])
        if compiled:
            raise ToolError(f"{', '.join(compiled[:10])}: {COMPILED_RULE}; the candidate will be refused at submit")
        if unreviewed:  # it would run, yet never be committed or reviewed
            raise ToolError(f"{', '.join(unreviewed[:10])}: ignored by git, so never committed or reviewed; "
                            "the candidate will be refused at submit while they exist")  # fmt: skip
        refusal = model_code_refusal(self.ctx.sandbox)
        if refusal is not None:  # the edited reward would run as the controller's user, next to the held-out files
            raise ToolError(f"{refusal}. Submit the candidate instead: after you finish the session backtests it")
        self._spend("backtest", "_backtests", self.max_backtests)
        digest = hashlib.sha256(wf.diff(worktree, cand.base_sha).encode()).hexdigest()[:12]
        out_dir = self._scratch("backtests") / cand.info["id"] / digest
        result = run_backtest(worktree, Path(self.state["version"]["run_dir"]), out_dir, mode=self.ctx.sandbox)
        metrics = result.to_json().get("metrics")
        reasons = [self._candidate_text(r) for r in result.reasons[:MAX_REASONS]]
        return json.dumps(
            {"verdict": result.verdict.value, "outcome": result.outcome.value, "reasons": reasons,
             "metrics": metrics}, default=str, indent=1, ensure_ascii=False,
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
        self._may_run_model_code()
        folder = self.harness.manifest.diagnostics or _first_editable_folder(self.harness) + "diagnostics/"
        rel = folder.rstrip("/") + f"/{a.name}.py"
        target = wf.write_file(Path(cand.info["worktree"]), rel, a.script, self.harness)
        self._spend("analysis", "_analyses", self.max_analyses)
        result = self._run_script(target, all_steps=False)
        try:
            raw = json.loads(result.files["out.json"])
            metrics = parse_analyzer_output(raw)
        except (KeyError, ValueError, AnalyzerOutputError) as exc:
            why = self._candidate_text(f"{result.outcome.value}: {result.reason} {exc}".strip())
            stderr = self._candidate_text(result.stderr_tail[-500:], 500)
            return f"wrote {rel}, but its run on the incumbent failed ({why}); stderr: {stderr}"
        return f"wrote {rel}; on the incumbent's rollouts it reports {metrics}"

    def finish(self, a: FinishArgs) -> str:
        """Stop proposing for this iteration."""
        self.finished, self.summary = True, a.summary
        return "finished" + ("" if self.open is None else f"; open candidate {self.open.info['id']} is refused")


def _first_editable_folder(harness: Harness) -> str:
    first = harness.manifest.surface.editable[0]
    return first if first.endswith("/") else first + "/"
