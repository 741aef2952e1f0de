"""The graph the LangGraph server runs takes from a client only what the server's owner allows.

Drives `agent.graph.graph` (the entry point langgraph.json serves) with client-shaped JSON contexts, as the
server does (`context_schema(**context)`): every `Context` field is either a client's choice or the owner's
(set in the server's environment), owner fields and unknown keys are refused with an error naming them,
and a harness outside the owner's roots, a client's `repo` or a path-like session id never reach set-up.
The real-server version is tests/integration/test_studio_client_cannot_choose_owner_settings.py.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from agent.context import Context
from agent.graph import builder, graph
from agent.launch.input_checks import SetupError
from agent.launch.server_context import CLIENT_FIELDS, HARNESS_ROOTS_ENV, OWNER_ENV, ClientContextError, ServerContext


@pytest.fixture
def owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The owner's settings in the server's environment: a workdir, the process sandbox, one harness root."""
    for var in OWNER_ENV.values():
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "work").mkdir()
    (tmp_path / "roots" / "h").mkdir(parents=True)
    monkeypatch.setenv("EVOTRAINER_SERVER_WORKDIR", str(tmp_path / "work"))
    monkeypatch.setenv("EVOTRAINER_SERVER_SANDBOX", "process")
    monkeypatch.setenv(HARNESS_ROOTS_ENV, str(tmp_path / "roots"))
    return tmp_path


def _run(graph_input: dict[str, Any], context: dict[str, Any]) -> None:
    graph.invoke(graph_input, {"configurable": {"thread_id": "t-1"}}, context=context)


def test_every_context_field_is_either_a_clients_choice_or_the_owners() -> None:
    names = {f.name for f in fields(Context)}
    assert set(CLIENT_FIELDS) | set(OWNER_ENV) == names
    assert not set(CLIENT_FIELDS) & set(OWNER_ENV)
    assert graph.context_schema is ServerContext and builder.context_schema is Context


@pytest.mark.parametrize(
    ("context", "named"),
    [
        ({"sandbox": "none"}, "EVOTRAINER_SERVER_SANDBOX"),
        ({"sandbox": "docker"}, "EVOTRAINER_SERVER_SANDBOX"),
        ({"ray_address": "http://127.0.0.1:8265"}, "EVOTRAINER_SERVER_RAY_ADDRESS"),
        ({"workdir": "/"}, "EVOTRAINER_SERVER_WORKDIR"),
        ({"db_url": "sqlite:////tmp/x.db"}, "EVOTRAINER_SERVER_DB_URL"),
        ({"backend": "verl"}, "EVOTRAINER_SERVER_BACKEND"),
        ({"harness_roots": ["/"]}, "unknown context field 'harness_roots'"),
        ({"gatee": "launch"}, "unknown context field 'gatee'"),
    ],
)
def test_the_server_graph_refuses_a_field_a_client_may_not_set(
    owner: Path, context: dict[str, Any], named: str
) -> None:
    [field] = context
    with pytest.raises(ClientContextError, match=rf"'{field}'.*") as err:
        _run({"harness": str(owner / "roots" / "h")}, {"gate": "launch", **context})
    assert named in str(err.value)
    assert list((owner / "work").iterdir()) == [], "a refused run created something"


