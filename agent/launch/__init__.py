"""Starting a session, from the CLI or the LangGraph server, before the graph runs.

Input checks before anything is created (`input_checks.py`), the backend preflight and dry run
(`preflight.py`), which repository a session works in (`repos.py`), creating a session idempotently
(`bootstrap.py`), the durable checkpointer of `langgraph dev` (`persistence.py`), what a LangGraph-server
client may choose (`server_context.py`) and, on a shared server (`langgraph.shared.json`), who may call and
whose threads each caller sees (`server_auth.py`); who may act on a session and which of its paths and
revisions graph state may name, from the store's record of it (`session_guard.py`). Compiling and running
the graph is `agent/session.py`.
"""
