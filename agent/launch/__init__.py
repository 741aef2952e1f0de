"""Starting a session, from the CLI or the LangGraph server, before the graph runs.

Input checks before anything is created (`input_checks.py`), the backend preflight and dry run
(`preflight.py`), which repository a session works in (`repos.py`), creating a session idempotently
(`bootstrap.py`), the durable checkpointer of `langgraph dev` (`persistence.py`), what a LangGraph-server
client may choose within the owner's caps (`server_context.py`), what reaches either server at all (host
names, JSON bodies: `server_http.py`) and, on a shared server (`langgraph.shared.json`), who may call, whose
threads each caller sees and that no caller writes graph state (`server_auth.py`); who may act on a session
and which of its paths and revisions graph state may name, from the store's record of it
(`session_guard.py`). Compiling and running the graph is `agent/session.py`.
"""