def test_the_owners_environment_decides_and_a_client_chooses_within(
    owner: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVOTRAINER_SERVER_RAY_ADDRESS", "http://10.0.0.5:8265")
    ctx = ServerContext(gate="launch", base_steps=5, pilot_steps=5, max_candidates=1)
    assert (ctx.workdir, ctx.sandbox, ctx.ray_address) == (str(owner / "work"), "process", "http://10.0.0.5:8265")
    assert (ctx.gate, ctx.base_steps, ctx.max_candidates) == ("launch", 5, 1)
    assert ctx.harness_roots == (str((owner / "roots").resolve()),)
    with pytest.raises(ValueError, match="gate"):
        ServerContext(gate="sometimes")
    with pytest.raises(ValueError, match="base_steps"):
        ServerContext(base_steps="many")


def test_the_owner_cannot_run_a_server_without_a_sandbox(owner: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOTRAINER_SERVER_SANDBOX", "none")
    with pytest.raises(ClientContextError, match=r"EVOTRAINER_SERVER_SANDBOX='none'.*docker or process"):
        ServerContext()


def test_the_published_context_schema_lists_only_the_clients_fields() -> None:
    schema = graph.get_context_jsonschema()
    assert schema is not None and "properties" not in schema  # the server would drop unlisted keys unrefused
    [published] = schema["allOf"]
    assert set(published["properties"]) == set(CLIENT_FIELDS)


@pytest.mark.parametrize(
    ("graph_input", "message"),
    [
        ({"harness": "outside"}, "not under the server's harness roots"),
        ({"harness": "../roots/../outside"}, "not under the server's harness roots"),
        ({"harness": "link"}, "not under the server's harness roots"),
        ({"harness": "../roots/h", "repo": "/tmp/elsewhere"}, "'repo' is decided by the server"),
        ({"harness": "../roots/h", "session_id": "../../x"}, "is not a plain name"),
        ({"harness_dir": "/"}, "no session t-1 in the store"),
    ],
)
def test_the_server_graph_refuses_a_harness_outside_the_owners_roots(
    owner: Path, graph_input: dict[str, Any], message: str
) -> None:
    (owner / "outside").mkdir()
    (owner / "roots" / "link").symlink_to(owner / "outside")
    (owner / "work" / "link").symlink_to(owner / "roots" / "link")
    with pytest.raises(SetupError, match=message):
        _run(graph_input, {"gate": "launch"})
    assert sorted(p.name for p in (owner / "work").iterdir()) in (["link"], [".evotrainer", "link"])
    assert not (owner / "work" / ".evotrainer" / "sessions").exists()


def test_a_server_without_harness_roots_accepts_no_harness(owner: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HARNESS_ROOTS_ENV)
    with pytest.raises(SetupError, match=f"accepts no harness from a client.*{HARNESS_ROOTS_ENV}"):
        _run({"harness": str(owner / "roots" / "h")}, {})


@pytest.mark.parametrize(
    ("context", "named"),
    [
        ({"max_train_steps": 10_000}, "'max_train_steps' = 10000 is above this server's cap 2400"),
        ({"pilot_steps": 5000}, "'pilot_steps' = 5000 is above this server's cap 2400"),
        ({"max_iterations": 1000}, "'max_iterations' = 1000 is above this server's cap 8"),
        ({"max_candidates": 50}, "'max_candidates' = 50 is above this server's cap 6"),
        ({"llm_max_turns": 10**6}, "'llm_max_turns' = 1000000 is above this server's cap 60"),
        ({"max_wall_s": 10**7}, "'max_wall_s' = 10000000 is above this server's cap 14400"),
        ({"max_llm_tokens": 0}, "'max_llm_tokens' = 0 asks for no budget, and this server caps it at 2000000"),
        ({"price_per_1k": 0}, "'price_per_1k' is decided by the server's owner"),
    ],
)
def test_a_client_budget_stays_within_the_owners_caps(owner: Path, context: dict[str, Any], named: str) -> None:
    with pytest.raises(ClientContextError) as err:
        ServerContext(**context)
    assert named in str(err.value)
    [field] = context
    assert field in str(err.value) and ("EVOTRAINER_SERVER_" in str(err.value))


def test_the_owner_sets_the_caps_and_the_price(owner: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOTRAINER_SERVER_MAX_TRAIN_STEPS", "50")
    monkeypatch.setenv("EVOTRAINER_SERVER_MAX_LLM_TOKENS", "1000")
    monkeypatch.setenv("EVOTRAINER_SERVER_MAX_COST_USD", "2.5")
    monkeypatch.setenv("EVOTRAINER_SERVER_PRICE_PER_1K", "0.01")
    ctx = ServerContext()  # left out: the default, lowered to the cap; "no budget" becomes the cap
    assert (ctx.base_steps, ctx.pilot_steps, ctx.max_train_steps) == (50, 50, 50)
    assert (ctx.max_llm_tokens, ctx.max_cost_usd, ctx.price_per_1k) == (1000, 2.5, 0.01)
    assert ServerContext(max_train_steps=40, base_steps=20, max_llm_tokens=900).max_llm_tokens == 900
    with pytest.raises(ClientContextError, match=r"'max_train_steps' = 60 .*cap 50.*EVOTRAINER_SERVER_MAX_TRAIN_STEPS"):
        ServerContext(max_train_steps=60)
    with pytest.raises(ClientContextError, match=r"'max_cost_usd' = 0 asks for no budget.*caps it at 2.5"):
        ServerContext(max_cost_usd=0)
    monkeypatch.setenv("EVOTRAINER_SERVER_MAX_ITERATIONS", "many")
    with pytest.raises(ValueError, match="EVOTRAINER_SERVER_MAX_ITERATIONS='many' is not a positive number"):
        ServerContext()
