"""Programs are hostile, so the reward and the strict evaluator run
them in a restricted interpreter under step budgets, never through ``eval``.

Protected properties: hostile programs (infinite-looking loops, huge powers, huge lists, strings, deep
nesting, exceptions) cost at most milliseconds and score 0; a batch of them stays far inside the sandbox's
per-call timeout; the interpreter computes what Python computes on the language; the reward's and the
strict evaluator's interpreters are the same code; the reward is the pass ratio over the hidden tests
and the strict evaluator demands every held-out test.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
ORACLE = ROOT / "examples" / "synth-fn-oracle"
DEMO = ROOT / "examples" / "synth-fn"
TESTS = "6>25;9>37;12>49;20>81;33>133;40>161"  # 4*x+1 at unseen inputs
MARK_START, MARK_END = "# --- interpreter:", "# --- end of the interpreter ---"
# Every one of these must fail fast: the language has no strings, no loops but budgeted builtins, and
# bounded integers, lists and nesting.
HOSTILE = [
    "sum(range(10**18))",  # a loop of 10^18 steps: charged before it runs
    "max(range(10**17))+min(range(10**17))",
    "sum(range(x**9))",
    "x**10**10",  # a huge power: refused before computing
    "(x+1)**64**64",
    "9**9**9**9",
    "10**18*10**18",
    "'a'*10**9",  # strings do not parse
    "[1]*10**9",  # no list arithmetic
    "[" + ",".join(["x"] * 65) + "][0]",  # list literal too long
    "(" * 60 + "x" + ")" * 60,  # nested too deeply
    "-" * 150 + "x",
    "+".join(["sum(range(x*x*x))"] * 20),  # many budgeted loops: the program budget binds
    "x//0",
    "x%0",
    "[1,2][x]",  # index out of range for the hidden inputs
    "range(x)",  # not an integer
    "__import__('os').system('true')",
    "eval('1')",
    "open('/eval/strict.py').read()",
    "x" * 5000,  # too long
    "().__class__.__bases__[0].__subclasses__()",  # dunder walks: no attributes, no tuples
    "x.__class__",
    "__builtins__",
    "globals()",
    "lambda: 1",
    "[y for y in range(10**9)]",  # comprehensions do not parse
    "while True: pass",  # statements do not parse
    "x;import os",
    "x if x else 1",
    "\u0663*x",  # a non-ASCII digit
    "x" + "[0]" * 60,  # an integer is not indexable
    "+".join(["x"] * 99),  # a long flat chain: fine, but wrong
    "",
    "\x00\n\t",
]


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def reward() -> ModuleType:
    return _load(ORACLE / "harness" / "reward.py", "synth_fn_reward_under_test")


@pytest.fixture(scope="module")
def strict() -> ModuleType:
    return _load(ORACLE / "eval" / "strict.py", "synth_fn_strict_under_test")


def _block(path: Path) -> str:
    text = path.read_text()
    start, end = text.index(MARK_START), text.index(MARK_END)
    return text[text.index("\n", start) : end]


def test_reward_and_strict_evaluator_share_one_interpreter() -> None:
    oracle = _block(ORACLE / "harness" / "reward.py")
    assert oracle == _block(ORACLE / "eval" / "strict.py")
    assert oracle == _block(DEMO / "harness" / "reward.py") == _block(DEMO / "eval" / "strict.py")
    for path in (ORACLE / "harness" / "reward.py", ORACLE / "eval" / "strict.py"):
        assert "eval(" not in path.read_text().replace("evaluate(", "")  # never Python's eval


@pytest.mark.parametrize("program", HOSTILE)
def test_hostile_programs_fail_fast_and_score_zero(program: str, reward: ModuleType, strict: ModuleType) -> None:
    t0 = time.perf_counter()
    out = reward.compute_score("synth/affine", program, TESTS, {})
    assert strict.score(program, TESTS) == 0.0
    assert time.perf_counter() - t0 < 0.25
    assert out["score"] == 0.0 and set(out) == {"score", "parsed", "timeouts"}


def test_loops_past_the_budget_are_timeouts_not_errors(reward: ModuleType) -> None:
    out = reward.compute_score("synth/loop", "sum(range(10**18))", TESTS, {})
    assert out == {"score": 0.0, "parsed": 1.0, "timeouts": 1.0}
    assert reward.compute_score("synth/loop", "'a'*9", TESTS, {})["parsed"] == 0.0


def test_a_batch_of_hostile_programs_stays_far_inside_the_sandbox_call_timeout(reward: ModuleType) -> None:
    batch = [HOSTILE[i % len(HOSTILE)] for i in range(128)]  # one training step's worth of samples
    t0 = time.perf_counter()
    for program in batch:
        reward.compute_score("synth/loop", program, TESTS, {})
    assert time.perf_counter() - t0 < 3.0  # the sandbox allows 30 s per call


def test_the_program_budget_caps_the_steps_of_all_tests_together(reward: ModuleType) -> None:
    tests = ";".join(f"{x}>{x * (x + 1) // 2}" for x in range(40, 48))
    # ~41 steps per test fits the per-test limit, but 8 tests of 3000 steps do not fit the program's
    slow = "sum(range(x+1))+sum(range(x*70))-sum(range(x*70))"
    passed, timed_out, parsed = reward.run_tests(slow, reward.parse_tests(tests), 10**6, 10000, 5.0)
    assert parsed and timed_out > 0 and passed + timed_out == 8


def test_the_interpreter_computes_what_python_computes(reward: ModuleType) -> None:
    rng = random.Random(0)

    def gen(depth: int = 0) -> str:
        c = rng.random()
        if depth > 3 or c < 0.3:
            return rng.choice(["x", str(rng.randint(0, 20))])
        if c < 0.75:
            return f"({gen(depth + 1)}{rng.choice(['+', '-', '*', '//', '%'])}{gen(depth + 1)})"
        if c < 0.8:
            return f"({gen(depth + 1)})**{rng.randint(0, 3)}"
        if c < 0.9:
            return f"-{gen(depth + 1)}"
        return rng.choice(
            [
                f"sum(range({gen(depth + 1)}))",
                f"sum(range({gen(depth + 1)},{gen(depth + 1)}))",
                f"[{gen(depth + 1)},{gen(depth + 1)},{gen(depth + 1)}][{gen(depth + 1)}]",
                f"max({gen(depth + 1)},{gen(depth + 1)})",
                f"min(range({gen(depth + 1)}))",
                f"abs({gen(depth + 1)})",
            ]
        )

    builtins = {"sum": sum, "range": range, "max": max, "min": min, "abs": abs}
    checked = 0
    for _ in range(1500):
        program = gen()
        for x in (0, 3, 7, -2):
            try:
                # the test's own oracle, on generated programs only (never model output):
                # Python on programs of bounded size (depth <= 4, exponents <= 3)
                expected = eval(program, {"__builtins__": {}}, {"x": x, **builtins})
            except (ArithmeticError, IndexError, ValueError, TypeError):
                expected = None
            try:
                got = reward.evaluate(reward.parse(program), x, reward.Budget(10**6))
            except reward.ProgramError:
                got = None
            if isinstance(expected, int) and abs(expected) > reward.MAX_INT:
                assert got is None
                continue
            assert got == expected, (program, x)
            checked += expected is not None
    assert checked > 2000  # most programs are valid: the comparison is not vacuous


def test_the_reward_is_the_pass_ratio_over_the_hidden_tests(reward: ModuleType) -> None:
    assert reward.compute_score("synth/affine", "4*x+1", TESTS, {})["score"] == 1.0
    assert reward.compute_score("synth/affine", " 1 + x*4 ", TESTS, {})["score"] == 1.0  # any equivalent form
    half = reward.compute_score("synth/affine", "min(4*x+1,100)", TESTS, {})
    assert half["score"] == pytest.approx(4 / 6)  # partial credit: the paper's continuous pass ratio
    assert reward.compute_score("synth/affine", "4*x", TESTS, {})["score"] == 0.0


def test_strict_needs_every_held_out_test_and_never_pays_hard_coded_examples(strict: ModuleType) -> None:
    assert strict.score("4*x+1", TESTS) == 1.0
    assert strict.score("min(4*x+1,100)", TESTS) == 0.0  # 4 of 6 tests is wrong
    assert strict.score("[1,5,9,13,17,21][x]", TESTS) == 0.0  # the shown examples, hard-coded
    loop = ";".join(f"{x}>{x * (x + 1) // 2 * 3 + 4}" for x in (6, 20, 40))
    assert strict.score("sum(range(x+1))*3+4", loop) == 1.0  # a correct slow program passes
    assert strict.score("x*(x+1)//2*3+4", loop) == 1.0
    assert strict.score("sum(range(x))*3+4", loop) == 0.0  # the off-by-one
