"""Skill library adapter: the ``skills`` and ``skill_uses`` tables, through an explicit SQLAlchemy session.

Every function takes the ORM ``Session`` first and never commits (``store.engine.session_scope`` does);
functions ``flush()`` so new rows have ids. Rows convert to ``SkillSpec``/``SkillRecord`` in one place
(``to_record``), and a row that no longer validates (e.g. an edited trigger) fails loudly.

Guard skills: when the store's factor set has no ``guard`` value, a guard skill's row keeps
``factor = "reward"`` (the design area it guards) and is recognised by its patch, a template made only of
``guard`` ops; ``SkillSpec`` validation guarantees that only guard skills hold such patches, so the
mapping is lossless. With ``guard`` in the store's factor set the row says ``guard`` directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, get_args

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from skills.models import SkillRecord, SkillSpec, template_ops
from skills.retrieval import SkillMatch, rank_skills
from skills.seeds import SEED_SKILLS
from skills.triggers import Metrics, Value, matched_values, parse
from store.models import Skill, SkillUse
from store.types import Factor, SkillOrigin, SkillResult, utcnow

_STORE_HAS_GUARD = "guard" in get_args(Factor)
GUARD_ROW_FACTOR = "reward"


class SkillNotFoundError(LookupError):
    """No skill (or skill use) with the given name or id."""


def _row_factor(spec: SkillSpec) -> Any:
    return GUARD_ROW_FACTOR if spec.is_guard and not _STORE_HAS_GUARD else spec.factor


def _spec_factor(row: Skill) -> str:
    if row.factor == GUARD_ROW_FACTOR and row.patch_kind == "template":
        try:
            ops = template_ops(row.patch, row.name)
        except ValueError:
            return row.factor
        if all(op["op"] == "guard" for op in ops):
            return "guard"
    return row.factor


def to_spec(row: Skill) -> SkillSpec:
    """Convert a ``skills`` row into a validated ``SkillSpec`` (raises ``ValueError`` on a corrupt row)."""
    return SkillSpec(
        name=row.name,
        domain=row.domain,
        trigger=row.trigger,
        factor=_spec_factor(row),  # type: ignore[arg-type]  # validated by the model
        patch_kind=row.patch_kind,
        patch=row.patch,
        params=dict(row.params or {}),
        expected_outcome=row.expected_outcome,
        validation_rule=row.validation_rule,
        applicability=tuple(row.applicability or ()),
        provenance=row.provenance,
    )


def to_record(row: Skill) -> SkillRecord:
    """Convert a ``skills`` row into a ``SkillRecord`` (spec plus wins, losses, uses)."""
    return SkillRecord(
        spec=to_spec(row),
        wins=row.wins,
        losses=row.losses,
        uses=row.uses,
        last_verified_session=row.last_verified_session,
        origin=row.origin,
        source_candidate_id=row.source_candidate_id,
    )


def _row(db: Session, name: str) -> Skill | None:
    return db.scalars(select(Skill).where(Skill.name == name)).one_or_none()


def skill_id_of(db: Session, name: str) -> int | None:
    """The id of the stored skill called `name`, None when no stored skill has that name (a probe)."""
    row = _row(db, name)
    return None if row is None else row.id


def save_skill(
    db: Session,
    spec: SkillSpec,
    provenance: str | None = None,
    *,
    origin: SkillOrigin = "user",
    source_candidate_id: str | None = None,
) -> int:
    """Insert or update a skill by name and return its id; the track record of an existing skill is kept.

    ``provenance`` (e.g. "session s1, candidate evo/s1/v2.1-strict-reward, strict_acc +0.12") replaces
    the spec's own when given. ``origin`` says where the definition comes from (``seed``, ``learned``,
    ``user``) and is written too, so a skill saved by hand over a seed's name stops being refreshed by
    seeding; ``source_candidate_id`` names the merged candidate a learned skill comes from. The trigger is
    re-parsed here so an invalid one fails before any write. One ``INSERT ... ON CONFLICT (name) DO UPDATE``
    statement: two processes saving (or seeding) the same skill at once both succeed, with one row (a
    check-then-insert died on ``uq_skills_name``).

    Raises:
        skills.triggers.TriggerError: the trigger is invalid.
    """
    parse(spec.trigger)
    if provenance is not None:
        spec = spec.model_copy(update={"provenance": provenance})
    fields = {**_definition(spec), "origin": origin, "source_candidate_id": source_candidate_id}
    insert = _insert(db)
    stmt = insert(Skill).values(name=spec.name, **fields)
    stmt = stmt.on_conflict_do_update(index_elements=[Skill.name], set_={**fields, "updated_at": utcnow()})
    row: Skill = db.scalars(stmt.returning(Skill), execution_options={"populate_existing": True}).one()
    return int(row.id)


def _definition(spec: SkillSpec) -> dict[str, Any]:
    """The row columns that define a skill (everything but its name, origin and track record)."""
    return {
        "domain": spec.domain,
        "trigger": spec.trigger,
        "factor": _row_factor(spec),
        "patch_kind": spec.patch_kind,
        "patch": spec.patch,
        "params": dict(spec.params),
        "expected_outcome": spec.expected_outcome,
        "validation_rule": spec.validation_rule,
        "applicability": list(spec.applicability),
        "provenance": spec.provenance,
    }


def _insert(db: Session) -> Any:
    """The dialect's INSERT construct (both SQLite and Postgres have ``ON CONFLICT``)."""
    if db.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert


