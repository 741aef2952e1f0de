"""A probe draft: one move of one knob, before it is ranked (`agent/policies/explore.py`).

The builders live in `agent/policies/probe_drafts.py` (trainer settings, code constants, filter, data) and
`agent/policies/reward_drafts.py` (the reward's components, gates, reference and checks). Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agent.policies.symptoms import UNPROMPTED, Abnormal, Symptom

ENTRY = re.compile(r"[^a-z0-9]+")  # a run of characters a skill name or slug cannot hold


@dataclass
class Draft:
    """One move of one knob, and the abnormal symptoms that support it (filled in when probes are ranked)."""

    probe_id: str
    knob: str  # one probe per knob and iteration
    factor: str
    slug: str
    ops: list[dict[str, object]]
    params: dict[str, float | int | str]
    effects: tuple[str, ...]
    what: str
    why: str
    own_symptom: Symptom | None = None  # evidence that names this knob itself: out of range, a gate that fails
    restarts: bool = False  # the knob acts only from the starting model: the pilot restarts there
    rung: int | None = None  # a knob's move: its magnitude's place in the move's ladder (probe id ends ":m<rung>")
    support: list[Abnormal] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(a.symptom.weight for a in self.support)

    @property
    def pinpointed(self) -> float:
        """The weight of the support that names this probe's knob (`PINPOINTING`, `OUT_OF_RANGE`)."""
        return sum(a.symptom.weight for a in self.support if a.symptom.name in UNPROMPTED)
