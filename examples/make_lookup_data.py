"""Generate the lookup-agent task's data files, deterministically.

Task: every row has its own random table (keys ``a``-``h``, values 0-9, in the row's ``table`` field, never in
the prompt). The prompt names keys (``c+f=>``); the answer is the sum of their values. Only the ``lookup``
tool returns a value, so a policy must call it once per key and then answer:

    prompt:      c+f=>
    trajectory:  <call>lookup c</call><obs>3</obs><call>lookup f</call><obs>5</obs>3+5=8<ans>8</ans>

Levels (number of keys = lookups needed; turns = keys + 1):

====== ============ ==========================================================
level  prompt       role
====== ============ ==========================================================
1      ``c=>``       one lookup: a warm-started policy nearly always solves it
2      ``c+f=>``     two lookups and a one-digit sum
3      ``c+f+b=>``   three lookups: the warm start mostly stops after two
====== ============ ==========================================================

Writes, for both `examples/lookup-agent` and `examples/lookup-agent-oracle` (identical data; the harnesses
differ only in `harness/`):

- `data/train.jsonl`: training rows at every level;
- `data/val.jsonl`: the held-out set (protected), 100 rows per level, tables drawn independently (no
  held-out table was ever seen in training, so nothing about them can be memorised);
- `data/warmstart.jsonl`: worked trajectories with their observations, **with injected mistakes** so the
  base policy is mediocre: at level 3 the majority habit is to stop after two lookups and answer their sum
  (greedy decoding gets level 3 wrong; one early, prompt-recognisable decision GRPO can flip, as the
  arithmetic demo's precedence slip); a few guesses without any lookup (the one-turn habit an efficiency
  reward feeds on); rare slips of the sum.

Run: ``python examples/make_lookup_data.py`` (rewrites the committed files byte for byte).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGETS = (HERE / "lookup-agent", HERE / "lookup-agent-oracle")
KEYS = "abcdefgh"
LEVELS = (1, 2, 3)
NUM_TRAIN_PER_LEVEL = 1000
NUM_VAL_PER_LEVEL = 100
NUM_WARMSTART = 9000
FORGET_LAST_RATE = {1: 0.0, 2: 0.05, 3: 0.6}  # stop looking up one key early (the level-3 majority habit)
GUESS_RATE = 0.1  # answer at once, without any lookup
SUM_SLIP_RATE = 0.05  # the written sum is off by one


def make_row(level: int, rng: random.Random) -> tuple[list[str], dict[str, int]]:
    """Return the keys a prompt asks for (distinct) and the row's table."""
    table = {k: rng.randint(0, 9) for k in KEYS}
    return rng.sample(KEYS, level), table


def prompt_text(keys: list[str]) -> str:
    """The prompt the policy sees, e.g. ``c+f=>``."""
    return "+".join(keys) + "=>"


def call(key: str) -> str:
    """A lookup call as the manifest's call pattern reads it."""
    return f"<call>lookup {key}</call>"


def observation(value: int) -> str:
    """A lookup result as the manifest's observation template renders it."""
    return f"<obs>{value}</obs>"


def answer_turn(values: list[int], total: int) -> str:
    """The final turn: the worked sum (two or more values) and the tagged answer."""
    worked = "+".join(map(str, values)) + f"={total}" if len(values) > 1 else ""
    return f"{worked}<ans>{total}</ans>"


def trajectory(keys: list[str], table: dict[str, int], rng: random.Random) -> str:
    """A worked trajectory for the warm start, with the injected mistakes (see the module docstring)."""
    level = len(keys)
    if rng.random() < GUESS_RATE:
        return f"<ans>{rng.randint(0, 9 * level)}</ans>"
    looked = keys[:-1] if rng.random() < FORGET_LAST_RATE[level] else keys
    values = [table[k] for k in looked]
    total = sum(values)
    if len(values) > 1 and rng.random() < SUM_SLIP_RATE:
        total += rng.choice((-1, 1)) if total > 0 else 1
    return "".join(call(k) + observation(table[k]) for k in looked) + answer_turn(values, total)


def make_rows(seed: int, per_level: int, split: str) -> list[dict[str, object]]:
    """Return `per_level` rows per level, each with its own table."""
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []
    for level in LEVELS:
        for i in range(per_level):
            keys, table = make_row(level, rng)
            rows.append(
                {
                    "prompt_id": f"{split}-{level}-{i:04d}",
                    "prompt": prompt_text(keys),
                    "ground_truth": str(sum(table[k] for k in keys)),
                    "level": level,
                    "data_source": f"lookup/level{level}",
                    "table": table,
                }
            )
    return rows


def make_warmstart(seed: int, count: int) -> list[dict[str, str]]:
    """Return warm-start rows (prompt + an imperfect worked trajectory), the levels in equal shares."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        keys, table = make_row(LEVELS[i % len(LEVELS)], rng)
        rows.append({"prompt": prompt_text(keys), "response": trajectory(keys, table, rng)})
    return rows


def _write(path: Path, rows: list[dict[str, object]] | list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def main() -> None:
    """Write train/val/warmstart files into both example harnesses."""
    val = make_rows(seed=1015, per_level=NUM_VAL_PER_LEVEL, split="val")
    train = make_rows(seed=2015, per_level=NUM_TRAIN_PER_LEVEL, split="train")
    warm = make_warmstart(seed=3015, count=NUM_WARMSTART)
    for target in TARGETS:
        _write(target / "data" / "val.jsonl", val)
        _write(target / "data" / "train.jsonl", train)
        _write(target / "data" / "warmstart.jsonl", warm)
        print(f"wrote {len(train)} train, {len(val)} val, {len(warm)} warm-start rows to {target / 'data'}")


if __name__ == "__main__":
    main()
