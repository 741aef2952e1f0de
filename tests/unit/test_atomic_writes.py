"""One atomic write (`harness/atomic.py`) instead of a write-then-rename in every package.

A reader sees the old file or the new one; a writer that fails leaves the old file and no temporary file; the
product writes no other way (a test finds a hand-made `.tmp` rename in product code).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.atomic import atomic_path, write_atomic

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("agent", "diagnostics", "harness", "sandboxes", "skills", "store", "trainer_backend")


def test_write_replaces_whole_and_leaves_nothing_behind(tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    target.write_text("old")
    write_atomic(target, "new ✓")
    assert target.read_text() == "new ✓"
    write_atomic(target, b"\x00bytes")
    assert target.read_bytes() == b"\x00bytes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "last.pt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("the writer died")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_the_product_renames_no_temporary_file_by_hand() -> None:
    by_hand = re.compile(r"\btmp\.replace\(|os\.replace\(tmp")
    found = sorted(
        str(p.relative_to(ROOT)) for pkg in PRODUCT for p in (ROOT / pkg).rglob("*.py") if by_hand.search(p.read_text())
    )
    assert found == ["harness/atomic.py"], found
