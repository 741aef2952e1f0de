"""`evotrainer status [SESSION]`: the sessions in the store, or one session's version ledger.

Read-only by design: status never creates or migrates a store. A missing default SQLite file means
"no sessions yet"; a store behind the code's head revision is reported with the fix
(`evotrainer db upgrade`, exit 1); a bad `--db` / `EVOTRAINER_DB` and an unknown session exit 2
(`agent.commands.output`). Every value reaches rich as
`Text`, so brackets in ids or rationales print as they are; a failed session shows why it failed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from agent.commands.db import DbOption, migrated_store, open_store_url, store_file
from agent.commands.output import console, fail, no_session

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text
    from sqlalchemy.orm import Session

NO_SESSIONS = "no sessions yet; run `evotrainer run`"
EXCERPT_CHARS = 60


def _excerpt(text: str | None, limit: int = EXCERPT_CHARS) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _score(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _sessions_table(db: Session) -> Table | None:
    from rich.table import Table
    from rich.text import Text

    from agent.llm.accounting import total, usage_by_node
    from store.repository import list_sessions

    rows = list_sessions(db)
    if not rows:
        return None
    table = Table(title="EvoTrainer sessions")
    names = ("session", "created (UTC)", "mode", "status", "versions", "best strict", "LLM tokens", "LLM cost")
    for name in names:
        table.add_column(name)
    reasons = _status_reasons(db)
    if reasons:
        table.add_column("why it stopped")
    for s in rows:
        created = s.created_at.strftime("%Y-%m-%d %H:%M")
        llm = total(usage_by_node(db, s.id).values())
        tokens, cost = (str(llm.total_tokens), f"${llm.cost_usd:.4f}") if llm.calls else ("—", "—")
        cells = [s.id, created, s.mode, s.status, str(s.n_versions), _score(s.best_strict_score), tokens, cost]
        if reasons:
            cells.append(_excerpt(reasons.get(s.id), 80))
        table.add_row(*(Text(c) for c in cells))
    return table


def _status_reasons(db: Session) -> dict[str, str]:
    """Why each failed (or otherwise stopped) session stopped, where recorded."""
    from store.repository import status_reasons

    return status_reasons(db)


def _llm_table(db: Session, session_id: str) -> Table | None:
    """Tokens and cost of the session's LLM calls per node, or None when it made none."""
    from rich.table import Table

    from agent.llm.accounting import total, usage_by_node

    per_node = usage_by_node(db, session_id)
    if not per_node:
        return None
    table = Table(title="LLM usage")
    for name in ("node", "calls", "prompt tokens", "completion tokens", "cost (USD)"):
        table.add_column(name)
    for node, u in [*per_node.items(), ("total", total(per_node.values()))]:
        table.add_row(node, str(u.calls), str(u.prompt_tokens), str(u.completion_tokens), f"{u.cost_usd:.4f}")
    return table


