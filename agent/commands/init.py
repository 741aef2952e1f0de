"""`evotrainer init DIR`: write a commented, working harness skeleton to start a task of your own from.

The skeleton is the bundled example `examples/skeleton` (a tiny digit-sorting task with its generated
data, warm start and strict evaluator; `make_data.py` regenerates the data). `init` copies it into DIR,
names the harness after DIR and checks that the result loads, so `evotrainer train --harness DIR` works
at once. Its task lives in the example's files, never here: the core assumes none.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import typer

SKELETON = Path(__file__).resolve().parents[2] / "examples" / "skeleton"


def harness_name(folder: Path) -> str:
    """A manifest `name` for `folder`: its name with characters outside ``[A-Za-z0-9_.-]`` replaced."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", folder.resolve().name).lstrip("-._")
    return name or "harness"


def write_skeleton(folder: Path, source: Path = SKELETON) -> list[Path]:
    """Copy the skeleton harness into `folder` (new or empty), name it after the folder; return the files.

    Raises:
        FileExistsError: `folder` exists and is not empty.
    """
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise FileExistsError(f"{folder} already exists and is not an empty folder; pick a new folder")
    shutil.copytree(source, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    manifest = folder / "evotrainer.yaml"
    text, count = re.subn(r"^name: .*$", f"name: {harness_name(folder)}", manifest.read_text(), count=1, flags=re.M)
    if count != 1:
        raise RuntimeError(f"{source / 'evotrainer.yaml'} has no 'name:' line")  # our own file: fail loudly
    manifest.write_text(text)
    return sorted(p for p in folder.rglob("*") if p.is_file())


def init(folder: Path = typer.Argument(..., help="new harness folder (created; must be new or empty)")) -> None:
    """Write a commented, working harness skeleton (a tiny digit-sorting task) to start your own from."""
    from rich.text import Text

    from agent.commands.output import console, fail
    from harness.manifest import load_harness

    try:
        written = write_skeleton(folder)
    except FileExistsError as exc:
        fail(str(exc))
    harness = load_harness(folder)  # the skeleton must satisfy the contract it documents
    out = console()
    out.print(Text.assemble("wrote harness ", (harness.manifest.name, "bold"), f" ({len(written)} files) in {folder}"))
    out.print(f"next: evotrainer train --harness {folder} --steps 40  (see {folder / 'README.md'})", markup=False)


def register(app: typer.Typer) -> None:
    """Add the `init` command to the CLI."""
    app.command("init")(init)
