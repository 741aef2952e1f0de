"""Code and docs speak to a reader of this repository: no references to an issue tracker it does not hold.

"(issue 25 §4)" or "style principle 8" points at nothing a newcomer has; the text says what the code does
and why instead. Measured results (benchmarks/RESULTS.md) keep their history, and migrations their dates.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACKER = re.compile(r"\b[Ii]ssues? #?\d+|\bstyle principle \d+|\bprinciple \d+\)")
KEEP = ("benchmarks/RESULTS.md", "migrations/versions/", "tests/unit/test_prose_names_no_tracker.py")


def test_no_tracked_code_or_doc_points_at_the_issue_tracker() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "*.py", "*.md", "*.yaml", "*.toml", "*.sh", "Makefile"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    found = [
        f"{name}:{n}"
        for name in listed
        if not name.startswith(KEEP) and (ROOT / name).is_file()
        for n, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1)
        if TRACKER.search(line)
    ]
    assert found == [], f"say what the code does instead of citing the tracker: {found[:20]}"


def test_the_pattern_finds_the_forms_it_is_for() -> None:
    assert all(TRACKER.search(s) for s in ("(issue 25 §4)", "issues #8, #18", "Issue 17:", "style principle 8"))
    assert not TRACKER.search("a reissued token, 25 issues of the tool")
