"""pytest's default (rootdir-relative, no packages) import mode loads test modules by basename: two test files with
the same name in tests/unit and tests/integration stop the whole run at collection (CI failed so, exit 2)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename() -> None:
    # pytest collects test_*.py; fixture folders (a harness's reward.py) are data, never imported by basename
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    shared = sorted(name for name, count in names.items() if count > 1)
    assert not shared, f"test modules share a basename (rename one): {shared}"
