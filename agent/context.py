"""Run settings of one campaign session (LangGraph `context_schema`), separate from the evolving State.

Loaded once at the entry point (CLI) and passed to `graph.invoke(..., context=...)`; nodes read it
through `Runtime[Context]`. Env never silently overrides an explicit value; secrets come only from env.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from agent.prices import has_price
from harness.manifest import BACKEND_NAMES, DEFAULT_BACKEND, BackendName
from sandboxes.modes import SandboxMode
from store.vocab import SessionMode

Mode = SessionMode  # the session modes, defined once (store/vocab.py)
Gate = Literal["none", "launch", "promote", "all"]


@dataclass(frozen=True, kw_only=True)
class Context:
    """Settings for one session. Cross-field checks raise `ValueError` naming the conflict and the fix."""

    workdir: str = field(default=".", metadata={"description": "where .evotrainer/ (store, runs) lives"})
    db_url: str = field(default="", metadata={"description": "SQLAlchemy URL of the store; empty = default SQLite"})
    mode: Mode = field(default="evotrainer", metadata={"description": "evotrainer or the score-only baseline"})
    policy: Literal["heuristic", "llm"] = "heuristic"
    llm_model: str = ""
    backend: BackendName = field(
        default=DEFAULT_BACKEND, metadata={"description": f"trains every run: {' | '.join(BACKEND_NAMES)}"}
    )
    ray_address: str = field(
        default="",
        metadata={
            "description": "Ray Jobs URL (http://HEAD:8265): every run of an iteration is a Ray job on that "
            "cluster, submitted together; empty = runs start on this machine"
        },
    )
    sandbox: SandboxMode = "docker"
    gate: Gate = "none"
    seed: int = 0
    base_steps: int = field(default=60, metadata={"description": "training steps of v0 before the first diagnosis"})
    pilot_steps: int = field(default=60, metadata={"description": "training steps of each candidate pilot"})
    max_candidates: int = field(default=3, metadata={"description": "candidates proposed per iteration"})
    max_iterations: int = 4
    max_train_steps: int = field(default=1200, metadata={"description": "total training-step budget"})
    max_wall_s: float = field(
        default=3600.0, metadata={"description": "wall-time budget (s), checked after each iteration"}
    )
    min_effect: float = field(
        default=0.05,
        metadata={"description": "smallest strict-accuracy delta a decision counts (training-seed noise floor)"},
    )
    replicates: int = field(
        default=1,
        metadata={
            "description": "fresh-seed re-runs of the merge candidate and the control before a merge "
            "(training-seed noise); 0 = merge on one seed"
        },
    )
    llm_max_turns: int = field(default=30, metadata={"description": "model calls per propose step (tool loop)"})
    llm_timeout_s: float = field(default=120.0, metadata={"description": "most seconds one model call may take in all"})
    max_llm_tokens: int = field(default=0, metadata={"description": "LLM token budget of the session; 0 = none"})
    max_cost_usd: float = field(default=0.0, metadata={"description": "LLM cost budget (USD); 0 = none"})
    price_per_1k: float | None = field(
        default=None, metadata={"description": "USD per 1k LLM tokens; None = built-in table (0 if unknown)"}
    )
    escalate_after: int = field(
        default=2, metadata={"description": "failed iterations in a row before every gate is on; 0 = never"}
    )

    def __post_init__(self) -> None:
        if self.policy == "llm" and not self.llm_model:
            raise ValueError("policy 'llm' needs a model: pass --llm MODEL")
        if self.base_steps <= 0 or self.pilot_steps <= 0:
            raise ValueError("base_steps and pilot_steps must be positive")
        if self.max_train_steps < self.base_steps:
            raise ValueError(
                f"max_train_steps ({self.max_train_steps}) is below base_steps ({self.base_steps}); raise --max-steps"
            )
        if self.replicates < 0:
            raise ValueError("replicates must be >= 0 (0 = merge on one seed's evidence)")
        if self.max_candidates < 1:
            raise ValueError("max_candidates must be >= 1")
        if (
            self.max_llm_tokens < 0
            or not 0 <= self.max_cost_usd < math.inf
            or not 0 <= (self.price_per_1k or 0) < math.inf
        ):
            raise ValueError("LLM budgets and prices must be finite and >= 0 (0 = no budget)")
        if self.policy == "llm" and self.max_cost_usd > 0 and not has_price(self.llm_model, self.price_per_1k):
            raise ValueError(
                f"--max-cost needs a price for model {self.llm_model!r}, which is not in the price table "
                "(agent/prices.py): pass --price-per-1k USD"
            )
        if self.escalate_after < 0 or self.llm_max_turns < 1:
            raise ValueError("escalate_after must be >= 0 (0 = never) and llm_max_turns >= 1")
        if self.max_wall_s <= 0 or self.llm_timeout_s <= 0:
            raise ValueError("max_wall_s (--max-wall) and llm_timeout_s (--llm-timeout) must be positive seconds")
        if self.backend not in BACKEND_NAMES:
            raise ValueError(f"unknown backend {self.backend!r}: pass --backend {' | '.join(BACKEND_NAMES)}")
        if self.ray_address:
            url = urlparse(self.ray_address)
            if url.scheme not in ("http", "https") or not url.hostname or url.port is None:
                raise ValueError(
                    f"ray_address {self.ray_address!r} is not a Ray Jobs URL: pass --ray-address http://HEAD:PORT "
                    "(the dashboard port, 8265 by default; not a ray:// client address)"
                )

    @property
    def cluster_parallel_runs(self) -> int | None:
        """Graph branches to run at once on a Ray cluster: every run of an iteration (the candidate pilots and
        the control, or the replicate pairs), submitted together; the cluster schedules them and the
        controller only polls. None without a cluster (the session's one-per-core limit applies)."""
        return max(self.max_candidates + 1, 2 * self.replicates) if self.ray_address else None

    @property
    def root(self) -> Path:
        """The `.evotrainer` folder of this workdir."""
        return Path(self.workdir).resolve() / ".evotrainer"

    def session_dir(self, session_id: str) -> Path:
        """Artefact folder of one session (runs, backtests, worktrees)."""
        return self.root / "sessions" / session_id

    def worktrees_root(self, session_id: str) -> Path:
        """Folder the session's candidate worktrees live under (``<it>/<session>/v<i>.<k>-<slug>``)."""
        return self.session_dir(session_id) / "worktrees"
