"""The meta LLM's side of the campaign: its tools, its prompts and what it costs.

The tools it calls (`tools.py` registers them; `tool_base.py` is what every tool stands on; `tool_reading.py`
reads evidence, `tool_editing.py` edits candidate worktrees, `tool_args.py` checks arguments), the prompts
(`prompts.py`) and token and cost accounting with its caps (`accounting.py`; the price table is
`agent/prices.py`). What of a run the model may see is `agent/adapters/held_out.py`; the policy that drives
the model is `agent/policies/llm.py`.
"""
