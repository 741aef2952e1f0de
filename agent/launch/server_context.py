"""Settings of a run the LangGraph server starts for a client: the owner decides, the client chooses within.

`langgraph dev` hands the run's `context` (any client's JSON: the SDK, Studio, a web page in a local
browser) to the graph, and LangGraph builds the graph's context schema from it (`context_schema(**context)`).
The graph langgraph.json serves (`agent.graph.graph`) has `ServerContext` as that schema, so its
constructor is the one place a server-run context becomes session settings:

- a client may set only the fields in `CLIENT_FIELDS` (budgets, gates, policy); any other key is refused
  with an error naming it, never dropped;
- where code runs and where data and credentials go (`workdir`, `db_url`, `backend`, `ray_address`,
  `sandbox`) come from the server's own environment (`OWNER_ENV`, set where the server starts, e.g. in the
  `.env` file langgraph.json's `env` names); `sandbox` is `docker` or `process`, never `none`;
- a client may start a session only from a harness under the owner's `EVOTRAINER_SERVER_HARNESS_ROOTS`
  (`check_client_input`, called by the `setup` node) and may not name the repository;
- the budgets a client chooses (training steps, iterations, candidates, replicates, model turns and call
  timeout, wall time, LLM tokens and cost) stay within the owner's caps (`BUDGET_CAPS`, each an
  `EVOTRAINER_SERVER_MAX_*` variable with a default): a value above its cap is refused naming the field and
  the cap, and a field the client leaves out takes the smaller of its default and the cap. "0 = no budget"
  is above every cap. The price of the owner's LLM key is the owner's (`EVOTRAINER_SERVER_PRICE_PER_1K`).

The CLI builds a plain `Context` from its owner's own flags and never comes here. The context schema the
server publishes lists only `CLIENT_FIELDS`, under `allOf` rather than top-level `properties`: the server
drops a context key missing from top-level `properties` before the graph sees it (`langgraph_api.stream.
_filter_context_by_schema`), and a dropped key could not be refused.
"""

from __future__ import annotations

import math
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
    "llm_timeout_s", "max_llm_tokens", "max_cost_usd", "escalate_after",
)  # fmt: skip
OWNER_ENV = {
    "workdir": "EVOTRAINER_SERVER_WORKDIR",  # default: `default_workdir`, outside the folder the server serves
    "db_url": "EVOTRAINER_SERVER_DB_URL",  # default: the SQLite store under the workdir
    "backend": "EVOTRAINER_SERVER_BACKEND",  # default: local
    "ray_address": "EVOTRAINER_SERVER_RAY_ADDRESS",  # default: none (runs start on the server's machine)
    "sandbox": "EVOTRAINER_SERVER_SANDBOX",  # docker (default) | process
    "price_per_1k": "EVOTRAINER_SERVER_PRICE_PER_1K",  # default: the built-in price table (agent/prices.py)
}
# The owner's caps on a client's budgets: field -> (variable, default cap; None = no cap unless set).
BUDGET_CAPS: dict[str, tuple[str, float | None]] = {
    "base_steps": ("EVOTRAINER_SERVER_MAX_TRAIN_STEPS", 2400),
    "pilot_steps": ("EVOTRAINER_SERVER_MAX_TRAIN_STEPS", 2400),
    "max_train_steps": ("EVOTRAINER_SERVER_MAX_TRAIN_STEPS", 2400),
    "max_iterations": ("EVOTRAINER_SERVER_MAX_ITERATIONS", 8),
    "max_candidates": ("EVOTRAINER_SERVER_MAX_CANDIDATES", 6),
    "replicates": ("EVOTRAINER_SERVER_MAX_REPLICATES", 3),
    "llm_max_turns": ("EVOTRAINER_SERVER_MAX_LLM_TURNS", 60),
    "llm_timeout_s": ("EVOTRAINER_SERVER_MAX_LLM_TIMEOUT_S", 300),
    "max_wall_s": ("EVOTRAINER_SERVER_MAX_WALL_S", 4 * 3600),
    "max_llm_tokens": ("EVOTRAINER_SERVER_MAX_LLM_TOKENS", 2_000_000),
    "max_cost_usd": ("EVOTRAINER_SERVER_MAX_COST_USD", None),
}
ZERO_IS_UNLIMITED = ("max_llm_tokens", "max_cost_usd")  # Context's "0 = no budget" fields
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
            ClientContextError: a key outside `CLIENT_FIELDS`, naming it and what the owner configures instead,
                or a budget above the owner's cap, naming the field and the cap.
            ValueError: a client value of the wrong type or out of range (pydantic's or `Context`'s message).
        """
        refuse_client_keys(client)
        from pydantic import TypeAdapter  # a run-time check of JSON values: Context itself trusts its callers

        caps = budget_caps(os.environ)
        checked = TypeAdapter(Context).validate_python(
            {**owner_settings(os.environ), **capped_defaults(caps), **client}
        )
        refuse_over_caps({name: getattr(checked, name) for name in client}, caps)
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


def budget_caps(environ: Mapping[str, str]) -> dict[str, float]:
    """The owner's cap on each capped budget field (`BUDGET_CAPS`, overridden by its variable where set).

    Raises:
        ValueError: a cap variable that is not a positive number, naming it.
    """
    caps: dict[str, float] = {}
    for name, (var, default) in BUDGET_CAPS.items():
        raw = environ.get(var, "").strip()
        if not raw:
            if default is not None:
                caps[name] = default
            continue
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not 0 < value < math.inf:
            raise ValueError(f"{var}={raw!r} is not a positive number: set it to the largest {name} a client may ask")
        caps[name] = value
    return caps


def capped_defaults(caps: Mapping[str, float]) -> dict[str, float]:
    """The value of each capped field a client leaves out: its `Context` default, lowered to the cap."""
    defaults = {f.name: f.default for f in fields(Context)}
    out: dict[str, float] = {}
    for name, cap in caps.items():
        default = defaults[name]
        assert isinstance(default, int | float), name
        out[name] = cap if name in ZERO_IS_UNLIMITED and default == 0 else min(default, cap)
        if isinstance(default, int):
            out[name] = int(out[name])
    return out


def refuse_over_caps(chosen: Mapping[str, Any], caps: Mapping[str, float]) -> None:
    """Refuse a client's budget above the owner's cap, naming the field, the cap and the owner's variable."""
    for name, value in chosen.items():
        if name not in caps:
            continue
        cap, var = caps[name], BUDGET_CAPS[name][0]
        shown = _number(cap)
        if name in ZERO_IS_UNLIMITED and value == 0:
            raise ClientContextError(
                f"context field {name!r} = 0 asks for no budget, and this server caps it at {shown}: ask for at "
                f"most {shown} (the server's owner sets {var}; docs/studio.md)"
            )
        if value > cap:
            raise ClientContextError(
                f"context field {name!r} = {_number(value)} is above this server's cap {shown}: ask for at most "
                f"{shown} (the server's owner sets {var}; docs/studio.md)"
            )


def _number(value: float) -> str:
    """A budget as a person writes it: `2400`, `0.5`, never `2.4e+03`."""
    return str(int(value)) if float(value).is_integer() else str(value)


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
    mid-run. An owner who puts the workdir inside it serves with `--no-reload` (docs/studio.md)."""
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
