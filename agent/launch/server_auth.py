"""Who may call a shared LangGraph server, whose threads each caller sees, and what a caller may write.

`langgraph.shared.json` names `auth` below (`langgraph dev --config langgraph.shared.json`, or a server built
from it). Every request must carry `Authorization: Bearer <token>`, one of the tokens the server's owner sets in
`EVOTRAINER_SERVER_TOKENS` (`name:token` pairs, comma-separated) where the server starts. The name is the
caller's identity: each thread (and the runs, state and gates under it) is stamped with its creator and only
its creator reads, searches, runs or deletes it. Assistants (the graph's) may be read by any caller and
changed by none. Fail closed: with no tokens configured every request is refused, naming the variable.

A thread's graph state is written only by the graph: the nodes act on paths and revisions in it, so a client
that wrote it (`POST /threads/{id}/state`, its `/bulk` form, `PATCH /threads/{id}`, all the `threads` resource's
`update` action; a run's `command` with `update` or `goto`) could point them anywhere. A caller creates
threads, starts runs with an input, resumes a gate with `{"resume": ...}` and cancels its own runs; every other
update is refused. (A thread created with `supersteps` writes state without any auth event:
`agent/launch/server_http.py` refuses it before the server sees it.)

No error text carries a value read from `EVOTRAINER_SERVER_TOKENS`: messages name entries by position, and
`scrub` removes every piece of the variable from whatever this module sends back, since an entry written the
wrong way round (`<secret>:alice`) puts the secret where a name belongs.

langgraph.shared.json also sets `disable_studio_auth`: `langgraph dev` otherwise lets any request that says
`x-auth-scheme: langsmith` past the custom handler.
"""

from __future__ import annotations

import hmac
import os
import re
from typing import Any

from langgraph_sdk import Auth

TOKENS_ENV = "EVOTRAINER_SERVER_TOKENS"
OWNER_KEY = "owner"
MIN_TOKEN_CHARS = 16
SCRUBBED = "***"
_MIN_SCRUB_CHARS = 4  # shorter pieces (a one-letter name) would garble every message and reveal nothing
CANCEL_ACTIONS = ("interrupt", "rollback")  # `threads` `update` events of run cancellation carry one

auth = Auth()


class CallerRefused(Exception):
    """A request the token check refuses: the HTTP status and a detail that quotes no token variable value."""

    def __init__(self, status_code: int, detail: str) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.detail = scrub(detail)


def scrub(text: str, raw: str | None = None) -> str:
    """`text` with every entry, name and token of `EVOTRAINER_SERVER_TOKENS` (`raw`) replaced by `***`."""
    raw = os.environ.get(TOKENS_ENV, "") if raw is None else raw
    pieces = {raw.strip()}
    for entry in raw.split(","):
        pieces.add(entry.strip())
        pieces.update(part.strip() for part in re.split(r"[:\s]+", entry))
    for piece in sorted(pieces, key=len, reverse=True):
        if len(piece) >= _MIN_SCRUB_CHARS:
            text = text.replace(piece, SCRUBBED)
    return text


def server_tokens(raw: str | None = None) -> list[tuple[str, str]]:
    """The (name, token) pairs of `EVOTRAINER_SERVER_TOKENS` (`alice:secret1,bob:secret2`).

    Raises:
        ValueError: an entry without a name or token, a token shorter than 16 characters, or a name twice;
            the message names the entry by its position, never by any part of it.
    """
    text = os.environ.get(TOKENS_ENV, "") if raw is None else raw
    pairs: list[tuple[str, str]] = []
    for k, item in enumerate(filter(None, (part.strip() for part in text.split(","))), 1):
        name, sep, token = item.partition(":")
        if not sep or not name.strip() or not token.strip():
            raise ValueError(f"{TOKENS_ENV}: entry {k} is not name:token; write name:token pairs, comma-separated")
        if len(token.strip()) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"{TOKENS_ENV}: the token of entry {k} (after its ':') is shorter than {MIN_TOKEN_CHARS} "
                "characters; write name:token with a long random token"
            )
        pairs.append((name.strip(), token.strip()))
    names = [n for n, _ in pairs]
    for k, name in enumerate(names, 1):
        if name in names[: k - 1]:
            raise ValueError(f"{TOKENS_ENV}: entry {k} repeats an earlier entry's name; give each caller one name")
    return pairs