def _bump(db: Session, skill_id: int, counters: Mapping[str, int], also: Mapping[str, Any] | None = None) -> None:
    """Add `counters` to a skill's counts in SQL (``uses = uses + 1``), setting `also`: no update is ever lost."""
    values: dict[str, Any] = {name: getattr(Skill, name) + delta for name, delta in counters.items() if delta}
    values.update(also or {})
    if not values:
        return
    db.execute(
        update(Skill).where(Skill.id == skill_id).values(**values),
        execution_options={"synchronize_session": "fetch"},
    )


def seed_skills(db: Session, seeds: Sequence[SkillSpec] = SEED_SKILLS) -> list[int]:
    """Bring the seed skills up to date and return their ids, in order (idempotent, safe under concurrent starts).

    A missing seed is inserted (``origin = "seed"``). A stored ``seed`` row whose definition differs from
    ``seeds`` (the seed definitions changed since it was written, e.g. an old answer-specific reward
    template) is rewritten, keeping its wins, losses and uses; one that already matches is not touched. A
    row of another origin that holds a seed's name (a skill saved by hand, a learned one) is left alone.

    Each write is one ``INSERT ... ON CONFLICT (name) DO UPDATE ... WHERE skills.origin = 'seed'`` statement,
    so two starts seeding at once both succeed, converge on the same row, and never overwrite a row that
    stopped being a seed between the read and the write.
    """
    ids: list[int] = []
    for spec in seeds:
        parse(spec.trigger)
        fields = _definition(spec)
        row = _row(db, spec.name)
        if row is not None and (row.origin != "seed" or _same_definition(row, fields)):
            ids.append(int(row.id))
            continue
        insert = _insert(db)
        stmt = insert(Skill).values(name=spec.name, origin="seed", **fields)
        stmt = stmt.on_conflict_do_update(
            index_elements=[Skill.name], set_={**fields, "updated_at": utcnow()}, where=Skill.origin == "seed"
        )
        db.execute(stmt, execution_options={"synchronize_session": False})
        stored = db.scalars(
            select(Skill).where(Skill.name == spec.name), execution_options={"populate_existing": True}
        ).one()
        ids.append(int(stored.id))
    return ids


def _same_definition(row: Skill, fields: Mapping[str, Any]) -> bool:
    return all(getattr(row, name) == value for name, value in fields.items())


def list_skills(db: Session, domain: str | None = None) -> list[SkillRecord]:
    """Return the stored skills sorted by name; with ``domain``, those that apply to it (own, listed or ``*``)."""
    records = [to_record(r) for r in db.scalars(select(Skill).order_by(Skill.name))]
    if domain is None:
        return records
    return [r for r in records if r.spec.applies_to(domain)]


def get_skill(db: Session, name: str) -> SkillRecord:
    """Return one skill by name.

    Raises:
        SkillNotFoundError: no skill with that name.
    """
    row = _row(db, name)
    if row is None:
        raise SkillNotFoundError(f"no skill named {name!r}; `evotrainer skills list` shows the library")
    return to_record(row)


def match_skills(
    db: Session, metrics: Metrics, domain: str, *, force_fallback: bool = False
) -> list[tuple[SkillSpec, list[str]]]:
    """Return ``(spec, matched_terms)`` for every skill whose trigger holds, ranked by ``skills.retrieval``.

    Guard skills are included (``spec.is_guard``): the caller shows them as warnings, never applies them.
    """
    return [(m.record.spec, list(m.matched_terms)) for m in rank(db, metrics, domain, force_fallback=force_fallback)]


def rank(db: Session, metrics: Metrics, domain: str, *, force_fallback: bool = False) -> list[SkillMatch]:
    """Return the full ``SkillMatch`` objects (tier, win rate, specificity) for ``metrics`` in ``domain``."""
    records = [to_record(r) for r in db.scalars(select(Skill))]
    return rank_skills(records, metrics, domain, force_fallback=force_fallback)


