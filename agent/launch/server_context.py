"""Settings of a run the LangGraph server starts for a client: the owner decides, the client chooses within.

`langgraph dev` hands the run's `context` (any client's JSON: the SDK, Studio, a web page in a local
browser) to the graph, and LangGraph builds the graph's context schema from it (`context_schema(**context)`).
The graph langgraph.json serves (`agent.graph.graph`) has `ServerContext` as that schema, so its
constructor is the one place a server-run context becomes session settings (issue 25 §1):

- a client may set only the fields in `CLIENT_FIELDS` (budgets, gates, policy); any other key is refused
  with an error naming it, never dropped;
- where code runs and where data and credentials go (`workdir`, `db_url`, `backend`, `ray_address`,
  `sandbox`) come from the server's own environment (`OWNER_ENV`, set where the server starts, e.g. in the
  `.env` file langgraph.json's `env` names); `sandbox` is `docker` or `process`, never `none`;
- a client may start a session only from a harness under the owner's `EVOTRAINER_SERVER_HARNESS_ROOTS`
  (`check_client_input`, called by the `setup` node) and may not name the repository.

The CLI builds a plain `Context` from its owner's own flags and never comes here. The context schema the
server publishes lists only `CLIENT_FIELDS`, under `allOf` rather than top-level `properties`: the server
drops a context key missing from top-level `properties` before the graph sees it (`langgraph_api.stream.
_filter_context_by_schema`), and a dropped key could not be refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from agent.context import Context
from agent.launch.input_checks import SetupError

# Every Context field a client may choose; the rest are the owner's (`OWNER_ENV`).
CLIENT_FIELDS = (
    "gate", "mode", "policy", "llm_model", "seed", "base_steps", "pilot_steps", "max_candidates",
    "max_iterations", "max_train_steps", "max_wall_s", "min_effect", "replicates", "llm_max_turns",
    "llm_timeout_s", "max_llm_tokens", "max_cost_usd", "price_per_1k", "escalate_after",
)  # fmt: skip
OWNER_ENV = {
    "workdir": "EVOTRAINER_SERVER_WORKDIR",  # default: `default_workdir`, outside the folder the server serves
    "db_url": "EVOTRAINER_SERVER_DB_URL",  # default: the SQLite store under the workdir
    "backend": "EVOTRAINER_SERVER_BACKEND",  # default: local
    "ray_address": "EVOTRAINER_SERVER_RAY_ADDRESS",  # default: none (runs start on the server's machine)
    "sandbox": "EVOTRAINER_SERVER_SANDBOX",  # docker (default) | process
}
HARNESS_ROOTS_ENV = "EVOTRAINER_SERVER_HARNESS_ROOTS"  # os.pathsep-separated folders; unset: no harness allowed
SERVER_SANDBOXES = ("docker", "process")
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


class ClientContextError(ValueError):
    """A client's run context asks for something only the server's owner decides."""


@dataclass(frozen=True, kw_only=True, init=False)
class ServerContext(Context):
    """`Context` of a run the LangGraph server starts: the owner's settings plus the client's allowed choices."""

    harness_roots: tuple[str, ...] = field(default=(), metadata={"description": "folders a client harness lies in"})

    def __init__(self, **client: Any) -> None:
        """Build the settings from the server's environment and the client's `context` (keyword arguments).

        Raises:
            ClientContextError: a key outside `CLIENT_FIELDS`, naming it and what the owner configures instead.
            ValueError: a client value of the wrong type or out of range (pydantic's or `Context`'s message).
        """
        refuse_client_keys(client)
        from pydantic import TypeAdapter  # a run-time check of JSON values: Context itself trusts its callers

        checked = TypeAdapter(Context).validate_python({**owner_settings(os.environ), **client})
        super().__init__(**{f.name: getattr(checked, f.name) for f in fields(Context)})
        object.__setattr__(self, "harness_roots", tuple(str(p) for p in harness_roots(os.environ)))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sandbox not in SERVER_SANDBOXES:
            raise ClientContextError(
                f"{OWNER_ENV['sandbox']}={self.sandbox!r}: the server runs harnesses only in a sandbox; "
                f"set it to {' or '.join(SERVER_SANDBOXES)}"
            )

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        """The schema the server publishes (Studio's form): the client's fields only, under `allOf` (module doc)."""
        schema = dict(handler.resolve_ref_schema(handler(core_schema)))
        schema["properties"] = {k: v for k, v in schema["properties"].items() if k in CLIENT_FIELDS}
        schema.pop("required", None)
        schema["additionalProperties"] = False
        return {"type": "object", "title": "ServerContext", "allOf": [schema]}


def refuse_client_keys(client: Mapping[str, Any]) -> None:
    """Refuse every key a client may not set, naming it and what the server's owner can configure instead."""
    for key in client:
        if key in CLIENT_FIELDS:
            continue
        if key in OWNER_ENV:
            raise ClientContextError(
                f"context field {key!r} is decided by the server's owner, not by a client: the owner sets "
                f"{OWNER_ENV[key]} where the server starts (docs/studio.md); remove {key!r} from the context"
            )
        raise ClientContextError(
            f"unknown context field {key!r}: a client may set {', '.join(CLIENT_FIELDS)} (docs/studio.md)"
        )


def owner_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The owner's settings from the server's environment (`OWNER_ENV`); unset variables keep the defaults,
    except the workdir (`default_workdir`)."""
    return {"workdir": str(default_workdir(environ))} | {
        name: environ[var] for name, var in OWNER_ENV.items() if environ.get(var)
    }


def default_workdir(environ: Mapping[str, str]) -> Path:
    """Where server sessions live when the owner names no workdir: `$XDG_STATE_HOME/evotrainer/server`
    (`~/.local/state/...`), outside the folder `langgraph dev` serves and watches. Sessions write Python files
    (the session repository, candidate worktrees); inside the watched folder each one restarted the server
    mid-run (issue 26 §3). An owner who puts the workdir inside it serves with `--no-reload` (docs/studio.md)."""
    state = environ.get("XDG_STATE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".local" / "state")
    return Path(state).expanduser() / "evotrainer" / "server"


def harness_roots(environ: Mapping[str, str]) -> list[Path]:
    """The folders a client's harness must lie in (`EVOTRAINER_SERVER_HARNESS_ROOTS`), resolved."""
    return [Path(p).expanduser().resolve() for p in environ.get(HARNESS_ROOTS_ENV, "").split(os.pathsep) if p]


def check_client_input(ctx: ServerContext, harness: str | None, repo: str | None, session_id: str) -> None:
    """Refuse a client's graph input that would leave the owner's folders (the `setup` node calls this).

    Raises:
        SetupError: a `repo`, a session id that is not a plain name, or a harness outside the harness roots.
    """
    if repo is not None:
        raise SetupError(
            "'repo' is decided by the server, not by a client: remove it from the input (the session's repository "
            f"is created under the server's workdir {ctx.workdir})"
        )
    if not SESSION_ID.fullmatch(session_id):
        raise SetupError(f"session id {session_id!r} is not a plain name: use letters, digits, '.', '_' and '-'")
    if harness is None:
        return
    roots = [Path(p) for p in ctx.harness_roots]
    if not roots:
        raise SetupError(
            f"this server accepts no harness from a client: its owner lists the allowed harness folders in "
            f"{HARNESS_ROOTS_ENV} (docs/studio.md)"
        )
    path = (Path(ctx.workdir) / harness).resolve()
    if not any(path.is_relative_to(root) for root in roots):
        raise SetupError(
            f"harness {harness!r} ({path}) is not under the server's harness roots "
            f"{', '.join(map(str, roots))}: name a harness inside one (its owner sets {HARNESS_ROOTS_ENV})"
        )
