"""What the meta LLM cost and what it looked up: token/cost accounting, budgets, and the search trace.

Pure part: `call_cost` (a small per-model price table, or an explicit `--price-per-1k`) and
`budget_stop` (which budget, if any, is spent). Adapter part: thin store helpers that record one call's
usage (`record_usage`), sum a session's usage per node (`usage_by_node`, `session_usage`), and append to /
settle the search trace (`trace_lookup`, `mark_used`). Tokens are always recorded; the cost is 0 when
the model is not in the table and no price was given (the tokens still say what was spent).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# USD per 1k tokens (prompt, completion). Small on purpose: pass --price-per-1k for anything else.
PRICE_PER_1K: Mapping[str, tuple[float, float]] = {
    "gpt-4o": (0.0025, 0.01),
    "gpt-4o-mini": (0.00015, 0.0006),
    "gpt-4.1": (0.002, 0.008),
    "gpt-4.1-mini": (0.0004, 0.0016),
    "gpt-4.1-nano": (0.0001, 0.0004),
    "o3-mini": (0.0011, 0.0044),
    "o4-mini": (0.0011, 0.0044),
}


@dataclass(frozen=True)
class Usage:
    """Tokens and cost summed over some LLM calls."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


def call_cost(model: str, prompt_tokens: int, completion_tokens: int, price_per_1k: float | None = None) -> float:
    """Return the USD cost of one call: the explicit price (prompt and completion alike), the table, or 0."""
    if price_per_1k is not None:
        return (prompt_tokens + completion_tokens) * price_per_1k / 1000.0
    prompt_price, completion_price = PRICE_PER_1K.get(model, (0.0, 0.0))
    return (prompt_tokens * prompt_price + completion_tokens * completion_price) / 1000.0


def budget_stop(spent: Usage, max_tokens: int, max_cost_usd: float) -> str:
    """Return why the LLM budget is spent (tokens or cost; 0 = unlimited), or "" while there is budget."""
    if max_tokens > 0 and spent.total_tokens >= max_tokens:
        return f"LLM token budget spent ({spent.total_tokens}/{max_tokens} tokens)"
    if max_cost_usd > 0 and spent.cost_usd >= max_cost_usd:
        return f"LLM cost budget spent (${spent.cost_usd:.4f}/${max_cost_usd:.4f})"
    return ""


# --- store adapter -------------------------------------------------------------------------------------


def record_usage(url: str, *, session_id: str, node: str, model: str, prompt_tokens: int, completion_tokens: int,
                 cost_usd: float) -> None:  # fmt: skip
    """Store one call's tokens and cost."""
    from agent import ledger
    from store.repository import add_llm_usage

    with ledger.db(url) as db:
        add_llm_usage(
            db,
            session_id=session_id,
            node=node,
            model=model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=cost_usd,
        )


def usage_by_node(db: Any, session_id: str) -> dict[str, Usage]:
    """Return the session's LLM usage per node (from an open store session)."""
    from sqlalchemy import func, select

    from store.models import LLMUsage

    query = (
        select(
            LLMUsage.node,
            func.count(LLMUsage.id),
            func.coalesce(func.sum(LLMUsage.prompt_tokens), 0),
            func.coalesce(func.sum(LLMUsage.completion_tokens), 0),
            func.coalesce(func.sum(LLMUsage.cost_usd), 0.0),
        )
        .where(LLMUsage.session_id == session_id)
        .group_by(LLMUsage.node)
    )
    return {node: Usage(int(n), int(p), int(c), float(cost)) for node, n, p, c, cost in db.execute(query)}


def total(usages: Iterable[Usage]) -> Usage:
    """Sum usages."""
    items = list(usages)
    return Usage(
        sum(u.calls for u in items),
        sum(u.prompt_tokens for u in items),
        sum(u.completion_tokens for u in items),
        sum(u.cost_usd for u in items),
    )


def session_usage(url: str, session_id: str) -> Usage:
    """Return the session's total LLM usage."""
    from agent import ledger

    with ledger.db(url) as db:
        return total(usage_by_node(db, session_id).values())


def trace_lookup(
    url: str, *, session_id: str, tool: str, query: str, result_summary: str, node: str = "propose"
) -> int:
    """Append one lookup to the search trace (unused until a submitted candidate references it); return its id."""
    from agent import ledger
    from store.repository import record_search

    with ledger.db(url) as db:
        return record_search(
            db, session_id=session_id, node=node, tool=tool, query=query[:2000], result_summary=result_summary[:2000]
        ).id


def mark_used(url: str, trace_ids: Iterable[int]) -> None:
    """Mark search-trace rows as used (they informed a submitted candidate)."""
    from sqlalchemy import select

    from agent import ledger
    from store.models import SearchTrace

    ids = sorted(set(trace_ids))
    if not ids:
        return
    with ledger.db(url) as db:
        for row in db.scalars(select(SearchTrace).where(SearchTrace.id.in_(ids))):
            row.used = True
