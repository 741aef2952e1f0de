"""Who may act on a session, and which paths and revisions of it graph state may name.

A LangGraph server lets a client write its own thread's state (`POST /threads/{id}/state`) and continue the
run, so on a server the graph state is client input. Every node that acts on a session therefore starts with
`trusted_session(ctx, state)`, which takes the session from the store (written by the owner's process):

- the session must exist and, on a server, belong to the caller (`sessions.owner`: the authenticated
  identity on a shared server, none on the open dev server and for the CLI); another caller's session is
  refused with exactly the message of a missing one, so the refusal tells nothing about which ids exist;
- `harness_dir` must be the session's repository as the store records it;
- the incumbent's commit must be a commit of that repository and the one the store's version ledger holds
  for its index; candidate branches must be the session's own ``evo/<session>/...`` branches;
- every run folder, checkpoint, report and worktree the state names must lie inside the session's own
  folder (resolved, so a link cannot lead out of it).

A value that fails raises `StateRefused` naming the field: nothing is read, written, loaded or trained.
The owner's own process (the CLI, whose context is not a `ServerContext`) may act on any session of its store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.adapters import ledger
from agent.context import Context
from agent.launch.input_checks import SetupError
from sandboxes import git_revisions as gr

AUTH_USER_KEY = "langgraph_auth_user_id"  # where the LangGraph server puts the authenticated caller


class StateRefused(SetupError):
    """Graph state that names another session, repository, revision or folder (the message names the field)."""


def missing_session(session_id: str) -> str:
    """The one refusal for a session id that does not exist or belongs to another caller."""
    return (
        f"no session {session_id} in the store, and no harness to create it from: pass 'harness', the path "
        'of a harness folder holding evotrainer.yaml (e.g. {"harness": "examples/skeleton"})'
    )


def caller(ctx: Context) -> str | None:
    """The caller a node runs for: None for the owner's own process, else the server's caller ('' anonymous)."""
    from langgraph.config import get_config

    from agent.launch.server_context import ServerContext

    if not isinstance(ctx, ServerContext):
        return None
    try:
        who = (get_config().get("configurable") or {}).get(AUTH_USER_KEY)
    except RuntimeError:  # outside a run: no authenticated caller, so only sessions nobody owns
        return ""
    return str(who) if who else ""


def may_use(who: str | None, owner: str | None) -> bool:
    """Whether `who` (see `caller`) may act on a session that `owner` created (None: the owner's process)."""
    return who is None or (owner or "") == who


@dataclass(frozen=True)
class TrustedSession:
    """A session as the store records it: the paths and revisions nodes act on come from here."""

    session_id: str
    repo: Path
    folder: Path  # the session's own folder (resolved): runs, backtests, worktrees

    def commit(self, rev: object, field: str) -> str:
        """The full id of a commit of the session repository (`StateRefused` naming `field` otherwise)."""
        try:
            return gr.verified_commit(self.repo, rev, field)
        except gr.RevisionError as exc:
            raise StateRefused(str(exc)) from None

    def branch_commit(self, branch: object, field: str) -> str:
        """The tip of one of the session's own branches (`StateRefused` naming `field` otherwise)."""
        try:
            return gr.session_branch_commit(self.repo, self.session_id, branch, field)
        except gr.RevisionError as exc:
            raise StateRefused(str(exc)) from None

    def inside(self, path: object, sub: str, field: str) -> Path:
        """`path` resolved, which must lie under the session's folder `sub` (``runs``, ``backtests``, ...)."""
        base = self.folder / sub
        if not isinstance(path, str) or not path or "\0" in path:
            raise StateRefused(f"{field} must be a path under {base}, got {path!r:.80}")
        resolved = Path(path).resolve()
        if not resolved.is_relative_to(base):
            raise StateRefused(f"{field} {path!r:.200} is not inside session {self.session_id}'s folder {base}")
        return resolved


def trusted_session(ctx: Context, values: Mapping[str, Any]) -> TrustedSession:
    """The session `values` (graph state or a fan-out payload) names, after checking everything it names.

    Raises:
        StateRefused: a missing or foreign session, or a field that leaves the session (the message names it).
    """
    from store.repository import session_access, session_ledger, session_repo_path

    session_id, who = values.get("session_id"), caller(ctx)
    if not isinstance(session_id, str) or not session_id:
        raise StateRefused(f"session_id must be a session id, got {session_id!r:.80}")
    with ledger.db(ledger.store_url(ctx)) as db:
        if who is None:  # the owner's process: also a store whose schema still needs a migration
            repo_path, owner = session_repo_path(db, session_id), None
        else:
            repo_path, owner = session_access(db, session_id) or (None, None)
        if repo_path is None or not may_use(who, owner):
            raise StateRefused(missing_session(session_id))
        ledger_rows = {v.index: (v.commit_sha, v.run_id) for v in session_ledger(db, session_id)}
    trusted = TrustedSession(session_id, Path(repo_path).resolve(), ctx.session_dir(session_id).resolve())
    harness_dir = values.get("harness_dir")
    if harness_dir is not None and (not isinstance(harness_dir, str) or Path(harness_dir).resolve() != trusted.repo):
        raise StateRefused(
            f"harness_dir {harness_dir!r:.200} is not the repository of session {session_id} ({trusted.repo})"
        )
    _check_version(trusted, values.get("version"), ledger_rows)
    _check_folders(trusted, values)
    return trusted


def _check_version(trusted: TrustedSession, version: Any, ledger_rows: Mapping[int, tuple[str, str | None]]) -> None:
    if not version:
        return
    if not isinstance(version, Mapping):
        raise StateRefused("version must be the incumbent version's record")
    commit = trusted.commit(version.get("commit"), "version.commit")
    recorded = ledger_rows.get(version.get("index"))  # type: ignore[arg-type]
    if recorded is not None and (commit != recorded[0] or version.get("run_id") != recorded[1]):
        raise StateRefused(
            f"version (v{version.get('index')}, commit {str(version.get('commit'))[:12]}, run "
            f"{version.get('run_id')!r:.80}) is not what session {trusted.session_id}'s version ledger records"
        )
    for key in ("run_dir", "checkpoint", "start_checkpoint"):
        if version.get(key):
            trusted.inside(version[key], "runs", f"version.{key}")


def _check_folders(trusted: TrustedSession, values: Mapping[str, Any]) -> None:
    """Every folder, checkpoint, report, worktree and branch the state names lies inside the session."""
    rollback = values.get("rollback") or {}
    if isinstance(rollback, Mapping) and rollback.get("checkpoint"):
        trusted.inside(rollback["checkpoint"], "runs", "rollback.checkpoint")
    for pilot in _records(values, "pilots"):
        for key in ("run_dir", "checkpoint", "init_checkpoint"):
            if pilot.get(key):
                trusted.inside(pilot[key], "runs", f"pilots[].{key}")
    for bt in _records(values, "backtests"):
        if bt.get("report_path"):
            trusted.inside(bt["report_path"], "backtests", "backtests[].report_path")
    payload_candidate = values.get("candidate")
    candidates = [*_records(values, "candidates"), *([payload_candidate] if payload_candidate else [])]
    prefix = f"evo/{trusted.session_id}/"
    for cand in candidates:
        if not isinstance(cand, Mapping):
            raise StateRefused("candidates[] must be candidate records")
        if cand.get("worktree"):
            trusted.inside(cand["worktree"], "worktrees", "candidates[].worktree")
        branch = cand.get("branch")
        if branch and (not isinstance(branch, str) or not branch.startswith(prefix) or ".." in branch):
            raise StateRefused(f"candidates[].branch {branch!r:.80} is not a branch of session {trusted.session_id}")


def _records(values: Mapping[str, Any], key: str) -> Iterable[Mapping[str, Any]]:
    items = values.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
        raise StateRefused(f"{key} must be a list of records")
    return items
