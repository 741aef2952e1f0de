"""Every mistake a user makes when starting a session is one clear error naming file/field and fix.

`agent.launch.input_checks.check_harness` on copies of the demo harness with one mistake each; no git, no store.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.launch.input_checks import SetupError, check_harness, check_store, closest

DEMO = Path(__file__).resolve().parents[2] / "examples" / "arithmetic"


def _demo(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DEMO, tmp_path / "h", ignore=shutil.ignore_patterns("__pycache__")))


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


def _missing_folder(h: Path) -> None:
    shutil.rmtree(h)


def _empty(h: Path) -> None:
    shutil.rmtree(h)
    h.mkdir()


def _no_manifest(h: Path) -> None:
    (h / "evotrainer.yaml").unlink()


def _bad_yaml(h: Path) -> None:
    (h / "evotrainer.yaml").write_text("name: arithmetic\nreward: [unclosed\n")


def _not_a_mapping(h: Path) -> None:
    (h / "evotrainer.yaml").write_text("- just\n- a list\n")


def _unknown_manifest_key(h: Path) -> None:
    _edit(h / "evotrainer.yaml", "trainer: {backend: local", "trainer: {backnd: local")


def _unknown_top_key(h: Path) -> None:
    (h / "evotrainer.yaml").write_text((h / "evotrainer.yaml").read_text() + "rewrad: harness/reward.py:x\n")


def _missing_function(h: Path) -> None:
    _edit(h / "evotrainer.yaml", "reward.py:compute_score", "reward.py:compute_scor")


def _missing_file(h: Path) -> None:
    (h / "harness" / "reward.py").unlink()


def _reward_syntax_error(h: Path) -> None:
    (h / "harness" / "reward.py").write_text("def compute_score(:\n    return 1\n")


def _missing_filter_function(h: Path) -> None:
    _edit(h / "evotrainer.yaml", "filters.py:filter_groups", "filters.py:keep_groups")


def _unknown_trainer_key(h: Path) -> None:
    _edit(h / "harness" / "trainer.yaml", "group_size: 8", "groupsize: 8")


def _bad_trainer_value(h: Path) -> None:
    _edit(h / "harness" / "trainer.yaml", "group_size: 8", "group_size: 1")


def _bad_trainer_yaml(h: Path) -> None:
    (h / "harness" / "trainer.yaml").write_text("lr: [1e-4\n")


CASES: list[tuple[Callable[[Path], None], list[str]]] = [
    (_missing_folder, ["does not exist", "evotrainer.yaml"]),
    (_empty, ["is empty", "evotrainer.yaml", "evotrainer init DIR"]),
    (_no_manifest, ["has no evotrainer.yaml"]),
    (_bad_yaml, ["evotrainer.yaml: not valid YAML", "fix the syntax"]),
    (_not_a_mapping, ["evotrainer.yaml", "mapping of fields"]),
    (_unknown_manifest_key, ["unknown field 'trainer.backnd'", "did you mean 'backend'?"]),
    (_unknown_top_key, ["unknown field 'rewrad'", "did you mean 'reward'?"]),
    (_missing_function, ["harness/reward.py defines no function 'compute_scor'", "'reward'", "'compute_score'"]),
    (_missing_file, ["field 'reward'", "harness/reward.py does not exist"]),
    (_reward_syntax_error, ["harness/reward.py: line 1", "fix the syntax", "'reward'"]),
    (_missing_filter_function, ["defines no function 'keep_groups'", "'group_filter'", "'filter_groups'"]),
    (_unknown_trainer_key, ["trainer.yaml: unknown trainer key 'groupsize'", "did you mean 'group_size'?"]),
    (_bad_trainer_value, ["trainer.yaml: field 'group_size'", "fix the value"]),
    (_bad_trainer_yaml, ["trainer.yaml: not valid YAML"]),
]


@pytest.mark.parametrize(("mistake", "expected"), CASES, ids=[c[0].__name__.strip("_") for c in CASES])
def test_each_mistake_is_one_error_naming_the_file_or_field_and_the_fix(
    tmp_path: Path, mistake: Callable[[Path], None], expected: list[str]
) -> None:
    harness = _demo(tmp_path)
    mistake(harness)
    with pytest.raises(SetupError) as err:
        check_harness(harness)
    message = str(err.value)
    for part in expected:
        assert part in message, message
    assert "Traceback" not in message


def test_the_demo_harness_passes(tmp_path: Path) -> None:
    assert check_harness(_demo(tmp_path)).manifest.name == "arithmetic"


def test_a_function_imported_or_assigned_at_module_level_counts(tmp_path: Path) -> None:
    harness = _demo(tmp_path)
    (harness / "harness" / "reward.py").write_text(
        (harness / "harness" / "reward.py").read_text().replace("def compute_score(", "def _score(")
        + "\ncompute_score = _score\n"
    )
    checked = check_harness(harness)  # raises SetupError when the alias is not found as the reward function
    assert checked.reward.function == "compute_score"


def test_an_unreachable_database_names_the_url_and_the_fix() -> None:
    with pytest.raises(SetupError) as err:
        check_store("postgresql+psycopg://postgres@127.0.0.1:1/nope")
    assert "cannot connect" in str(err.value) and "--db" in str(err.value)


def test_closest_suggests_a_near_name_or_lists_the_valid_ones() -> None:
    assert closest("lrr", ["lr", "group_size"]).startswith("did you mean 'lr'?")
    assert closest("zzz", ["lr", "group_size"]) == "valid: group_size, lr"