def record_use(
    db: Session,
    skill_name: str,
    session_id: str,
    candidate_id: str | None,
    matched_metrics: Mapping[str, Value],
) -> int:
    """Record that a skill was applied (result ``pending``), count the use, and return the use id.

    ``matched_metrics`` is the evidence: the metric values the trigger read
    (``skills.triggers.matched_values``). Idempotent per (skill, session, candidate) when a candidate is
    given, so a re-run node does not count the use twice.
    """
    # FOR UPDATE (Postgres; SQLite transactions are serialised already): the idempotency check below and
    # the insert happen under the skill row's lock, so two processes cannot both record the same use.
    row = db.scalars(
        select(Skill).where(Skill.name == skill_name).with_for_update(),
        execution_options={"populate_existing": True},
    ).one_or_none()
    if row is None:
        raise SkillNotFoundError(f"no skill named {skill_name!r}")
    if candidate_id is not None:
        existing = db.scalars(
            select(SkillUse).where(
                SkillUse.skill_id == row.id,
                SkillUse.session_id == session_id,
                SkillUse.candidate_id == candidate_id,
            )
        ).first()
        if existing is not None:
            return existing.id
    use = SkillUse(
        skill_id=row.id,
        session_id=session_id,
        candidate_id=candidate_id,
        matched_metrics=dict(matched_metrics),
        result="pending",
    )
    db.add(use)
    db.flush()
    _bump(db, row.id, {"uses": 1})
    return use.id


def record_result(db: Session, use_id: int, win: bool) -> SkillRecord:
    """Settle a pending use as a win or a loss and update the skill's wins/losses.

    A win also marks the skill as verified in the use's session. Settling an already settled use with the
    same result is a no-op; with the opposite result it moves the count.

    Raises:
        SkillNotFoundError: no use with that id.
    """
    # The use row is locked (Postgres) and re-read, so two settlements of one use cannot both move a count;
    # the counts themselves move in SQL, so settlements of different uses of one skill never lose one.
    use = db.get(SkillUse, use_id, with_for_update=True, populate_existing=True)
    if use is None:
        raise SkillNotFoundError(f"no skill use with id {use_id}")
    new: SkillResult = "win" if win else "loss"
    if use.result != new:
        counters = {"wins": 0, "losses": 0}
        if use.result in ("win", "loss"):
            counters["wins" if use.result == "win" else "losses"] -= 1
        counters["wins" if win else "losses"] += 1
        also: dict[str, Any] = {"updated_at": utcnow()}
        if win:
            also["last_verified_session"] = use.session_id
        use.result = new
        db.flush()
        _bump(db, use.skill_id, counters, also)
    skill = db.get(Skill, use.skill_id, populate_existing=True)
    assert skill is not None, f"skill_uses.{use_id} points at a missing skill"
    return to_record(skill)


def use_of_candidate(db: Session, candidate_id: str) -> SkillUse | None:
    """The first record of a stored skill applied to `candidate_id`, or None (the candidate applied none)."""
    return db.scalars(select(SkillUse).where(SkillUse.candidate_id == candidate_id).order_by(SkillUse.id)).first()


def session_uses(db: Session, session_id: str) -> list[SkillUse]:
    """Every skill use of a session, oldest first."""
    return list(db.scalars(select(SkillUse).where(SkillUse.session_id == session_id).order_by(SkillUse.id)))


def skill_rows(db: Session) -> dict[int, Skill]:
    """Every skill row of the library by id, in id order."""
    return {s.id: s for s in db.scalars(select(Skill).order_by(Skill.id))}


def evidence(spec: SkillSpec, metrics: Metrics) -> dict[str, Value]:
    """Return the metric values ``spec``'s trigger reads: what ``record_use`` stores as ``matched_metrics``."""
    return matched_values(spec.trigger, metrics)


def export_markdown(specs: Sequence[SkillSpec | SkillRecord]) -> str:
    """Render skills as markdown skill cards in the paper's §11 format (one ``### Skill:`` block each)."""
    cards = ["# EvoTrainer skill library", ""]
    for item in specs:
        record = item if isinstance(item, SkillRecord) else SkillRecord(spec=item)
        cards.append(skill_card(record))
    return "\n".join(cards).rstrip() + "\n"


def skill_card(record: SkillRecord) -> str:
    """Render one skill card (paper §11), with the patch and the track record."""
    spec = record.spec
    domains = [spec.domain, *[d for d in spec.applicability if d != spec.domain]]
    kind = "guard (warning; never applied)" if spec.is_guard else f"{spec.factor} ({spec.patch_kind} patch)"
    fence = "diff" if spec.patch_kind == "diff" else "json"
    lines = [
        f"### Skill: {spec.name}",
        f"- Trigger Condition: `{spec.trigger}`",
        f"- Intervention: {kind}; see the patch below",
        f"- Expected Outcome: {spec.expected_outcome}",
        f"- Validation: {spec.validation_rule}",
        f"- Domain Applicability: {', '.join(domains)}",
        f"- Provenance: {spec.provenance or 'n/a'} ({record.origin}"
        + (f", learned from candidate {record.source_candidate_id})" if record.source_candidate_id else ")"),
        f"- Track Record: {record.wins} wins, {record.losses} losses, {record.uses} uses"
        + (f"; last verified in session {record.last_verified_session}" if record.last_verified_session else ""),
    ]
    if spec.params:
        lines.append(f"- Parameters: {', '.join(f'{k}={v}' for k, v in sorted(spec.params.items()))}")
    lines += ["", f"```{fence}", spec.patch.rstrip(), "```", ""]
    return "\n".join(lines)
