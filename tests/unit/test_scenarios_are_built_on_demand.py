"""Scenarios are committed as their defects and built on demand, byte for byte as they were committed.

`scenario_cache.scenario_dir` builds each scenario into a cache keyed by a digest of its inputs, atomically,
once; the tracked tree holds no scenario folder. The pinned digests below are those of the scenario folders
as last committed (commit 0a22c3f, before they were deleted): every build must still equal them, so the
benchmark results measured on those folders stay valid. When an example or a generator is changed on
purpose, re-measure the scenarios it touches (benchmarks/RESULTS.md) and update the digests here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import make_scenarios
import pytest
import scenario_cache
from scenario_cache import CACHE_ENV, content_digest, inputs_digest, scenario_dir, scenario_names

ROOT = Path(__file__).resolve().parents[2]
GENERATORS = ROOT / "benchmarks" / "scenarios"

# content_digest of each scenario folder (both forms and scenario.json) as committed at 0a22c3f; the synth-*
# digests changed when examples/synth-fn{,-oracle} declared their reward's step budgets as knobs (re-measured
# in benchmarks/RESULTS.md, "Session 10"); the agentic ones when examples/lookup-agent{,-oracle}
# declared their environment's lookup limit as a knob (re-measured in "Session 12").
COMMITTED = {
    "cold-sampling": "00cfc1ecc83851c970e5f5d5b8389e8ed2c73fad61741ee04c87093a1e7f032a",
    "dead-groups": "c5557c137308024ea9e31110b9e3c77822f559c9d2d9281906f2f4f8571ae043",
    "env-episode-leak": "efbf927a531a4f015e1b53237b493bc6ac1a30e6af3e129064245555991ced6d",  # added, not measured
    "env-lookup-limit": "e971fb84087bd78751a5247c08b3731d500b8220c50fcfbe43815f11102318d1",  # added
    "format-gate": "ac80a57104e5409d1522672579b6f21ae90f4a60fa1a47b7d0675e97ad2da58a",
    "greedy-filter": "21a6247f4decf28a31e9ed0756ba1e7ab80a41c19bdb5e3056a88dc9a427e790",
    "hackable-reward": "650f24cc1bea5cc73139ab7c5c6f64afc5c273132a120e563e8a79b23c6b29aa",
    "length-budget": "54647574803edf64be5a9950760e2ee1c12175133efe6376cad51eb91933f5dd",
    "narrow-mix": "0690ccbf913105ebfc96f73c617f2183e12dad949890e43a404451ed906d6244",
    "no-warm-start": "b543b874f6565ad511fb7b74d23cf13681725f7bed7d90b5927251a204027b4a",  # added later
    "one-turn-collapse": "e0ca42c93dc5e55af068b76a314d6231731f66c3eb8ae8b6b8551dd31ed9c6ce",
    "shortcut-bonus": "275e1792a29db3442224d782efa2ff990363032ac762f3316a04d678c6922bbe",
    "synth-format-gate": "3ffa94f7b2e38dc884f69f4fdbb436503a6427ea99d2ebc358e9ee7ac310e366",
    "synth-length-budget": "9d854969594d388bbde5fa1db1d02f321785f26a0c70bcc73827f9da18b9f6cc",
    "synth-shown-tests": "202899c8b7c6bb5bb51a430290e46e784948039c1c75571b209c9f4c283a6862",
    "synth-test-timeout": "bd85a44a29d28151eebab7ccecb8421e174fc4668eebab60bc3233efbb36f532",
    "tiny-batch": "5465aa7d130e0379026a33306b834b1e550f8cdedb43b5d44a323b191baeb829",
    "tool-spam": "a5f77434a343f56ee7dfc7d5c2af1822ed46c06e0316cdaf9684d6880c37eb1c",
    "train-leak": "6fa9a1f84cb4899e49337bede0ed951ea5ce28222c38c6eb0531cdbe4c11ae6a",
    "turn-budget": "2529e4f882d642f7201634a44dc0a12d3a4d1d4589ac19b853ca65d12d188c00",
    "turn-token-cap": "0041c29e688e0fe21a24cd311bf1281ff3ac1bd0a4684bd86c64f8f000fb7076",
    "unstable-optimiser": "f154d10dc748e14e46f269eedcd1da787eaeadf93bbde817d46f14fd11b02fdb",
}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private, empty cache for one test."""
    root = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(root))
    return root


def test_every_scenario_builds_to_its_committed_content() -> None:
    assert scenario_names() == sorted(COMMITTED)
    changed = [name for name in scenario_names() if content_digest(scenario_dir(name)) != COMMITTED[name]]
    assert changed == [], f"{changed} no longer build as committed; see this module's docstring"


def test_a_build_holds_both_forms_under_a_folder_named_after_the_scenario(cache: Path) -> None:
    folder = scenario_dir("tiny-batch")
    assert folder == cache / inputs_digest() / "tiny-batch"
    assert sorted(p.name for p in folder.iterdir()) == ["defective", "oracle", "scenario.json"]
    assert scenario_dir("tiny-batch", "oracle") == folder / "oracle"
    assert content_digest(folder) == COMMITTED["tiny-batch"]


