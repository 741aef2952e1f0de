"""setup: the graph's first step; creates the session (repository, store, session row) when it does not exist.

A LangGraph Studio or SDK user starts a session with only `{"harness": PATH}` as input (settings in the
run's `context`, docs/studio.md); the CLI creates its sessions before the graph starts, so for it this
node only confirms the session exists. A `resume` after a kill before the first checkpoint lands here
too and finishes the set-up (`agent.launch.bootstrap.ensure_session` is idempotent).

Bad input raises `SetupError` (a `ValueError`), whose message the LangGraph server passes to the client
as it is: the file or field and the fix, never "An internal error occurred".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.config import get_config
from langgraph.runtime import Runtime

from agent.context import Context
from agent.launch.bootstrap import ensure_session, new_session_id
from agent.launch.input_checks import SetupError
from agent.launch.server_context import ServerContext, check_client_input
from agent.launch.session_guard import caller
from agent.state import State

CHOSEN_ID_REFUSED = (
    "on a shared server a session's id is its thread's id: leave 'session_id' out of the input (a new thread "
    "starts a new session; the thread of a session continues it)"
)


def setup(state: State, runtime: Runtime[Context]) -> dict[str, Any]:
    """Return `session_id` and `harness_dir` of the session, creating it from `harness` when needed."""
    thread_id = str((get_config().get("configurable") or {}).get("thread_id") or "")
    session_id = state.get("session_id") or thread_id or new_session_id()
    harness = state.get("harness") or state.get("harness_dir")  # harness_dir: a session created by its caller
    repo = state.get("repo")
    if not isinstance(harness, (str, type(None))) or not isinstance(repo, (str, type(None))):
        raise SetupError("'harness' and 'repo' in the input must be folder paths (strings)")
    if isinstance(runtime.context, ServerContext):  # a client's input: only a harness under the owner's roots
        harness = state.get("harness")  # never a client's `harness_dir`: an existing session is found by its id
        check_client_input(runtime.context, harness, repo, session_id)
        if caller(runtime.context) and thread_id and session_id != thread_id:
            # a shared server: whether a chosen id is free or another caller's would tell ids apart
            raise SetupError(CHOSEN_ID_REFUSED)
    root = ensure_session(runtime.context, session_id, Path(harness) if harness else None, Path(repo) if repo else None)
    return {"session_id": session_id, "harness_dir": str(root)}
