"""Who may call a shared LangGraph server, and whose threads each caller sees (issue 25 §1).

`langgraph.shared.json` names `auth` below (`langgraph dev --config langgraph.shared.json`, or a server built
from it). Every request must carry `Authorization: Bearer <token>`, one of the tokens the server's owner sets in
`EVOTRAINER_SERVER_TOKENS` (`name:token` pairs, comma-separated) where the server starts. The name is the
caller's identity: each thread (and the runs, state and gates under it) is stamped with its creator and only
its creator reads, searches, updates, runs or deletes it. Assistants (the graph's) may be read by any caller and
changed by none. Fail closed: with no tokens configured every request is refused, naming the variable.

langgraph.shared.json also sets `disable_studio_auth`: `langgraph dev` otherwise lets any request that says
`x-auth-scheme: langsmith` past the custom handler.
"""

from __future__ import annotations

import hmac
import os
from typing import Any

from langgraph_sdk import Auth

TOKENS_ENV = "EVOTRAINER_SERVER_TOKENS"
OWNER_KEY = "owner"

auth = Auth()


def server_tokens(raw: str | None = None) -> list[tuple[str, str]]:
    """The (name, token) pairs of `EVOTRAINER_SERVER_TOKENS` (`alice:secret1,bob:secret2`).

    Raises:
        ValueError: a pair without a name or token, a token shorter than 16 characters, or a name twice.
    """
    text = os.environ.get(TOKENS_ENV, "") if raw is None else raw
    pairs: list[tuple[str, str]] = []
    for k, item in enumerate(filter(None, (part.strip() for part in text.split(","))), 1):
        name, sep, token = item.partition(":")
        if not sep or not name.strip() or not token.strip():  # never echo the entry: it may be a bare token
            raise ValueError(f"{TOKENS_ENV}: entry {k} is not name:token; write name:token pairs, comma-separated")
        if len(token.strip()) < 16:
            why = "is shorter than 16 characters; use a long random one"
            raise ValueError(f"{TOKENS_ENV}: the token of {name.strip()!r} {why}")
        pairs.append((name.strip(), token.strip()))
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        raise ValueError(f"{TOKENS_ENV}: a name appears twice; give each caller one name")
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


@auth.authenticate
async def authenticate(authorization: str | None) -> str:
    """Accept a request whose bearer token is one the owner configured; its name is the caller's identity."""
    try:
        pairs = server_tokens()
    except ValueError as exc:
        raise Auth.exceptions.HTTPException(status_code=403, detail=str(exc)) from None
    if not pairs:
        detail = f"this server accepts no caller: its owner sets {TOKENS_ENV}=name:token,... where it starts"
        raise Auth.exceptions.HTTPException(status_code=403, detail=detail)
    who = identity_of(authorization, pairs)
    if who is None:
        raise Auth.exceptions.HTTPException(status_code=401, detail="send Authorization: Bearer <your token>")
    return who


@auth.on.threads
async def own_threads(ctx: Auth.types.AuthContext, value: Any) -> dict[str, str]:
    """Stamp a new thread with its creator; every other thread action sees only the caller's threads."""
    owner = {OWNER_KEY: ctx.user.identity}
    if isinstance(value, dict):
        metadata = value.setdefault("metadata", {})
        if isinstance(metadata, dict):
            metadata.update(owner)
    return owner


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