def test_a_build_is_reused_not_redone(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = scenario_dir("narrow-mix", "defective")
    marker = first / "marker"  # a rebuild would not keep it
    marker.write_text("x")

    def no_build(*args: object) -> None:
        raise AssertionError("rebuilt a scenario that was built already")

    monkeypatch.setattr(scenario_cache, "_build", no_build)
    assert scenario_dir("narrow-mix", "defective") == first and marker.is_file()


def test_any_input_change_moves_the_cache_path_and_bytecode_does_not(tmp_path: Path) -> None:
    generators, examples = tmp_path / "generators", tmp_path / "examples"
    generators.mkdir()
    for path in GENERATORS.glob("*.py"):
        shutil.copy(path, generators)
    shutil.copytree(ROOT / "examples", examples, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    base = inputs_digest(generators, examples)
    assert base == inputs_digest()  # names are relative: the same inputs anywhere give the same digest

    (examples / "arithmetic-oracle" / "__pycache__").mkdir()
    (examples / "arithmetic-oracle" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert inputs_digest(generators, examples) == base  # bytecode is never copied into a scenario

    data = examples / "arithmetic-oracle" / "data" / "val.jsonl"
    data.write_bytes(data.read_bytes() + b"\n")
    assert inputs_digest(generators, examples) != base  # an example's data
    shutil.copy(ROOT / "examples" / "arithmetic-oracle" / "data" / "val.jsonl", data)
    assert inputs_digest(generators, examples) == base
    (examples / "lookup-agent" / "harness" / "new.py").write_text("")
    assert inputs_digest(generators, examples) != base  # a new file in an example
    (examples / "lookup-agent" / "harness" / "new.py").unlink()
    gen = generators / "make_explore_scenarios.py"
    gen.write_text(gen.read_text().replace("COLD_TEMPERATURE = 0.1", "COLD_TEMPERATURE = 0.2"))
    assert inputs_digest(generators, examples) != base  # a generator's code


def test_a_failed_build_leaves_nothing_behind(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = scenario_cache.recipes()["cold-sampling"]

    def broken(root: Path) -> None:
        raise RuntimeError("the demo changed shape")

    table = {"cold-sampling": make_scenarios.Recipe(recipe.scenario, recipe.base, recipe.copy_base, broken)}
    monkeypatch.setattr(scenario_cache, "recipes", lambda: table)
    with pytest.raises(RuntimeError, match="changed shape"):
        scenario_dir("cold-sampling")
    assert list((cache / inputs_digest()).iterdir()) == []  # neither a half-built scenario nor its temporary copy
    monkeypatch.undo()
    monkeypatch.setenv(CACHE_ENV, str(cache))
    assert content_digest(scenario_dir("cold-sampling")) == COMMITTED["cold-sampling"]


def test_a_build_that_loses_the_race_keeps_the_winners_folder(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    final = cache / inputs_digest() / "turn-budget"
    write = make_scenarios.Recipe.write

    def racing(self: make_scenarios.Recipe, folder: Path) -> None:
        write(self, final)  # another process renames its build into place while this one writes
        (final / "winner").write_text("x")
        write(self, folder)

    monkeypatch.setattr(make_scenarios.Recipe, "write", racing)
    assert scenario_dir("turn-budget") == final
    assert (final / "winner").is_file()  # the winner's folder was neither replaced nor merged into
    assert sorted(p.name for p in final.parent.iterdir()) == ["turn-budget"]  # the loser's copy is gone


def test_processes_building_one_scenario_at_once_all_get_the_complete_folder(cache: Path) -> None:
    code = "import scenario_cache as c; print(c.scenario_dir('train-leak'))"
    env = {**os.environ, CACHE_ENV: str(cache), "PYTHONPATH": str(GENERATORS)}
    cmd, pipe = [sys.executable, "-c", code], subprocess.PIPE
    procs = [subprocess.Popen(cmd, env=env, stdout=pipe, stderr=pipe, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in outs]
    folders = {Path(out.strip()) for out, _ in outs}
    assert folders == {cache / inputs_digest() / "train-leak"}
    assert content_digest(folders.pop()) == COMMITTED["train-leak"]
    assert sorted(p.name for p in (cache / inputs_digest()).iterdir()) == ["train-leak"]  # no temporary copy left


def test_an_unknown_scenario_or_form_is_named_with_the_valid_ones(cache: Path) -> None:
    with pytest.raises(ValueError, match=r"unknown scenario 'nope'.*tiny-batch"):
        scenario_dir("nope")
    with pytest.raises(ValueError, match=r"unknown scenario form 'fixed'.*defective, oracle"):
        scenario_dir("tiny-batch", "fixed")
    assert not cache.exists()  # nothing was built


@pytest.mark.usefixtures("git_available")
def test_the_tracked_tree_holds_the_generators_not_the_folders() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "ls-files", "benchmarks/scenarios"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    assert sorted(listed) == sorted(
        ["benchmarks/scenarios/README.md"] + [f"benchmarks/scenarios/{p.name}" for p in GENERATORS.glob("*.py")]
    )
