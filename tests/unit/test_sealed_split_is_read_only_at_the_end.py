"""Nothing in the loop reads the sealed test split; the session's end shows it.

Structural: the only product modules that name the sealed split are the ones that define it, write it (the
local trainer, once per run, to a folder no loop reader opens), keep it out of verl's validation, and read
it for a finished session's summary and status. A new reader elsewhere fails here and needs a reason.
"""

from __future__ import annotations

import re
from pathlib import Path

from agent.reporting.summary import Choice, SealedScore, SessionSummary, VersionLine, sealed_lines
from diagnostics.schema import SPLITS

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("agent", "diagnostics", "harness", "sandboxes", "skills", "store", "trainer_backend")
ALLOWED = {
    "harness/splits.py": "defines the split",
    "harness/manifest.py": "the manifest's data.test / data.sealed_fraction fields",
    "trainer_backend/local/train.py": "reads the sealed rows and scores them once, at the run's end",
    "trainer_backend/local/step.py": "`seal`: the greedy scoring of those rows into rollouts/sealed/",
    "trainer_backend/verl/data.py": "leaves the sealed rows out of verl's validation data",
    "agent/reporting/summary.py": "reads it once the session has ended",
    "agent/commands/status.py": "shows it for a finished session",
    "agent/commands/export.py": "the exported model card shows it, as status does, after the session",
    "trainer_backend/local/plugin.py": "`cost_line` counts the selection rows a run validates on (not the sealed)",
}
NAMES = re.compile(r"SEALED_SPLIT|sealed_rows|sealed_score|sealed_lines|heldout_splits|split_heldout|sealed_fraction")


def test_only_the_listed_modules_name_the_sealed_split() -> None:
    found = {
        str(p.relative_to(ROOT))
        for pkg in PRODUCT
        for p in (ROOT / pkg).rglob("*.py")
        if NAMES.search(p.read_text()) or "rollouts/sealed" in p.read_text()
    }
    assert found <= set(ALLOWED), f"a new reader of the sealed split: {sorted(found - set(ALLOWED))}"
    assert "sealed" not in SPLITS  # the loop's readers (run table, diagnostics, tools, backtests) read these only


def _summary(sealed: dict[int, SealedScore] | None) -> SessionSummary:
    versions = [VersionLine(0, "starting harness", 0.6, 10, "", ()), VersionLine(1, "merged x", 0.8, 20, "", ())]
    return SessionSummary("s", "finished", "", versions, Choice(1, "best"), 20, 100, sealed=sealed)


def test_a_running_session_shows_no_sealed_score_and_a_finished_one_shows_both_splits() -> None:
    assert sealed_lines(_summary(None)) == ["sealed test split: scored, and shown here, once the session has ended"]
    [line] = sealed_lines(_summary({1: SealedScore(0.75, 0.66, 0.84, 75)}))
    assert "v1 (the version to use): selection split 0.800 (every decision read it)" in line
    assert "sealed test split 0.750 [95% CI 0.660, 0.840], n=75 (no decision read it)" in line
    missing = sealed_lines(_summary({1: SealedScore(None, note="its run scored no sealed split")}))
    assert "sealed test split none (its run scored no sealed split)" in missing[0]