def identity_of(authorization: str | None, pairs: list[tuple[str, str]]) -> str | None:
    """The name whose token the `Authorization: Bearer <token>` header carries, or None (compared in constant time)."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    found = None
    for name, secret in pairs:
        if hmac.compare_digest(secret.encode(), token.strip().encode()):
            found = name
    return found


def caller_of(authorization: str | None) -> str:
    """The caller's name for an `Authorization` header (the auth handler and `/metrics` use it).

    Raises:
        CallerRefused: 403 when the owner's token setting is missing or malformed, 401 for a missing or wrong token.
    """
    try:
        pairs = server_tokens()
    except ValueError as exc:
        raise CallerRefused(403, str(exc)) from None
    if not pairs:
        raise CallerRefused(
            403, f"this server accepts no caller: its owner sets {TOKENS_ENV}=name:token,... where it starts"
        )
    who = identity_of(authorization, pairs)
    if who is None:
        raise CallerRefused(401, "send Authorization: Bearer <your token>")
    return who


@auth.authenticate
async def authenticate(authorization: str | None) -> str:
    """Accept a request whose bearer token is one the owner configured; its name is the caller's identity."""
    try:
        return caller_of(authorization)
    except CallerRefused as exc:
        raise Auth.exceptions.HTTPException(status_code=exc.status_code, detail=exc.detail) from None


def stamp_owner(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Stamp the caller's name into the value's metadata; return the filter that shows only its threads."""
    owner = {OWNER_KEY: ctx.user.identity}
    if isinstance(value, dict):
        metadata = value.setdefault("metadata", {})
        if isinstance(metadata, dict):
            metadata.update(owner)
    return owner


@auth.on.threads
async def own_threads(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Stamp a new thread with its creator; every other thread action sees only the caller's threads."""
    return stamp_owner(ctx, value)


@auth.on.threads.update
async def only_the_graph_writes_state(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Refuse every thread update but cancelling one's own run: state and metadata writes included."""
    if isinstance(value, dict) and value.get("action") in CANCEL_ACTIONS:
        return stamp_owner(ctx, value)
    raise Auth.exceptions.HTTPException(
        status_code=403,
        detail="a thread's state is written only by the graph on this server: start a run with an input, or "
        "answer a gate with the command {'resume': ...} (docs/studio.md)",
    )


@auth.on.threads.create_run
async def runs_only_resume(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Refuse a run whose `command` writes state or jumps to a node; `{"resume": ...}` answers a gate."""
    kwargs = value.get("kwargs") if isinstance(value, dict) else None
    command = kwargs.get("command") if isinstance(kwargs, dict) else None
    if command is not None and not isinstance(command, dict):
        raise Auth.exceptions.HTTPException(status_code=403, detail="a run's command must be {'resume': ...}")
    writes = sorted(k for k, v in (command or {}).items() if k != "resume" and v is not None)
    if writes:
        raise Auth.exceptions.HTTPException(
            status_code=403,
            detail=f"a run's command may only resume a gate ({{'resume': ...}}); {', '.join(writes)} would write "
            "the thread's state, which only the graph writes on this server (docs/studio.md)",
        )
    return stamp_owner(ctx, value)


@auth.on.assistants
async def assistants_are_the_owners(ctx: Auth.types.AuthContext, value: Any) -> None:
    """The graph's assistants are the server owner's: a caller may read and search them, never change them."""
    if ctx.action not in ("read", "search"):
        raise Auth.exceptions.HTTPException(status_code=403, detail="assistants are the server owner's: read-only")


@auth.on.crons
async def no_crons(ctx: Auth.types.AuthContext, value: Any) -> None:
    """Scheduled runs would start sessions nobody watches: refused on a shared server."""
    raise Auth.exceptions.HTTPException(status_code=403, detail="scheduled runs are off on this server")


@auth.on.store
async def no_store(ctx: Auth.types.AuthContext, value: Any) -> None:
    """The server's key-value store holds nothing a caller needs: refused on a shared server."""
    raise Auth.exceptions.HTTPException(status_code=403, detail="the key-value store is off on this server")
