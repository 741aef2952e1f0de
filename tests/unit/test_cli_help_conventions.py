"""Every command's help shows real placeholders, flags as flags, positionals by name.

Walks the whole command tree of `agent.cli.app` (commands added by any module included) and renders each
`--help` the way a user sees it.
"""

from __future__ import annotations

import re
from importlib.metadata import version
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from agent.cli import app

RUNNER = CliRunner()


@pytest.fixture(autouse=True)
def _wide_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """Render help 200 columns wide whatever the terminal (rich otherwise guesses from the process's streams)."""
    import typer.rich_utils

    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", 200)


def _leaves(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    subs = getattr(command, "commands", None)
    if not subs:
        return [(path, command)]
    return [leaf for name, sub in sorted(subs.items()) for leaf in _leaves(sub, (*path, name))]


LEAVES = _leaves(typer.main.get_command(app))


def _help(*args: str) -> str:
    result = RUNNER.invoke(app, [*args, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0, result.output
    return result.output


def test_the_tree_has_the_everyday_commands() -> None:
    paths = {" ".join(p) for p, _ in LEAVES}
    assert {"run", "resume", "approve", "status", "train", "db check", "db downgrade", "sandbox info"} <= paths


@pytest.mark.parametrize(("path", "command"), LEAVES, ids=[" ".join(p) for p, _ in LEAVES])
def test_help_shows_no_bool_placeholder_and_positionals_by_name(path: tuple[str, ...], command: Any) -> None:
    text = _help(*path)
    assert "<bool>" not in text, f"a flag shows a value placeholder:\n{text}"
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "{" not in usage and "}" not in usage, usage
    for param in command.params:
        if param.param_type_name == "argument":  # SESSION, RUN_DIR, REVISION ... ([NAME] when optional)
            assert re.search(rf"\[?{(param.name or '').upper()}\]?", usage), usage


def test_root_help_flag_and_version() -> None:
    assert "<bool>" not in _help()
    result = RUNNER.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"evotrainer {version('evotrainer')}"


def test_every_db_option_has_one_wording_and_a_url_placeholder() -> None:
    helps = {
        " ".join(path): (param.help, param.metavar)
        for path, command in LEAVES
        for param in command.params
        if "--db" in getattr(param, "opts", [])
    }
    assert {"run", "resume", "approve", "status", "report", "db upgrade", "skills list"} <= set(helps)
    assert len(set(helps.values())) == 1, helps
    [(wording, metavar)] = set(helps.values())
    assert metavar == "URL" and "EVOTRAINER_DB" in wording


@pytest.mark.parametrize(
    ("command", "option", "choices"),
    [
        ("run", "--sandbox", "<docker|process|none>"),
        ("run", "--mode", "<evotrainer|score-only>"),
        ("run", "--gate", "<none|launch|promote|all>"),
        ("train", "--backend", "<local|verl>"),
        ("run", "--backend", "<local|verl>"),
        ("train", "--sandbox", "<docker|process|none>"),
    ],
)
def test_closed_choices_are_listed(command: str, option: str, choices: str) -> None:
    line = next(line for line in _help(command).splitlines() if f" {option} " in line)
    assert choices in line, line


def test_run_sets_the_wall_and_llm_timeout_budgets_and_the_sandbox_defaults_are_explained() -> None:
    run_help = _help("run")
    for option in ("--max-wall", "--llm-timeout", "--quiet", "--progress-every"):
        assert option in run_help
    train_help = " ".join(_help("train").split())
    assert "default none" in train_help and "`run` and `backtest` default to docker" in train_help


def test_a_bad_choice_is_refused_with_the_choices() -> None:
    result = RUNNER.invoke(app, ["run", "--sandbox", "vm"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "docker" in result.output and "process" in result.output
