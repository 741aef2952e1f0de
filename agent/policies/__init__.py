"""Policies that choose interventions: `heuristic` (offline default) and `llm` (OpenAI-compatible).

Both propose through the same tools and checks (surface, single factor, backtest, decision rule);
neither can bypass them. `explore.py`, `symptoms.py` and `probe_drafts.py` build exploration probes from the
health report's symptoms and the declared knobs; `learning.py` is what a decided candidate teaches the store
(skills learned from wins, probes' negative evidence).
"""
