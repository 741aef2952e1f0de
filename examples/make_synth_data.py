"""Generate the program-synthesis task's data files, deterministically.

Writes, for both `examples/synth-fn` and `examples/synth-fn-oracle` (identical data; the harnesses differ
only in `harness/`):

- `data/train.jsonl`: one problem per hidden function not held out (the harness's `harness/data.yaml`
  chooses the mix of families);
- `data/val.jsonl`: the held-out set (protected), `NUM_VAL_PER_FAMILY` functions per family, disjoint
  from train (no held-out function appears in training or warm-start prompts);
- `data/warmstart.jsonl`: programs for the supervised warm start, **with realistic mistakes**, so the base
  policy is mediocre in the way small code models are: when the pattern is harder than a line it often
  hard-codes the shown examples (a lookup table ``[4,5,6,4,5,6][x]``, which fails every unseen input), it
  writes the period of a periodic function one too large (``x%4`` for period 3) and it makes the classic
  off-by-one of a running sum (``sum(range(x))`` for ``sum(range(x+1))``). Each is the *majority* habit of
  its family among the non-hard-coded programs, so greedy decoding gets those families wrong, and each is
  one early, prompt-recognisable decision that a short GRPO run with a test-running reward can flip.

Task: the prompt shows the hidden function's outputs at ``x = 0..5`` as ``input>output`` pairs,
``0>4;1>5;2>6;3>4;4>5;5>6=>``; the response is one Python expression in ``x`` (``x%3*1+4``). The ground
truth is the problem's test cases at inputs the prompt does not show (``TEST_INPUTS``, 8 per problem):
``7>5;11>6;...``. Row field ``public_tests`` repeats the shown examples (datasets of code problems keep
the examples of the statement apart from the hidden tests).

Families (``data_source``), each ``... *A+B`` so that ``B = f(0)`` and ``A = f(1) - f(0)`` everywhere:

======== ============================ ===========================================================
family   program                      what the base policy gets wrong
======== ============================ ===========================================================
affine   ``A*x+B``                    rarely anything (slips of A or B); mostly solved
mod      ``x%M*A+B`` (M 2-5)           hard-codes the examples, or writes ``x%(M+1)``
loop     ``sum(range(x+1))*A+B``       hard-codes the examples, or writes ``sum(range(x))``
======== ============================ ===========================================================

Run: ``python examples/make_synth_data.py`` (rewrites the committed files byte for byte).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGETS = (HERE / "synth-fn", HERE / "synth-fn-oracle")
FAMILIES = ("affine", "mod", "loop")
SHOWN_INPUTS = tuple(range(6))
TEST_INPUTS = range(6, 41)  # hidden test inputs: unseen, and large enough that the loop family costs steps
NUM_TESTS = 8
NUM_VAL_PER_FAMILY = 100
NUM_WARMSTART = 12000
A_RANGE = {"affine": range(1, 10), "mod": range(1, 4), "loop": range(1, 10)}
B_RANGE = range(0, 40)
M_RANGE = range(2, 6)
# Warm-start habits, per family: share of hard-coded examples, and of the family's structural slip.
HARDCODE_RATE = {"affine": 0.12, "mod": 0.45, "loop": 0.45}
SLIP_RATE = {"affine": 0.0, "mod": 0.33, "loop": 0.33}
A_SLIP_RATE = 0.08  # A off by one (a rare arithmetic slip, below the greedy threshold)
B_SLIP_RATE = 0.04  # B off by one

Function = tuple[str, int, int, int]  # family, A, B, M (M = 0 unless mod)


def all_functions(family: str) -> list[Function]:
    """Every hidden function of `family`, in a fixed order."""
    ms = M_RANGE if family == "mod" else (0,)
    return [(family, a, b, m) for a in A_RANGE[family] for b in B_RANGE for m in ms]


def program(fn: Function) -> str:
    """The canonical correct program of a hidden function."""
    family, a, b, m = fn
    if family == "affine":
        return f"{a}*x+{b}"
    if family == "mod":
        return f"x%{m}*{a}+{b}"
    if family == "loop":
        return f"sum(range(x+1))*{a}+{b}"
    raise ValueError(f"unknown family {family!r}; families are {FAMILIES}")


def value(fn: Function, x: int) -> int:
    """The hidden function at `x` (the same numbers the canonical program computes)."""
    family, a, b, m = fn
    if family == "affine":
        return a * x + b
    if family == "mod":
        return x % m * a + b
    return x * (x + 1) // 2 * a + b


def pairs(fn: Function, inputs: list[int] | tuple[int, ...] | range) -> str:
    """``input>output`` pairs joined by ``;``."""
    return ";".join(f"{x}>{value(fn, x)}" for x in inputs)


def prompt_text(fn: Function) -> str:
    """The prompt: the shown examples, then ``=>``."""
    return pairs(fn, SHOWN_INPUTS) + "=>"


def warm_response(fn: Function, rng: random.Random) -> str:
    """One imperfect program for the warm start (see the module docstring for the habits)."""
    family, a, b, m = fn
    if rng.random() < HARDCODE_RATE[family]:
        return "[" + ",".join(str(value(fn, x)) for x in SHOWN_INPUTS) + "][x]"
    if rng.random() < A_SLIP_RATE:
        a = a + 1 if a == 1 or rng.random() < 0.5 else a - 1
    if rng.random() < B_SLIP_RATE:
        b = b + 1 if b == 0 or rng.random() < 0.5 else b - 1
    slip = rng.random() < SLIP_RATE[family] / (1 - HARDCODE_RATE[family])
    if family == "mod":
        return f"x%{m + 1 if slip else m}*{a}+{b}"
    if family == "loop":
        return f"sum(range({'x' if slip else 'x+1'}))*{a}+{b}"
    return f"{a}*x+{b}"


def make_row(fn: Function, split: str, index: int, rng: random.Random) -> dict[str, object]:
    """One problem: prompt, hidden test cases (ground truth), the shown examples, its family as source."""
    tests = sorted(rng.sample(TEST_INPUTS, NUM_TESTS))
    return {
        "prompt_id": f"{split}-{fn[0]}-{index:04d}",
        "prompt": prompt_text(fn),
        "ground_truth": pairs(fn, tests),
        "public_tests": pairs(fn, SHOWN_INPUTS),
        "data_source": f"synth/{fn[0]}",
    }


def split_functions(seed: int) -> tuple[dict[str, list[Function]], dict[str, list[Function]]]:
    """Return (train, val) functions per family: `NUM_VAL_PER_FAMILY` held out at random, the rest trained."""
    rng = random.Random(seed)
    train: dict[str, list[Function]] = {}
    val: dict[str, list[Function]] = {}
    for family in FAMILIES:
        fns = all_functions(family)
        held = set(rng.sample(range(len(fns)), NUM_VAL_PER_FAMILY))
        val[family] = [f for i, f in enumerate(fns) if i in held]
        train[family] = [f for i, f in enumerate(fns) if i not in held]
    return train, val


def make_rows(fns: dict[str, list[Function]], split: str, seed: int) -> list[dict[str, object]]:
    """One row per function, family by family."""
    rng = random.Random(seed)
    return [make_row(fn, split, i, rng) for family in FAMILIES for i, fn in enumerate(fns[family])]


def make_warmstart(fns: dict[str, list[Function]], seed: int, count: int) -> list[dict[str, str]]:
    """Warm-start rows (prompt + an imperfect program), the families in equal shares."""
    rng = random.Random(seed)
    rows: list[dict[str, str]] = []
    while len(rows) < count:
        fn = rng.choice(fns[rng.choice(FAMILIES)])
        rows.append({"prompt": prompt_text(fn), "response": warm_response(fn, rng)})
    return rows


def _write(path: Path, rows: list[dict[str, object]] | list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def main(targets: tuple[Path, ...] = TARGETS) -> None:
    """Write train/val/warmstart files into both example harnesses."""
    train_fns, val_fns = split_functions(seed=1001)
    val = make_rows(val_fns, "val", seed=2002)
    train = make_rows(train_fns, "train", seed=3003)
    warm = make_warmstart(train_fns, seed=4004, count=NUM_WARMSTART)
    for target in targets:
        _write(target / "data" / "val.jsonl", val)
        _write(target / "data" / "train.jsonl", train)
        _write(target / "data" / "warmstart.jsonl", warm)
        print(f"wrote {len(train)} train, {len(val)} val, {len(warm)} warm-start rows to {target / 'data'}")


if __name__ == "__main__":
    main()
