"""What every tool of `agent.llm.tools.Toolbox` stands on: the tool record, the refusal, and the shared plumbing.

`ToolError` is a refusal the model reads (`Toolbox.call` turns it into ``ERROR: ...`` text). `Tool` pairs a
name and description with a Pydantic argument model (its JSON schema is what the model sees) and the
implementation. `ToolboxBase` holds one propose step's state and budgets and the helpers the tool groups
share: the editable-surface check (`harness.paths` rule, protected files refused without being shown), the
open-candidate and budget checks, the per-iteration scratch folder, running a script over the incumbent's
rollouts in the sandbox (`ANALYSIS_TIMEOUT_S`), the cached rollouts, and the search trace: every lookup is
written to it, and `_settle` marks used the lookups a submitted candidate references. The held-out
rule (`HELD_OUT_RULE`) is stated in `agent/adapters/held_out.py`: held-out rollouts reach the model, or a
script it wrote, only through `held_out_scores` (`analysis_inputs` builds every script's inputs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.adapters.held_out import (
    HELD_OUT_RULE,
    HELD_OUT_SPLIT,
    analysis_inputs,
    held_out_scores,
    model_code_refusal,
)
from agent.context import Context
from agent.decisions.candidates import OpenCandidate
from agent.llm import accounting
from agent.llm.tool_args import ToolArgs
from agent.state import CandidateInfo, State
from harness.manifest import Harness
from harness.paths import PathRuleError, normalise

ANALYSIS_TIMEOUT_S = 120.0
MAX_CANDIDATE_TEXT_CHARS = 300  # one failure reason, stderr tail or case summary of candidate code, as shown
QUOTE_WINDOW = 16  # a run of this many characters shared with a protected file is a quote of it
PROTECTED_READ_BYTES = 16 << 20  # of each protected file, compared with candidate text
WITHHELD = "[withheld: this line quotes a protected file]"


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
class ToolboxBase:
    """One propose step's state and budgets, and the plumbing its tools share (`agent.llm.tools.Toolbox`)."""

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
    _protected: str | None = None

    def __post_init__(self) -> None:
        self.max_backtests = self.max_backtests or 2 * self.ctx.max_candidates
        from agent.adapters import ledger

        self.url = ledger.store_url(self.ctx)

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

    def _may_run_model_code(self) -> None:
        """Refuse (before anything is written or spent) a script the model wrote outside the docker sandbox."""
        refusal = model_code_refusal(self.ctx.sandbox)
        if refusal is not None:
            raise ToolError(refusal)

    def _run_script(self, script: Path, *, all_steps: bool) -> Any:
        from sandboxes.worker import run_script

        self._may_run_model_code()
        inputs = analysis_inputs(Path(self.state["version"]["run_dir"]), self._scratch("inputs"), all_steps=all_steps)
        return run_script(script, inputs, ANALYSIS_TIMEOUT_S, mode="docker")

    def _load_rollouts(self, split: str) -> list[Any]:
        """The incumbent's training rollouts; held-out ones only through `_held_out_scores`."""
        from diagnostics.schema import read_run_rollouts

        assert split != HELD_OUT_SPLIT, HELD_OUT_RULE
        if split not in self._rollouts:
            read = read_run_rollouts(Path(self.state["version"]["run_dir"]), [split])  # type: ignore[list-item]
            self._rollouts[split] = read.rollouts
        return self._rollouts[split]

    def _candidate_text(self, text: str, limit: int = MAX_CANDIDATE_TEXT_CHARS) -> str:
        """Candidate-made text (an exception, stderr, a case summary) as a tool may show it: capped, and with
        every line that quotes a protected file (strict evaluator, held-out data) withheld."""
        return withhold_quotes(cap_text(text, limit), self._protected_text())

    def _protected_text(self) -> str:
        if self._protected is None:
            root = self.harness.root
            texts = []
            for path in sorted(root.rglob("*")):
                rel = path.relative_to(root).as_posix()
                if rel.startswith(".git/") or path.is_symlink() or not path.is_file():
                    continue
                if self.harness.is_protected(rel):
                    texts.append(path.read_bytes()[:PROTECTED_READ_BYTES].decode(errors="replace"))
            self._protected = "\n".join(texts)
        return self._protected

    def _held_out_scores(self) -> list[dict[str, Any]]:
        """The incumbent's held-out rollouts (every step) as `held_out_scores` rows."""
        from diagnostics.schema import read_run_rollouts

        read = read_run_rollouts(Path(self.state["version"]["run_dir"]), [HELD_OUT_SPLIT])
        return [held_out_scores(r.to_json()) for r in read.rollouts]

    def _trace(self, tool: str, query: str, summary: str, refs: set[str]) -> None:
        trace_id = accounting.trace_lookup(
            self.url, session_id=self.state["session_id"], tool=tool, query=query, result_summary=summary
        )
        self._lookups.append(_Lookup(trace_id, refs))

    def _settle(self, info: CandidateInfo, base_sha: str) -> None:
        """Mark the lookups this submitted candidate references as used; count its skills' uses."""
        from agent.decisions.triggers import trigger_metrics
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
            with open_db(self.url) as db:
                for name in names:
                    record_use(
                        db, name, self.state["session_id"], info["id"], evidence(get_skill(db, name).spec, metrics)
                    )


def withhold_quotes(text: str, protected: str) -> str:
    """Return `text` with every line that shares a `QUOTE_WINDOW`-character run with `protected` replaced.

    Windows are taken every half window along each line, so any verbatim copy of at least 1.5 windows is
    found; a line short enough to be one window is withheld when it is a whole line of `protected`.
    """
    if not protected:
        return text
    whole_lines = {line.strip() for line in protected.splitlines() if len(line.strip()) >= 8}
    step = QUOTE_WINDOW // 2
    out = []
    for line in text.splitlines():
        core = line.strip()
        windows = (core[i : i + QUOTE_WINDOW] for i in range(0, max(len(core) - QUOTE_WINDOW, 0) + 1, step))
        if core in whole_lines or (len(core) >= QUOTE_WINDOW and any(w in protected for w in windows)):
            out.append(WITHHELD)
        else:
            out.append(line)
    return "\n".join(out)


def cap_text(text: str, limit: int = MAX_CANDIDATE_TEXT_CHARS) -> str:
    """Return `text` cut to `limit` characters, saying how much was cut."""
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} characters cut]"


def open_db(url: str) -> Any:
    """A session scope on the store at `url` (`agent.adapters.ledger.db`)."""
    from agent.adapters import ledger

    return ledger.db(url)
