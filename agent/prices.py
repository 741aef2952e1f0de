"""The LLM price table and whether a model can be priced (pure; no imports from the rest of `agent`).

Kept apart from `agent.llm.accounting` (which reaches the store) so that `agent.context` can refuse a cost
budget it could never enforce without an import circle.
"""

from __future__ import annotations

from collections.abc import Mapping

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


def has_price(model: str, price_per_1k: float | None) -> bool:
    """Say whether a call of `model` can be priced: an explicit price, or the model is in the table."""
    return price_per_1k is not None or model in PRICE_PER_1K
