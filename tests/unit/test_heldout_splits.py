"""The held-out data splits into a selection split and a sealed test split, deterministically."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from harness.manifest import DataPaths
from harness.splits import SEALED_FRACTION, heldout_splits, split_heldout
from trainer_backend.verl.data import sealed_lines


def _rows(n: int, sources: tuple[str, ...] = ("a", "b")) -> list[dict[str, object]]:
    return [{"prompt": f"{i}+{i}=>", "ground_truth": str(2 * i), "data_source": sources[i % len(sources)]}
            for i in range(n)]  # fmt: skip


def test_the_split_is_disjoint_complete_and_stratified() -> None:
    rows = _rows(300)
    selection, sealed = split_heldout(rows, 0.25, "data_source")
    assert len(sealed) == 76 and len(selection) == 224  # round(0.25 * 150) = 38 per source
    assert {r["prompt"] for r in selection}.isdisjoint(r["prompt"] for r in sealed)
    assert sorted(map(str, selection + sealed)) == sorted(map(str, rows))
    assert sum(r["data_source"] == "a" for r in sealed) == 38 == sum(r["data_source"] == "b" for r in sealed)


def test_a_prompt_keeps_its_side_when_rows_move_or_others_are_added() -> None:
    rows = _rows(200)
    _, sealed = split_heldout(rows, 0.25, "data_source")
    shuffled = rows[:]
    random.Random(3).shuffle(shuffled)
    _, again = split_heldout(shuffled, 0.25, "data_source")
    assert {r["prompt"] for r in again} == {r["prompt"] for r in sealed}
    selection, _ = split_heldout(rows, 0.25, "data_source")
    assert [r for r in rows if r in selection] == selection  # each split keeps the file's order


def test_no_sealing_and_bad_fractions() -> None:
    rows = _rows(10)
    assert split_heldout(rows, 0.0, "data_source") == (rows, [])
    assert split_heldout(rows[:1], 0.5, "data_source") == (rows[:1], [])  # one row stays for decisions
    with pytest.raises(ValueError, match="sealed fraction"):
        split_heldout(rows, 1.0, "data_source")


def test_a_test_file_is_the_sealed_split_and_the_held_out_file_all_selection() -> None:
    data = DataPaths(train="t.jsonl", val="v.jsonl", test="s.jsonl")
    files = {"v.jsonl": _rows(8), "s.jsonl": _rows(3, ("z",))}
    assert heldout_splits(data, files.__getitem__) == (files["v.jsonl"], files["s.jsonl"])
    assert DataPaths(train="t", val="v").sealed_fraction == SEALED_FRACTION


def test_verl_leaves_out_the_same_rows_the_local_trainer_seals(tmp_path: Path) -> None:
    rows = _rows(120, ("a", "b", "c"))
    path = tmp_path / "val.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    _, sealed = split_heldout(rows, SEALED_FRACTION, "data_source")
    lines = sealed_lines(path, DataPaths(train="t", val="val.jsonl"))
    assert {rows[n - 1]["prompt"] for n in lines} == {r["prompt"] for r in sealed}
    assert sealed_lines(path, DataPaths(train="t", val="val.jsonl", test="s.jsonl")) == frozenset()


def test_a_test_file_must_be_protected_and_counts_as_held_out_data(tmp_path: Path) -> None:
    import shutil

    from harness.manifest import HarnessError, load_harness
    from trainer_backend.local.vocab import harness_texts

    root = Path(shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "arithmetic-oracle", tmp_path / "h"))
    (root / "data" / "test.jsonl").write_text(json.dumps({"prompt": "7%7=>", "ground_truth": "0"}) + "\n")
    manifest = root / "evotrainer.yaml"
    text = manifest.read_text()
    assert "val: data/val.jsonl" in text
    manifest.write_text(text.replace("val: data/val.jsonl", "val: data/val.jsonl, test: data/test.jsonl"))
    with pytest.raises(HarnessError, match=r"surface.protected' must cover data/test.jsonl \(data.test\)"):
        load_harness(root)  # the example protects data/val.jsonl file by file
    protect = manifest.read_text().replace("eval/, data/val.jsonl,", "eval/, data/val.jsonl, data/test.jsonl,")
    manifest.write_text(protect)
    harness = load_harness(root)
    assert harness.manifest.data.heldout == ("data/val.jsonl", "data/test.jsonl")
    assert any(t.path == "data/test.jsonl" and "%" in t.text for t in harness_texts(harness, None))
