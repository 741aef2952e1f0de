"""Generate the skeleton harness's data files, deterministically (`evotrainer init` copies them).

The task: sort the digits of a short string (``3142>`` -> ``<answer>1234</answer>``), one data source per
string length. Writes, next to this file:

- ``data/train.jsonl`` and ``data/val.jsonl`` (held-out, protected): disjoint prompts per length;
- ``data/warmstart.jsonl``: answers for the supervised warm start, **with habits** so the base policy errs
  where RL can fix it: long strings (5+ digits) mostly keep their last two digits unsorted, and any answer
  slips one adjacent pair now and then.

Run: ``python examples/skeleton/make_data.py [DIR]`` (default: this folder). Replace it with your task's own
generator, or write the JSONL files by hand: rows are ``{"prompt", "ground_truth", "data_source",
"prompt_id"}`` (warm start: ``{"prompt", "response"}``).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED = 14
LENGTHS = (3, 4, 5, 6)
TRAIN_PER_SOURCE, VAL_PER_SOURCE, WARMSTART_ROWS = 150, 30, 3000
HABIT_FROM, HABIT_RATE, SLIP_RATE = 5, 0.6, 0.1
DIGITS = "".join(str(d) for d in range(10))


def _swap(answer: str, i: int) -> str:
    """The answer with the pair at `i`, `i + 1` swapped (a plausible mistake)."""
    return answer[:i] + answer[i + 1] + answer[i] + answer[i + 2 :]


def rows() -> dict[str, list[dict[str, object]]]:
    """The train, held-out and warm-start rows."""
    rng = random.Random(SEED)
    seen: set[str] = set()
    out: dict[str, list[dict[str, object]]] = {"train": [], "val": [], "warmstart": []}
    for length in LENGTHS:
        for split, count in (("val", VAL_PER_SOURCE), ("train", TRAIN_PER_SOURCE)):
            made = 0
            while made < count:
                digits = "".join(rng.choice(DIGITS) for _ in range(length))
                if digits in seen:  # held-out prompts never appear in training
                    continue
                seen.add(digits)
                out[split].append(
                    {
                        "prompt": f"{digits}>",
                        "ground_truth": "".join(sorted(digits)),
                        "data_source": f"sort/len{length}",
                        "prompt_id": f"{split}-{length}-{made:04d}",
                    }
                )
                made += 1
    for _ in range(WARMSTART_ROWS):
        digits = "".join(rng.choice(DIGITS) for _ in range(rng.choice(LENGTHS)))
        answer = "".join(sorted(digits))
        if len(digits) >= HABIT_FROM and rng.random() < HABIT_RATE:
            answer = _swap(answer, len(answer) - 2)
        elif rng.random() < SLIP_RATE:
            answer = _swap(answer, rng.randrange(len(answer) - 1))
        out["warmstart"].append({"prompt": f"{digits}>", "response": f"<answer>{answer}</answer>"})
    return out


def main(dest: Path = Path(__file__).resolve().parent) -> None:
    """Write the three data files under `dest/data/`."""
    (dest / "data").mkdir(parents=True, exist_ok=True)
    for split, data in rows().items():
        (dest / "data" / f"{split}.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in data))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
