"""Every path a harness file names follows one path rule, written and on disk.

The manifest's file fields, each backend's settings file and `Harness.path` refuse an absolute path, `..`,
a symlink anywhere along the path, a FIFO and a hard link, naming the file, the field and the rule; nothing
outside the harness is opened. Failure text a run result records is capped and free of control characters.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from diagnostics.backtest import failed_backtest
from harness.failures import MESSAGE_CHARS, Outcome, recorded
from harness.files import inside
from harness.manifest import HarnessError, load_harness
from harness.paths import PathRuleError
from trainer_backend.base import RunResult

DEMO = Path(__file__).resolve().parents[2] / "examples" / "arithmetic"


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DEMO, tmp_path / "h", ignore=shutil.ignore_patterns("__pycache__")))


def test_inside_accepts_files_folders_and_missing_paths(demo: Path) -> None:
    assert inside(demo, "harness/reward.py") == demo / "harness" / "reward.py"
    assert inside(demo, "./harness/") == demo / "harness"
    assert inside(demo, "harness/not-yet.yaml") == demo / "harness" / "not-yet.yaml"


@pytest.mark.parametrize("kind", ["symlink", "linked-folder", "fifo", "hard-link"])
def test_inside_refuses_links_and_odd_files(demo: Path, tmp_path: Path, kind: str) -> None:
    host = tmp_path / "host.txt"
    host.write_text("secret")
    target = demo / "harness" / "x.yaml"
    if kind == "symlink":
        target.symlink_to(host)
    elif kind == "linked-folder":
        (demo / "up").symlink_to(tmp_path)
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        os.link(host, target)
    rel = "up/host.txt" if kind == "linked-folder" else "harness/x.yaml"
    shown = {"symlink": "a symlink", "linked-folder": "a symlink", "fifo": "a FIFO", "hard-link": "a hard link"}[kind]
    with pytest.raises(PathRuleError, match=shown):
        inside(demo, rel)


@pytest.mark.parametrize(
    ("old", "new", "field", "rule"),
    [
        ("train: data/train.jsonl", "train: /etc/hostname", "data.train", "it is absolute"),
        ("val: data/val.jsonl", "val: data/../../x.jsonl", "data.val", "'..'"),
        ("verl: harness/verl.yaml", "verl: harness/linked.yaml", "trainer.verl", "a symlink"),
    ],
)
def test_the_manifest_refuses_paths_outside_naming_the_field(
    demo: Path, tmp_path: Path, old: str, new: str, field: str, rule: str
) -> None:
    (tmp_path / "host.yaml").write_text("model_path: x\n")
    (demo / "harness" / "linked.yaml").symlink_to(tmp_path / "host.yaml")
    manifest = demo / "evotrainer.yaml"
    assert old in manifest.read_text()
    manifest.write_text(manifest.read_text().replace(old, new))
    with pytest.raises(HarnessError) as caught:
        load_harness(demo)
    text = str(caught.value)
    assert text.startswith(f"{manifest}: field '{field}': ") and rule in text, text


def test_a_linked_manifest_is_refused(demo: Path, tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.yaml"
    (demo / "evotrainer.yaml").rename(real)
    (demo / "evotrainer.yaml").symlink_to(real)
    with pytest.raises(HarnessError, match="a symlink"):
        load_harness(demo)


def test_harness_path_refuses_a_link_made_after_loading(demo: Path, tmp_path: Path) -> None:
    harness = load_harness(demo)
    (demo / "harness" / "data.yaml").unlink()
    (demo / "harness" / "data.yaml").symlink_to(tmp_path)
    with pytest.raises(PathRuleError, match=r"harness/data\.yaml is a symlink"):
        harness.path("harness/data.yaml")
    with pytest.raises(PathRuleError, match="absolute"):
        harness.path("/etc/passwd")


def test_recorded_failure_text_is_capped_and_plain() -> None:
    assert recorded("a\nb\tc\x1b[31md\x00") == "a\nb\tc?[31md?"
    long = recorded("x" * 10 * MESSAGE_CHARS)
    assert len(long) <= MESSAGE_CHARS and long.endswith(f"(cut: {10 * MESSAGE_CHARS} characters in all)")
    result = RunResult(run_id="r", outcome="candidate_error", out_dir=Path("."), message="y" * 100_000)
    assert len(result.message) <= MESSAGE_CHARS
    backtest = failed_backtest("c", Outcome.CANDIDATE_ERROR, "z" * 100_000, "harness/reward.py")
    assert len(backtest.message) <= MESSAGE_CHARS and all(len(r) <= MESSAGE_CHARS + 20 for r in backtest.reasons)
