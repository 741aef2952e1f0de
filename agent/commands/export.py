"""`evotrainer export SESSION [--version V] --out DIR`: a session's trained model as a Hugging Face folder.

The version is the one the end-of-run summary recommends (`agent.reporting.summary.choose_version`), or the
one named. Its run's backend writes the folder (`BackendPlugin.export`: the local backend writes safetensors
weights, config, tokenizer with its chat template, and a generation config with the run's stop ids); this
command adds the model card's session part to README.md: the harness lineage up to that version (each
version with how it came about and the decision's rationale, which states the paired delta and its CI),
and the version's selection and sealed scores. A version whose run left no weights (a failed run), a run
of the built-in tiny model and a backend that cannot export are refused with one line, exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agent.commands.db import DbOption, open_store_url
from agent.commands.output import fail, no_session

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from agent.reporting.summary import SessionSummary


def export_cmd(
    session: Annotated[str, typer.Argument(metavar="SESSION", help="session id (`evotrainer status` lists them)")],
    out: Annotated[Path, typer.Option("--out", metavar="DIR", help="folder to write (must not exist)")],
    version: Annotated[
        int | None, typer.Option("--version", metavar="V", help="version index (default: the one to use)")
    ] = None,
    db: DbOption = None,
) -> None:
    """Export a version's trained model as a Hugging Face folder (weights, tokenizer, model card)."""
    import trainer_backend
    from agent.commands.db import migrated_store, store_file
    from agent.reporting.summary import session_summary
    from store.repository import NotFoundError

    url = open_store_url(db)
    path = store_file(url)
    if path is not None and not path.exists():
        fail(no_session(session, url))
    with migrated_store(url) as dbs:
        try:
            summary = session_summary(dbs, session)
        except NotFoundError:
            fail(no_session(session, url))
        if summary.choice is None:
            fail(f"session {session} has no trained version to export ({summary.stop_reason or summary.status})")
        index = summary.choice.use if version is None else version
        known = [v.index for v in summary.versions]
        if index not in known:
            fail(f"session {session} has no version v{index}; its versions are {', '.join(f'v{i}' for i in known)}")
        backend = _backend_of(dbs, session, summary.version(index).run_dir)
        card = model_card(summary, index, _lineage(dbs, session, index))
    line = summary.version(index)
    if not line.run_dir:
        fail(f"v{index} of session {session} has no run, so no weights to export")
    plugin = trainer_backend.plugin_of(backend)
    if plugin.export is None:
        fail(f"v{index} was trained by the {backend} backend, whose checkpoints `export` cannot write as a folder")
    try:
        written = plugin.export(Path(line.run_dir), out.resolve(), card)
    except ValueError as exc:
        fail(f"cannot export v{index} of session {session}: {exc}")
    print(f"wrote {written}: v{index} of session {session} (load it with AutoModelForCausalLM.from_pretrained)")


def _backend_of(db: Session, session_id: str, run_dir: str) -> str:
    from store.repository import session_runs

    found = next((r.backend for r in session_runs(db, session_id) if r.artefact_dir == run_dir), None)
    if found is None:
        fail(f"no run of session {session_id} trained in {run_dir or '(no folder)'}: nothing to export")
    return str(found)


def _lineage(db: Session, session_id: str, index: int) -> list[tuple[int, str]]:
    """`(version index, rationale)` from v0 to v`index` along the parent links of the store's ledger."""
    from store.repository import session_ledger

    rows = session_ledger(db, session_id)
    by_id = {v.id: v for v in rows}
    chain = []
    node = next((v for v in rows if v.index == index), None)
    while node is not None:
        chain.append((node.index, " ".join((node.rationale or "").split())))
        node = by_id.get(node.parent_id) if node.parent_id is not None else None
    return chain[::-1]


def model_card(summary: SessionSummary, index: int, lineage: list[tuple[int, str]]) -> str:
    """The session's part of README.md: the lineage to v`index` and its selection and sealed scores."""
    from agent.reporting.summary import sealed_score

    line = summary.version(index)
    strict = "—" if line.strict is None else f"{line.strict:.3f}"
    recommended = summary.choice is not None and summary.choice.use == index
    out = [
        f"## Session `{summary.session_id}`, version v{index}" + (" (the recommended version)" if recommended else ""),
        "",
        f"- strict accuracy on the held-out selection split (every decision read it): {strict}",
        f"- strict accuracy on the sealed test split (no decision saw it): {sealed_score(line.run_dir).text()}",
        f"- lineage: {line.lineage_steps} training steps",
        "",
        "### Harness lineage",
        "",
    ]
    for i, rationale in lineage:
        how = summary.version(i).how
        out.append(f"- v{i}: {how}" + (f" — {rationale}" if rationale else ""))
    if summary.choice is not None:
        out += ["", f"Recommended: v{summary.choice.use} ({summary.choice.reason})"]
    return "\n".join(out) + "\n"


def register(app: typer.Typer) -> None:
    """Add the `export` command to the CLI."""
    app.command("export")(export_cmd)
