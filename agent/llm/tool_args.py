"""Argument models of the meta LLM's tools (agent/llm/tools.py): their JSON schemas are what the model sees.

Every model forbids unknown keys, so a misspelt argument comes back to the model as an error it can fix,
and every text and list is bounded, so one reply cannot push megabytes into a worktree or the store.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from store.types import Factor

FACTOR_NAMES: tuple[str, ...] = get_args(Factor)  # the store's factor values, defined once
MAX_ROLLOUTS = 20
MAX_FILE_CHARS = 200_000  # one harness file written by the model (the demo's largest is ~3 kB)
MAX_SCRIPT_CHARS = 100_000
MAX_TEXT_CHARS = 4_000  # hypotheses, criteria, queries
MAX_PATH_CHARS = 1_000


class ToolArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoArgs(ToolArgs):
    """No arguments."""


class SampleRolloutsArgs(ToolArgs):
    """Filter the incumbent's cached rollouts."""

    alert_id: str | None = Field(None, max_length=200, description="only the evidence rollouts of this alert")
    group_id: str | None = Field(None, max_length=200, description="only this group (one prompt's samples in one step)")
    reward_min: float | None = Field(None, description="lowest reward to include")
    reward_max: float | None = Field(None, description="highest reward to include")
    split: Literal["train", "val"] = Field("train", description="val: held-out, scores only (no text or answers)")
    step: int | None = Field(None, description="only this training step (default: all, newest first)")
    limit: int = Field(5, ge=1, le=MAX_ROLLOUTS)


class RunAnalysisArgs(ToolArgs):
    """A Python script run in the sandbox over the incumbent's rollouts."""

    script: str = Field(
        min_length=1,
        max_length=MAX_SCRIPT_CHARS,
        description="Python source. Inputs (JSONL, one rollout per line) at $EVOTRAINER_INPUTS_DIR/"
        "{train.jsonl (latest step), train_all.jsonl (every step), val_scores.jsonl (held-out: scores only, no "
        "text or answers)}; write a JSON object to $EVOTRAINER_RESULTS_DIR/out.json",
    )


class PathArgs(ToolArgs):
    """A path relative to the harness root."""

    path: str = Field("", max_length=MAX_PATH_CHARS, description="relative path, e.g. harness/reward.py")


class ReadFileArgs(ToolArgs):
    """A file on the editable surface."""

    path: str = Field(min_length=1, max_length=MAX_PATH_CHARS)
    offset: int = Field(0, ge=0, le=MAX_FILE_CHARS * 50, description="first character to return")


class WriteFileArgs(ToolArgs):
    """Whole-file content for a file on the editable surface of the open candidate."""

    path: str = Field(min_length=1, max_length=MAX_PATH_CHARS)
    content: str = Field(max_length=MAX_FILE_CHARS)


class ApplyPatchArgs(ToolArgs):
    """A unified diff (git format, paths relative to the harness root)."""

    diff: str = Field(min_length=1, max_length=MAX_FILE_CHARS)


class CreateCandidateArgs(ToolArgs):
    """A new intervention: branch + worktree, with its written hypothesis and success criterion."""

    slug: str = Field(min_length=1, max_length=40, description="short branch-safe name, e.g. strict-reward")
    hypothesis: str = Field(
        min_length=1, max_length=MAX_TEXT_CHARS, description="If we change X, Y happens, because <evidence>"
    )
    factors: list[str] = Field(
        min_length=1, max_length=len(FACTOR_NAMES), description=f"the factor(s) changed, from {list(FACTOR_NAMES)}"
    )
    success_criterion: str = Field(
        min_length=1, max_length=MAX_TEXT_CHARS, description="falsifiable, on the strict held-out score"
    )
    justification: str = Field("", max_length=MAX_TEXT_CHARS, description="required for a bundle of several factors")
    skills: list[str] = Field(default_factory=list, max_length=8, description="names of stored skills this applies")
    evidence: list[str] = Field(
        default_factory=list,
        max_length=50,
        description="ids looked up that support it (alert ids, rollout ids, case ids, files)",
    )


class SubmitArgs(ToolArgs):
    """Finalise the open candidate."""

    title: str = Field(min_length=1, max_length=120, description="one-line commit title")


class SearchArgs(ToolArgs):
    """A text filter over the stored memory."""

    query: str = Field(
        "", max_length=MAX_TEXT_CHARS, description="words to look for (empty: what matches the health report)"
    )


class ProposeDiagnosticArgs(ToolArgs):
    """A new analyzer for the harness diagnostics folder."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$", description="file stem, e.g. answer_spam_rate")
    script: str = Field(
        min_length=1,
        max_length=MAX_SCRIPT_CHARS,
        description="Python source reading $EVOTRAINER_INPUTS_DIR/{train.jsonl,val_scores.jsonl} and writing "
        '{"metrics": {name: number}} to $EVOTRAINER_RESULTS_DIR/out.json',
    )


class FinishArgs(ToolArgs):
    """End this iteration's proposals."""

    summary: str = Field("", max_length=MAX_TEXT_CHARS, description="what was submitted and why")
