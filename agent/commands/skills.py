"""`evotrainer skills list|show|export|seed`: read the skill library in the SQL store, or seed it.

`list`, `show` and `export` are read-only (they never create or migrate a store); `seed` upserts the
paper's seed skills (`skills/seeds.py`) into a migrated store. `--db` resolves like every command
(`--db` > `EVOTRAINER_DB` > `.evotrainer/evotrainer.db`). SQLAlchemy is imported inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from agent.commands.db import DbOption, migrated_store, open_store_url
from agent.commands.output import console, display_url, fail


def list_cmd(
    domain: Annotated[
        str | None, typer.Option("--domain", metavar="DOMAIN", help="Only skills that apply to this domain")
    ] = None,
    db: DbOption = None,
) -> None:
    """List the skills in the library with their trigger and track record."""
    from rich.table import Table

    from skills.repository import list_skills

    with migrated_store(open_store_url(db)) as s:
        records = list_skills(s, domain)
    if not records:
        print("no skills in the library; run `evotrainer skills seed`")
        return
    table = Table(title="EvoTrainer skills" + (f" for domain {domain}" if domain else ""))
    for col in ("name", "domain", "factor", "trigger", "W/L/uses"):
        table.add_column(col, overflow="fold")
    for r in records:
        spec = r.spec
        factor = "guard (warning)" if spec.is_guard else spec.factor
        table.add_row(spec.name, spec.domain, factor, spec.trigger, f"{r.wins}/{r.losses}/{r.uses}")
    console().print(table)


def show_cmd(name: Annotated[str, typer.Argument(metavar="NAME", help="Skill name")], db: DbOption = None) -> None:
    """Show one skill as a markdown skill card (paper §11), with its patch."""
    from skills.repository import SkillNotFoundError, get_skill, skill_card

    with migrated_store(open_store_url(db)) as s:
        try:
            record = get_skill(s, name)
        except SkillNotFoundError as exc:
            fail(str(exc.args[0]))
    print(skill_card(record), end="")


def export_cmd(
    out: Annotated[Path, typer.Option("--out", metavar="DIR", help="Folder for the markdown skill cards")] = Path(
        "skills-export"
    ),
    domain: Annotated[
        str | None, typer.Option("--domain", metavar="DOMAIN", help="Only skills that apply to this domain")
    ] = None,
    db: DbOption = None,
) -> None:
    """Write the library as markdown skill cards: SKILLS.md plus one <name>.md per skill."""
    from skills.repository import export_markdown, list_skills, skill_card

    with migrated_store(open_store_url(db)) as s:
        records = list_skills(s, domain)
    out.mkdir(parents=True, exist_ok=True)
    (out / "SKILLS.md").write_text(export_markdown(records))
    for r in records:
        (out / f"{r.spec.name}.md").write_text(skill_card(r))
    print(f"wrote {len(records)} skill card(s) to {out}/ (SKILLS.md + one file per skill)")


def seed_cmd(db: DbOption = None) -> None:
    """Upsert the seed skills (paper interventions) into the library; safe to repeat."""
    from skills.repository import seed_skills

    with migrated_store(open_store_url(db)) as s:
        ids = seed_skills(s)
    print(f"seeded {len(ids)} skill(s) into {display_url(open_store_url(db))}")


def register(app: typer.Typer) -> None:
    """Add the `skills` sub-app to the CLI."""
    sub = typer.Typer(
        name="skills", help="The skill library: list, show, export as markdown, seed.", no_args_is_help=True
    )
    sub.command("list")(list_cmd)
    sub.command("show")(show_cmd)
    sub.command("export")(export_cmd)
    sub.command("seed")(seed_cmd)
    app.add_typer(sub, name="skills")
