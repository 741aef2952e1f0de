"""`evotrainer run`'s options set `Context` fields; their defaults must be Context's own.

One source of names and defaults: a default changed in `agent/context.py` (what the LangGraph server and
`resume` use) and not in the CLI, or the other way round, fails here, as does a new Context setting the
CLI cannot reach or a new option this map does not know.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing

from agent.commands.run import run
from agent.context import Context

# `run` option -> the Context field it sets
CONTEXT_OF = {
    "mode": "mode",
    "sandbox": "sandbox",
    "gate": "gate",
    "seed": "seed",
    "base_steps": "base_steps",
    "pilot_steps": "pilot_steps",
    "candidates": "max_candidates",
    "iterations": "max_iterations",
    "max_steps": "max_train_steps",
    "max_wall": "max_wall_s",
    "max_llm_tokens": "max_llm_tokens",
    "max_cost": "max_cost_usd",
    "price_per_1k": "price_per_1k",
    "llm_timeout": "llm_timeout_s",
    "escalate_after": "escalate_after",
    "min_effect": "min_effect",
    "replicates": "replicates",
    "llm_max_turns": "llm_max_turns",
    "ray_address": "ray_address",
    "db": "db_url",  # None -> "" (the default SQLite store)
    "llm": "llm_model",  # also sets policy="llm"
    "backend": "backend",  # None -> the manifest's trainer.backend
}
# options that are not session settings; Context fields no option sets
NOT_SETTINGS = {"harness", "repo", "dry_run", "quiet", "progress_every"}
NO_OPTION = {"workdir", "policy"}  # the run's folder is the cwd; the policy follows --llm
DERIVED = {"db", "llm", "backend"}  # their CLI default means "Context's default" or "from the manifest"


def test_every_run_option_is_a_context_field_with_the_same_default() -> None:
    params = inspect.signature(run).parameters
    fields = {f.name: f for f in dataclasses.fields(Context)}
    assert set(params) == set(CONTEXT_OF) | NOT_SETTINGS, "a new `run` option: map it to its Context field here"
    assert set(fields) == set(CONTEXT_OF.values()) | NO_OPTION, "a new Context field: give `run` an option for it"
    for option, name in CONTEXT_OF.items():
        if option in DERIVED:
            continue
        assert params[option].default == fields[name].default, (option, params[option].default, fields[name].default)


def test_choices_of_run_options_are_contexts() -> None:
    hints = typing.get_type_hints(Context)
    run_hints = typing.get_type_hints(run, include_extras=True)
    for option in ("mode", "sandbox", "gate"):
        cli_type = typing.get_args(run_hints[option])[0]
        assert set(typing.get_args(cli_type)) == set(typing.get_args(hints[CONTEXT_OF[option]])), option
