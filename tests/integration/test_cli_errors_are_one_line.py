"""One error path for the CLI, tested per command, in a fresh interpreter as a user runs it.

Bad input exits 2 with one `error: ...` line on stderr (no traceback), names what is wrong (the store it
looked in, the file, the key with the closest valid one) and creates nothing. The same mistake reads the
same in every command: an unknown session in `status`, `report`, `resume` and `approve`; a trainer-key
typo in `run` and `train`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from store.engine import upgrade

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "arithmetic"


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("EVOTRAINER_DB", "COLUMNS")}
    env.update(PYTHONPATH=str(ROOT), HOME=str(cwd), EVOTRAINER_CACHE=str(cwd / "cache"))
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return lines[0]


def _demo(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DEMO, tmp_path / "mine", ignore=shutil.ignore_patterns("__pycache__")))


def test_run_with_an_unsupported_store_url_is_one_line(tmp_path: Path) -> None:
    line = _one_line(_cli(tmp_path, "run", "--harness", str(_demo(tmp_path)), "--db", "foo://bar"))
    assert "'foo'" in line and "--db" in line and "EVOTRAINER_DB" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


@pytest.mark.parametrize("command", [["run", "--sandbox", "process"], ["db", "upgrade"], ["status"]])
def test_a_sqlite_store_in_a_missing_folder_is_refused_not_created(tmp_path: Path, command: list[str]) -> None:
    store = tmp_path / "no" / "such" / "dir" / "x.db"
    args = [*command, "--harness", str(_demo(tmp_path))] if command[0] == "run" else command
    line = _one_line(_cli(tmp_path, *args, "--db", f"sqlite:///{store}"))
    assert str(store.parent) in line and "does not exist" in line
    assert not (tmp_path / "no").exists() and not (tmp_path / ".evotrainer").exists()


@pytest.mark.parametrize("command", ["status", "report", "resume", "approve"])
def test_an_unknown_session_reads_the_same_in_every_command_and_names_the_store(tmp_path: Path, command: str) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade(url)
    line = _one_line(_cli(tmp_path, command, "s0000-nope", "--db", url))
    assert line.startswith("error: no session 's0000-nope' ") and url in line, line
    hint = "; `evotrainer status` lists the store's sessions (--db URL or EVOTRAINER_DB names another store)"
    assert line.endswith(hint), line


def test_an_unknown_session_without_a_store_names_the_default_store(tmp_path: Path) -> None:
    for command in ("status", "report"):
        line = _one_line(_cli(tmp_path, command, "nope"))
        assert f"sqlite:///{tmp_path / '.evotrainer' / 'evotrainer.db'}" in line, line
    assert not (tmp_path / ".evotrainer").exists()


@pytest.mark.parametrize("command", ["run", "train"])
def test_a_trainer_key_typo_gets_the_same_did_you_mean_in_run_and_train(tmp_path: Path, command: str) -> None:
    harness = _demo(tmp_path)
    trainer = harness / "harness" / "trainer.yaml"
    trainer.write_text(trainer.read_text().replace("group_size: 8", "groupsize: 8"))
    line = _one_line(_cli(tmp_path, command, "--harness", str(harness)))
    assert line.startswith(f"error: {trainer}: unknown trainer key 'groupsize'; did you mean 'group_size'? (valid: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


@pytest.mark.parametrize(
    "args",
    [["train", "--harness", "{h}", "--backend", "foo"], ["run", "--sandbox", "vm"], ["status", "--bogus"]],
    ids=["bad-choice", "bad-sandbox", "unknown-option"],
)
def test_a_usage_error_is_one_line_naming_the_help(tmp_path: Path, args: list[str]) -> None:
    harness = _demo(tmp_path)
    line = _one_line(_cli(tmp_path, *(a.replace("{h}", str(harness)) for a in args)))
    assert f"`evotrainer {args[0]} --help` lists the options" in line.replace("python -m agent.cli", "evotrainer")


def test_init_into_a_used_folder_and_a_bad_harness_for_train_are_one_line(tmp_path: Path) -> None:
    harness = _demo(tmp_path)
    assert "not an empty folder" in _one_line(_cli(tmp_path, "init", str(harness)))
    (harness / "evotrainer.yaml").write_text("name: x\n")
    assert "evotrainer.yaml" in _one_line(_cli(tmp_path, "train", "--harness", str(harness)))
