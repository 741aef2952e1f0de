"""One backtest and one pilot per distinct edit, and none for an edit already tried on the same evidence.

A committed candidate's edit has a content key (`sandboxes.git_worktree.change_key`: the changed paths, modes
and blobs against the incumbent), so a learned skill and a probe that write the same change get the same key.
A candidate is not piloted when

- a live candidate of its iteration makes the same edit: it joins that one's proposers (`same_in_iteration`);
- another proposer tried the same edit before on the same evidence, and that try settled it
  (`tried_before`): a candidate of an earlier iteration of the session on the same incumbent commit or the
  same symptom signature, or a piece of negative evidence in case memory filed under the same symptom
  signature (its signature carries the edit tried under `TRIED_EDIT`).

A try settles an edit unless its evidence was thin (`pruned`, outcome `insufficient`) or it improved but
another candidate was merged instead (`kept`, outcome `improvement`): there a second try is the designed
answer. A proposer retrying its own candidate's edit is left to its own rules (`agent.nodes.propose.settled_skills` for
skills, the case-memory ladder of `agent/policies/explore.py` for probes). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.state import CandidateInfo

# The entry of a negative-evidence case's signature naming the edit tried:
# {content_key, symptom_key, tried_by (the candidate's own skills), proposers (every proposer of its iteration)}.
TRIED_EDIT = "tried_edit"
# What an earlier try ended as that leaves the edit open to another try.
OPEN_STATUSES = frozenset({"refused", "pruned", "kept"})
OPEN_OUTCOMES = frozenset({"insufficient", "improvement"})
# Statuses of a candidate that is backtested or piloted in its iteration (not yet decided).
LIVE_STATUSES = frozenset({"proposed", "backtested", "training", "trained"})


@dataclass(frozen=True)
class EarlierTry:
    """A try of the same edit that rules out another: who made it, how it ended, on what evidence."""

    candidate_id: str
    outcome: str
    evidence: str  # "the same incumbent commit" or "the same symptoms (<signature>)"


def own(cand: CandidateInfo) -> list[str]:
    """The skills or probes `cand` applies (a candidate with no skill is named by its slug)."""
    return [name for name in cand["skill"].split(",") if name] or [cand["slug"]]


def proposers(cand: CandidateInfo) -> list[str]:
    """Every proposer of `cand`'s edit in its iteration, its own first (`CandidateInfo.proposers`)."""
    return cand.get("proposers", own(cand))


def same_in_iteration(info: CandidateInfo, others: Iterable[CandidateInfo]) -> CandidateInfo | None:
    """The live candidate of `info`'s iteration among `others` that makes the same edit, if any."""
    key = info.get("content_key")
    if not key:
        return None
    return next(
        (
            c
            for c in others
            if c["iteration"] == info["iteration"] and c["status"] != "refused" and c.get("content_key") == key
        ),
        None,
    )


def tried_before(
    info: CandidateInfo, earlier: Iterable[CandidateInfo], cases: Iterable[Mapping[str, Any]]
) -> EarlierTry | None:
    """The earlier try by another proposer that settled `info`'s edit on the same evidence, if any.

    `earlier` are the session's candidates of earlier iterations; `cases` the domain's negative evidence as
    ``{"candidate_id", "outcome", "signature"}`` mappings (`case_signature` wrote the signature).
    """
    key, symptoms = info.get("content_key"), info.get("evidence_key", "")
    if not key:
        return None
    mine = set(own(info))
    for c in earlier:
        if c["iteration"] >= info["iteration"] or c.get("content_key") != key or set(own(c)) & mine:
            continue
        if c["status"] in OPEN_STATUSES or c["status"] in LIVE_STATUSES:
            continue
        if info.get("base_commit") and c.get("base_commit") == info.get("base_commit"):
            return EarlierTry(c["id"], c["status"], "the same incumbent commit")
        if symptoms and c.get("evidence_key") == symptoms:
            return EarlierTry(c["id"], c["status"], f"the same symptoms ({symptoms})")
    for case in cases:
        tried = case["signature"].get(TRIED_EDIT) if isinstance(case["signature"], Mapping) else None
        if not isinstance(tried, Mapping) or tried.get("content_key") != key or not symptoms:
            continue
        if tried.get("symptom_key") != symptoms or set(tried.get("tried_by", [])) & mine:
            continue
        if case["outcome"] is None or case["outcome"] in OPEN_OUTCOMES:
            continue
        return EarlierTry(str(case["candidate_id"]), str(case["outcome"]), f"the same symptoms ({symptoms})")
    return None


def case_signature(metrics: Mapping[str, Any], cand: CandidateInfo) -> dict[str, Any]:
    """A negative-evidence case's signature: the incumbent's metrics, plus the edit `cand` tried when it has one."""
    out = dict(metrics)
    if cand.get("content_key"):
        out[TRIED_EDIT] = {
            "content_key": cand.get("content_key"),
            "symptom_key": cand.get("evidence_key", ""),
            "tried_by": own(cand),
            "proposers": proposers(cand),
        }
    return out
