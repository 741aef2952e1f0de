"""Policies that choose interventions: `heuristic` (offline default) and `llm` (OpenAI-compatible).

Both propose through the same tools and checks (surface, single factor, backtest, decision rule);
neither can bypass them.
"""