def _ledger_tables(db: Session, session_id: str, url: str) -> list[Table]:
    from rich.table import Table
    from rich.text import Text

    from agent.adapters.pilots import candidate_name
    from store.repository import NotFoundError, session_candidates, session_ledger, session_row

    try:
        session = session_row(db, session_id)
    except NotFoundError:
        fail(no_session(session_id, url))
    versions = session_ledger(db, session_id)
    index_of = {v.id: v.index for v in versions}
    budget = f"steps {session.steps_used}/{session.max_train_steps}, max iterations {session.max_iterations}"
    title = f"session {session.id} ({session.mode}, {session.policy}, {session.status}; {budget})"
    if session.status_reason:
        title += f"\n{session.status}: {session.status_reason}"
    ledger = Table(title=Text(title))
    for name in ("version", "branch", "parent", "decision", "outcome", "strict", "rationale"):
        ledger.add_column(name)
    for v in versions:
        parent = "—" if v.parent_id is None else f"v{index_of.get(v.parent_id, '?')}"
        cells = (f"v{v.index}", v.branch, parent, v.decision or "—", v.outcome or "—", _score(v.strict_score))
        ledger.add_row(*(Text(c) for c in (*cells, _excerpt(v.rationale))))
    candidates = Table(title="candidates (branch evo/<session>/<name>, run folder <session>-<name>)")
    for name in ("candidate", "iter", "from", "factor", "status", "hypothesis / refusal"):
        candidates.add_column(name)
    for c in session_candidates(db, session_id):
        note = c.refusal_reason if c.status == "refused" or c.refusal_reason else c.hypothesis
        parent = f"v{index_of.get(c.parent_version_id, '?')}"
        candidates.add_row(
            *(Text(x) for x in (candidate_name(session_id, c.id), str(c.iteration), parent, c.factor, c.status)),
            Text(_excerpt(note)),
        )
    tables: list[Any] = [ledger, candidates] if candidates.row_count else [ledger]
    tables += _model_lines(db, session_id)
    answers = _alert_table(db, session_id)
    if answers is not None:
        tables.append(answers)
    if session.status == "finished":  # the sealed test split is read only once the session has ended
        from agent.reporting.summary import sealed_lines, session_summary

        tables += [Text(line) for line in sealed_lines(session_summary(db, session_id))]
    live = _live_table(session_id)
    if live is not None:
        tables.append(live)
    llm = _llm_table(db, session_id)
    return [*tables, llm] if llm is not None else tables


def _live_table(session_id: str) -> Table | None:
    """The session's runs whose trainers still run (they outlive an interrupted controller), or None."""
    from rich.table import Table
    from rich.text import Text

    from agent.commands.stop import live_runs, session_runs_dir

    alive = live_runs(session_runs_dir(session_id))
    if not alive:
        return None
    table = Table(title=f"runs still training (`evotrainer stop {session_id}` stops them)")
    for name in ("run", "where", "folder"):
        table.add_column(name)
    for r in alive:
        table.add_row(Text(r.run_id), Text(r.where), Text(str(r.out_dir)))
    return table


def _model_lines(db: Session, session_id: str) -> list[Text]:
    """What model the session's runs trained, from their summary.json (one line per distinct model)."""
    from rich.text import Text

    from agent.reporting.artefacts import models_trained
    from store.repository import session_runs

    found = models_trained([(r.id, r.artefact_dir) for r in session_runs(db, session_id)])
    if len(found) == 1:
        return [Text(f"model: {found[0].card.line()}")]
    return [Text(f"model: {m.card.line()} — runs {', '.join(m.run_ids)}") for m in found]


def _alert_table(db: Session, session_id: str) -> Table | None:
    """Each iteration's critical alerts and what answered them, or None when none was critical."""
    from rich.table import Table
    from rich.text import Text

    from agent.reporting.gather import alert_answers

    rows = alert_answers(db, session_id)
    if not rows:
        return None
    table = Table(title="critical alerts and what answers them")
    for name in ("iter", "critical alert", "answered by"):
        table.add_column(name)
    for a in rows:
        table.add_row(Text(str(a.iteration)), Text(a.alert_id), Text(", ".join(a.candidates) or f"nothing: {a.reason}"))
    return table


def status_cmd(
    session: Annotated[
        str | None, typer.Argument(metavar="SESSION", help="Show this session's version ledger and candidates")
    ] = None,
    db: DbOption = None,
) -> None:
    """List sessions (id, created, mode, status, versions, best strict score), or one session's ledger."""
    url = open_store_url(db)
    path = store_file(url)
    if path is not None and not path.exists():
        if session is not None:
            fail(no_session(session, url))
        print(f"{NO_SESSIONS} (no store at {path} yet)")
        return
    out = console()
    with migrated_store(url) as dbs:
        tables = _ledger_tables(dbs, session, url) if session else [t for t in [_sessions_table(dbs)] if t]
        for table in tables:
            out.print(table)
    if not tables:
        print(NO_SESSIONS)


def register(app: typer.Typer) -> None:
    """Add the `status` command to the CLI."""
    app.command("status")(status_cmd)
