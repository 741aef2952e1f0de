"""What the meta LLM cost and what it looked up: token/cost accounting, budgets, and the search trace.

Pure part: `call_cost` (the price table of `agent.prices`, or an explicit `--price-per-1k`), `budget_stop`
(which budget, if any, is spent), and what a call is charged: the server's usage report clamped
(`clamp_tokens`), never below a local count of the text that went each way (`estimate_tokens`), since an
endpoint can report anything. Adapter part: thin store helpers that record one call's
usage (`record_usage`), sum a session's usage per node (`usage_by_node`, `session_usage`), and append to /
settle the search trace (`trace_lookup`, `mark_used`). Tokens are always recorded; the cost is 0 when
the model is not in the table and no price was given (the tokens still say what was spent), which is why a
cost budget for such a model is refused at start (`agent.context.Context`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from agent.prices import PRICE_PER_1K


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


MAX_TOKENS_PER_CALL = 10_000_000  # no context window is larger: a report above it is clamped to it
CHARS_PER_TOKEN = 4  # the usual rule of thumb for BPE tokenizers (code and JSON take more tokens, not fewer)


def clamp_tokens(reported: object) -> int:
    """Return a server-reported token count as a sane int: 0 for anything but a non-negative number, capped.

    The report comes from the endpoint (untrusted): negative, NaN, text, bools and absurd values
    (``10**30``) never reach the store or the budget as they are.
    """
    if isinstance(reported, bool) or not isinstance(reported, (int, float)):
        return 0
    if isinstance(reported, float) and not math.isfinite(reported):
        return MAX_TOKENS_PER_CALL if reported > 0 else 0
    return int(min(max(reported, 0), MAX_TOKENS_PER_CALL))


def estimate_tokens(chars: int) -> int:
    """Return a local token count for `chars` characters of text (rounded up; capped like a report)."""
    return min(-(-max(chars, 0) // CHARS_PER_TOKEN), MAX_TOKENS_PER_CALL)


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
    from agent.adapters import ledger
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
    from store.repository import llm_usage_per_node

    return {node: Usage(n, p, c, cost) for node, n, p, c, cost in llm_usage_per_node(db, session_id)}


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
    from agent.adapters import ledger

    with ledger.db(url) as db:
        return total(usage_by_node(db, session_id).values())


def trace_lookup(
    url: str, *, session_id: str, tool: str, query: str, result_summary: str, node: str = "propose"
) -> int:
    """Append one lookup to the search trace (unused until a submitted candidate references it); return its id."""
    from agent.adapters import ledger
    from store.repository import record_search

    with ledger.db(url) as db:
        return record_search(
            db, session_id=session_id, node=node, tool=tool, query=query[:2000], result_summary=result_summary[:2000]
        ).id


def mark_used(url: str, trace_ids: Iterable[int]) -> None:
    """Mark search-trace rows as used (they informed a submitted candidate)."""
    from agent.adapters import ledger
    from store.repository import mark_searches_used

    ids = sorted(set(trace_ids))
    if ids:
        with ledger.db(url) as db:
            mark_searches_used(db, ids)
