"""Each program-synthesis scenario's defect does what its scenario.json says, and its oracle does not.

Generation sync and "two valid harnesses differing in one editable file" are checked for every scenario in
`test_scenarios_defects.py`; here each defect is checked on the harness code and config, without training:
the canonical programs of the task (from `examples/make_synth_data.py`) against the defective and the
oracle reward, scored next to the protected strict evaluator.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from scenario_cache import scenario_dir

from harness.calls import load_function
from harness.manifest import load_harness
from trainer_backend.local.vocab import tokenizer_for

ROOT = Path(__file__).resolve().parents[2]
SYNTH_NAMES = ("synth-format-gate", "synth-length-budget", "synth-shown-tests", "synth-test-timeout")
PER_FAMILY = 30


def _module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return _module(ROOT / "examples" / "make_synth_data.py", "make_synth_data_for_scenarios")


def _fns(name: str, form: str, callable_name: str) -> Any:
    folder = scenario_dir(name, form)
    harness = load_harness(folder)
    return load_function(folder, harness.reward if callable_name == "reward" else harness.strict_eval)


def _problems(gen: ModuleType, family: str) -> list[tuple[dict[str, Any], str, str]]:
    """(row, canonical program, hard-coded lookup) for the first problems of a family in the training file."""
    train_fns, _ = gen.split_functions(seed=1001)
    by_prompt = {gen.prompt_text(fn): fn for fn in train_fns[family]}
    path = scenario_dir(SYNTH_NAMES[0], "oracle") / "data" / "train.jsonl"
    rows = [r for r in map(json.loads, path.read_text().splitlines()) if r["data_source"] == f"synth/{family}"]
    out = []
    for row in rows[:PER_FAMILY]:
        fn = by_prompt[row["prompt"]]
        lookup = "[" + ",".join(str(gen.value(fn, x)) for x in gen.SHOWN_INPUTS) + "][x]"
        out.append((row, gen.program(fn), lookup))
    return out


def _extra(row: dict[str, Any]) -> dict[str, Any]:
    """extra_info as the local trainer passes it: the row's fields beyond the reward's arguments."""
    return {"public_tests": row["public_tests"], "split": "train", "prompt_id": row["prompt_id"]}


def test_scenarios_are_listed_with_symptoms() -> None:
    for name in SYNTH_NAMES:
        meta = json.loads((scenario_dir(name) / "scenario.json").read_text())
        assert meta["name"] == name and meta["symptom"] and meta["fix"]
        assert load_harness(scenario_dir(name, "defective")).manifest.name == "synth-fn"


def test_shown_tests_pays_hard_coded_examples_that_strict_rejects(gen: ModuleType) -> None:
    bad, good = _fns("synth-shown-tests", "defective", "reward"), _fns("synth-shown-tests", "oracle", "reward")
    strict = _fns("synth-shown-tests", "oracle", "strict")
    for family in ("affine", "mod", "loop"):
        for row, right, lookup in _problems(gen, family):
            truth = row["ground_truth"]
            assert strict(lookup, truth) == 0.0 and strict(right, truth) == 1.0
            assert bad(row["data_source"], lookup, truth, _extra(row))["score"] == 1.0  # training: row fields
            assert bad(row["data_source"], lookup, truth, {"prompt": row["prompt"]})["score"] == 1.0  # backtest
            assert good(row["data_source"], lookup, truth, _extra(row))["score"] == 0.0
            assert good(row["data_source"], right, truth, _extra(row))["score"] == 1.0


def test_test_timeout_fails_correct_loop_programs_only(gen: ModuleType) -> None:
    bad, good = _fns("synth-test-timeout", "defective", "reward"), _fns("synth-test-timeout", "oracle", "reward")
    for row, right, _ in _problems(gen, "loop"):
        out = bad(row["data_source"], right, row["ground_truth"], _extra(row))
        assert out["score"] == 0.0 and out["timeouts"] == 1.0 and out["parsed"] == 1.0
        assert good(row["data_source"], right, row["ground_truth"], _extra(row)) == {
            "score": 1.0,
            "parsed": 1.0,
            "timeouts": 0.0,
        }
    for family in ("affine", "mod"):  # the fast families are untouched: the defect is specific
        for row, right, _ in _problems(gen, family):
            assert bad(row["data_source"], right, row["ground_truth"], _extra(row))["score"] == 1.0


def test_format_gate_pays_nothing_for_correct_mod_and_loop_programs(gen: ModuleType) -> None:
    bad, good = _fns("synth-format-gate", "defective", "reward"), _fns("synth-format-gate", "oracle", "reward")
    for family, paid in (("affine", 1.0), ("mod", 0.0), ("loop", 0.0)):
        for row, right, _ in _problems(gen, family):
            assert bad(row["data_source"], right, row["ground_truth"], _extra(row))["score"] == paid
            assert good(row["data_source"], right, row["ground_truth"], _extra(row))["score"] == 1.0


def test_length_budget_cuts_every_correct_loop_program(gen: ModuleType) -> None:
    folder = scenario_dir("synth-length-budget")
    tok = tokenizer_for(load_harness(folder / "defective"), "data/warmstart.jsonl", None)
    budget = yaml.safe_load((folder / "defective" / "harness" / "trainer.yaml").read_text())["max_new_tokens"]
    fixed = yaml.safe_load((folder / "oracle" / "harness" / "trainer.yaml").read_text())["max_new_tokens"]
    need = {f: [len(tok.encode(right)) + 1 for _, right, _ in _problems(gen, f)] for f in ("affine", "mod", "loop")}
    assert min(need["loop"]) > budget  # program + EOS: none fits
    assert max(need["affine"]) <= budget  # the short family fits: the budget is tight, not absurd
    lookups = [len(tok.encode(lookup)) + 1 for f in ("mod", "loop") for _, _, lookup in _problems(gen, f)]
    assert max(need["loop"] + lookups) <= fixed  # the oracle's budget holds every program of the task
