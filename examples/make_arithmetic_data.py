"""Generate the arithmetic demo task's data files, deterministically.

Writes, for `examples/arithmetic`, `examples/arithmetic-oracle` and `examples/arithmetic-smollm2` (identical
data; the harnesses differ only in `harness/` and, for the pretrained model, the manifest's tokens):

- `data/train.jsonl`: training prompts at every difficulty level (the harness's `harness/data.yaml`
  chooses the mix);
- `data/val.jsonl`: the held-out set (protected), 100 problems per learnable level (2-4: the levels the
  fixed data mix trains; level 1 is solved and level 5 out of reach, so they only add noise to a paired
  comparison), disjoint from train;
- `data/warmstart.jsonl`: worked solutions for the supervised warm start, **with injected mistakes** so
  the base policy is mediocre: level 4 is worked left to right most of the time (``4+2*9`` ->
  ``4+2=6;6*9=54``, the majority habit, so greedy decoding gets level 4 wrong), a few forgotten carries
  and slipped products, and a little rambling after the answer. The precedence slip is one early,
  prompt-recognisable decision, so a short GRPO pilot with the strict reward can flip it (a clear
  held-out gain); the carry slips stay rare, so the pilot's pressure on them does not spill over into
  correct additions.

Task: an expression such as ``12+7*3``; the response is a worked solution, one step per operation,
ending in a tagged answer: ``7*3=21;12+21=33<ans>33</ans>``.

Levels (digits x operands):

====== ======================== ==============================================
level  shape                    role
====== ======================== ==============================================
1      ``a+b`` (1 digit)         too easy: a warm-started policy nearly always solves it
2      ``ab+c``                  learnable, carries
3      ``ab+cd``                 learnable, carries
4      ``a+b*c`` (1 digit)       two steps, precedence
5      ``ab*cd+ef``              too hard for the tiny model (4-digit products)
====== ======================== ==============================================

Run: ``python examples/make_arithmetic_data.py`` (rewrites the committed files byte for byte).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

LEVELS = (1, 2, 3, 4, 5)
HERE = Path(__file__).resolve().parent
TARGETS = (HERE / "arithmetic", HERE / "arithmetic-oracle", HERE / "arithmetic-smollm2")
NUM_TRAIN_PER_LEVEL = 800
VAL_LEVELS = (2, 3, 4)  # the learnable levels the fixed data mix trains; 1 is solved, 5 is out of reach
NUM_VAL_PER_LEVEL = 100
NUM_WARMSTART = 12000
MISTAKE_RATE = 0.1  # per carrying/multiplying step: a rare slip, well below the greedy threshold
ORDER_SLIP_RATE = 0.6  # level 4 worked left to right: the *majority* habit, so greedy decoding errs there
RAMBLE_RATE = 0.06  # chance the worked solution keeps writing numbers after the answer


def make_problem(level: int, rng: random.Random) -> list[int | str]:
    """Return the token list of one expression at `level`, e.g. ``[12, "+", 7, "*", 3]``."""
    d1, d2 = (lambda: rng.randint(1, 9)), (lambda: rng.randint(10, 99))
    if level == 1:
        return [d1(), "+", d1()]
    if level == 2:
        return [d2(), "+", d1()]
    if level == 3:
        return [d2(), "+", d2()]
    if level == 4:
        return [d1(), "+", d1(), "*", d1()]
    if level == 5:
        return [d2(), "*", d2(), "+", d2()]
    raise ValueError(f"unknown level {level}; levels are {LEVELS}")


def _slip(a: int, op: str, b: int, rng: random.Random) -> int:
    """Return a plausible wrong result: a forgotten carry for `+`, a tens digit off by one for `*`."""
    if op == "+":
        width = len(str(max(a, b)))
        no_carry = int(
            "".join(str((int(x) + int(y)) % 10) for x, y in zip(f"{a:0{width}d}", f"{b:0{width}d}", strict=True))
        )
        if no_carry != a + b:
            return no_carry
        return a + b + rng.choice((-1, 1)) if a + b > 0 else 1
    return a * b + 10  # one consistent slip per kind of step, so it can outweigh the right answer


def _is_hard_step(a: int, op: str, b: int) -> bool:
    if op == "*":
        return True
    return max(a, b) >= 10 and (a % 10) + (b % 10) >= 10  # single-digit sums (level 1) never slip


def solve(
    tokens: list[int | str], rng: random.Random | None = None, mistake_rate: float = 0.0, order_slip_rate: float = 0.0
) -> tuple[str, int]:
    """Return the worked solution steps (``"7*3=21;12+21=33"``) and the final value.

    Multiplication first, then addition left to right. With `rng` and `mistake_rate` > 0, each hard step
    (a carry or a product) slips with that probability and later steps build on the slipped value. With
    `order_slip_rate` > 0, an expression with a ``+`` before its ``*`` (level 4) is worked strictly left to
    right with that probability (``4+2*9`` -> ``4+2=6;6*9=54``): a precedence slip.
    """
    items = list(tokens)
    steps: list[str] = []
    left_to_right = (
        rng is not None and "*" in items and "+" in items[: items.index("*")] and rng.random() < order_slip_rate
    )

    def apply(i: int) -> None:
        a, op, b = items[i - 1], items[i], items[i + 1]
        assert isinstance(a, int) and isinstance(b, int) and isinstance(op, str)
        value = a * b if op == "*" else a + b
        if rng is not None and _is_hard_step(a, op, b) and rng.random() < mistake_rate:
            value = _slip(a, op, b, rng)
        steps.append(f"{a}{op}{b}={value}")
        items[i - 1 : i + 2] = [value]

    while left_to_right and len(items) > 1:
        apply(1)
    while "*" in items:
        apply(items.index("*"))
    while "+" in items:
        apply(items.index("+"))
    (final,) = items
    assert isinstance(final, int)
    return ";".join(steps), final


def worked_solution(
    tokens: list[int | str], rng: random.Random | None = None, mistake_rate: float = 0.0, order_slip_rate: float = 0.0
) -> str:
    """Return the full response text: steps then ``<ans>N</ans>``."""
    steps, value = solve(tokens, rng, mistake_rate, order_slip_rate)
    return f"{steps}<ans>{value}</ans>"


def prompt_text(tokens: list[int | str]) -> str:
    """Return the prompt the policy sees, e.g. ``12+7*3=>``."""
    return "".join(str(t) for t in tokens) + "=>"


def make_rows(
    seed: int, per_level: int, split: str, exclude: set[str], levels: tuple[int, ...] = LEVELS
) -> list[dict[str, object]]:
    """Return up to `per_level` distinct problems per level of `levels` (skipping `exclude`), as JSONL rows."""
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []
    for level in levels:
        seen: set[str] = set()
        tries = 0
        while len(seen) < per_level and tries < 50 * per_level:  # level 1 has only 81 problems
            tries += 1
            tokens = make_problem(level, rng)
            prompt = prompt_text(tokens)
            if prompt in exclude or prompt in seen:
                continue
            seen.add(prompt)
            rows.append(
                {
                    "prompt_id": f"{split}-{level}-{len(seen) - 1:04d}",
                    "prompt": prompt,
                    "ground_truth": str(solve(tokens)[1]),
                    "level": level,
                    "data_source": f"arithmetic/level{level}",
                }
            )
    return rows


def make_warmstart(seed: int, count: int, exclude: set[str]) -> list[dict[str, str]]:
    """Return warm-start rows (prompt + an imperfect worked solution), levels 1-4 mostly, some level 5."""
    rng = random.Random(seed)
    rows: list[dict[str, str]] = []
    while len(rows) < count:
        level = rng.choices(LEVELS, weights=(2, 3, 3, 3, 1))[0]
        tokens = make_problem(level, rng)
        prompt = prompt_text(tokens)
        if prompt in exclude:
            continue
        response = worked_solution(tokens, rng, MISTAKE_RATE, ORDER_SLIP_RATE)
        if rng.random() < RAMBLE_RATE:
            extra = [str(rng.randint(0, 99)) for _ in range(rng.randint(1, 3))]
            response += ";".join(extra)
        rows.append({"prompt": prompt, "response": response})
    return rows


def _write(path: Path, rows: list[dict[str, object]] | list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def main() -> None:
    """Write train/val/warmstart files into every arithmetic example harness."""
    val = make_rows(seed=1001, per_level=NUM_VAL_PER_LEVEL, split="val", exclude=set(), levels=VAL_LEVELS)
    val_prompts = {str(r["prompt"]) for r in val}
    train = make_rows(seed=2002, per_level=NUM_TRAIN_PER_LEVEL, split="train", exclude=val_prompts)
    warm = make_warmstart(seed=3003, count=NUM_WARMSTART, exclude=val_prompts)
    for target in TARGETS:
        _write(target / "data" / "val.jsonl", val)
        _write(target / "data" / "train.jsonl", train)
        _write(target / "data" / "warmstart.jsonl", warm)
        print(f"wrote {len(train)} train, {len(val)} val, {len(warm)} warm-start rows to {target / 'data'}")


if __name__ == "__main__":
    main()
