"""The `evotrainer` command line (typer + rich).

Each command lives in a module under `agent/commands/` that imports its heavy dependencies inside
the command function, so `evotrainer --help` stays fast and never imports torch or verl.

Help conventions, applied to every command by `EvoGroup`: a flag shows no value placeholder
(`--json`, not `--json <bool>`); a positional reads `SESSION` in the usage line (not `{session}`);
options that take a value name it (`--db URL`, `--harness DIR`) and closed choices list them
(`--sandbox <docker|process|none>`, via `Literal` types).

One error path (`agent.commands.output`): bad input that escapes any command (a
`harness.failures.BadInput`: harness, store URL, session checks, a backend's refusal) and a usage error
(an unknown option, a value outside its choices) print one `error: ...` line on stderr and exit 2.
"""

from __future__ import annotations

import atexit
import functools
import gc
import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

import typer
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer.core import TyperArgument, TyperGroup, TyperOption

from agent.commands.output import EXIT_BAD_INPUT, fail
from harness.failures import BadInput

# A session leaves a few hundred thousand objects that the interpreter's teardown walks with repeated
# garbage collections: 3.0 s between a tiny session's last line and the exit on an idle 2-core box, 10-14 s
# on a busy one. Nothing left at exit needs a cycle collected, so the exit skips that work
# (registered first, this runs after every other exit handler).
atexit.register(gc.freeze)


class EvoGroup(TyperGroup):
    """The root command group: tidies the help of every command below it, and owns the CLI's error path."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _tidy(self)

    def invoke(self, ctx: Any) -> Any:
        """Run the command; bad input or a usage error that escapes it is one line and exit 2."""
        try:
            return super().invoke(ctx)
        except BadInput as exc:
            fail(str(exc), EXIT_BAD_INPUT)
        except NoArgsIsHelpError:
            raise  # `evotrainer db`: the group's help, as asked
        except UsageError as exc:
            command = exc.ctx.command_path if exc.ctx is not None else "evotrainer"
            fail(f"{exc.format_message()} (`{command} --help` lists the options)", EXIT_BAD_INPUT)


def _tidy(command: Any) -> None:
    """No placeholder on flags (the help flag included); `NAME` / `[NAME]` for positionals in usage."""
    for param in command.params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
        elif isinstance(param, TyperArgument):
            param.metavar = param.metavar or (param.name or "").upper()
            param._usage_display_name = functools.partial(_usage_name, param)  # type: ignore[method-assign]
    original = command.get_help_option

    def help_option(ctx: Any) -> Any:
        option = original(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = help_option
    for sub in getattr(command, "commands", {}).values():
        _tidy(sub)


def _usage_name(param: TyperArgument) -> str:
    name = param.metavar or ""
    name = name if param.required else f"[{name}]"
    return name + ("..." if param.nargs != 1 else "")


def _package_version() -> str:
    try:
        return version("evotrainer")
    except PackageNotFoundError:  # a source checkout that was never installed
        return "unknown (not installed)"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"evotrainer {_package_version()}")
        raise typer.Exit()


app = typer.Typer(
    name="evotrainer",
    help="Co-evolve an LLM policy and its training harness: an autonomous, auditable RL campaign.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=EvoGroup,
)


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Co-evolve an LLM policy and its training harness: an autonomous, auditable RL campaign."""


# Command modules, in --help order; each exposes `register(app)`.
COMMAND_MODULES = (
    "init",
    "run",
    "stop",
    "status",
    "report",
    "export",
    "train",
    "diagnose",
    "backtest",
    "skills",
    "sandbox",
    "models",
    "db",
    "graph",
)
for _name in COMMAND_MODULES:
    importlib.import_module(f"agent.commands.{_name}").register(app)


def main() -> None:
    """Run the CLI."""
    app()


if __name__ == "__main__":
    main()
