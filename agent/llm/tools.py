"""The meta LLM's tools: read the evidence, edit a candidate worktree, backtest, submit, search memory.

`Toolbox` holds one propose step's tools over the incumbent version. Every tool takes validated
arguments (a Pydantic model per tool; its JSON schema is what the model sees) and returns text. Every
refusal is text too, starting with ``ERROR:`` — bad arguments, a nonexistent or protected file, a patch
that does not apply, a multi-factor diff, a spent budget, and any exception a tool raises — so the model
can read the reason and act on it while the session goes on. Paths follow one rule (`harness.paths`) and
files are read, listed and written without following links (`sandboxes.worktree_files`). The tools
enforce what the design promises: files are read and written only on the editable surface (protected code
is never shown), a candidate goes through the same lifecycle and single-factor check as every policy
(`agent.decisions.candidates`), scripts run only in the sandbox, and results are truncated so the context stays
bounded. Lookups are written to the search trace; the ones a submitted
candidate references (its declared evidence, skills and changed files) are marked used.

This module holds the registry and the entry points (`Toolbox.schemas`, `Toolbox.call`, `Toolbox.close`)
and re-exports the tool vocabulary. The tools themselves are grouped by concern: `agent.llm.tool_reading`
(evidence, file and memory lookups) and `agent.llm.tool_editing` (the candidate lifecycle and its edits),
both built on `agent.llm.tool_base` (the `Tool` record, `ToolError` and the plumbing they share).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agent.decisions.candidates import refuse_candidate
from agent.llm.tool_args import (
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
    WriteFileArgs,
)
from agent.llm.tool_base import ANALYSIS_TIMEOUT_S, Tool, ToolboxBase, ToolError
from agent.llm.tool_editing import EditingTools
from agent.llm.tool_reading import MAX_FILE_CHARS, SKIP_DIRS, ReadingTools

__all__ = [
    "ANALYSIS_TIMEOUT_S",
    "MAX_FILE_CHARS",
    "MAX_RESULT_CHARS",
    "SKIP_DIRS",
    "Tool",
    "ToolError",
    "Toolbox",
    "ToolboxBase",
]

log = logging.getLogger(__name__)

MAX_RESULT_CHARS = 4000


@dataclass
class Toolbox(ReadingTools, EditingTools):
    """The tools of one propose step (one iteration), with their budgets and what they produced."""

    def __post_init__(self) -> None:
        super().__post_init__()
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
        except Exception as exc:  # model output never ends a session: the model reads why
            log.warning("tool %s failed on %r", name, args, exc_info=True)
            result = f"ERROR: {name} failed ({type(exc).__name__}: {str(exc)[:500]}); the session goes on"
        return _truncate(str(result), MAX_RESULT_CHARS)

    # --- end of the loop -------------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse a candidate left open when the loop ends (recorded, never silently dropped)."""
        if self.open is not None:
            cand, self.open = self.open, None
            self.made.append(refuse_candidate(self.ctx, self.state, cand.info, "not submitted before the LLM stopped"))


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... truncated {len(text) - limit} characters]"
