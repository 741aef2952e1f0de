"""Generate the exploration scenarios: defects no seed skill targets, one per harness factor.

Built like the six of `make_scenarios.py` (whose helpers this reuses): the fixed demo harness
(`examples/arithmetic-oracle`) with exactly ONE defect injected into one editable file, and `oracle/`
the harness with the defect fixed. No seed skill (`skills/seeds.py`) is written for any of them: they
measure whether the controller finds fixes beyond its recipe book (`agent/policies/explore.py`).

- `cold-sampling` (trainer): sampling temperature 0.1, below the local backend's documented safe range,
  so the samples of a group are nearly identical and carry little GRPO signal;
- `greedy-filter` (filter): a group filter that keeps only groups the policy already solves at least three
  times in four, dropping the hard prompts' groups that carry the signal;
- `shortcut-bonus` (reward): the reward adds a bonus of 0.9 for an answer given without working, so the
  policy learns to skip the intermediate steps multi-step prompts need; a right answer still earns more
  than a wrong one in the same form, and a wrong shortcut (0.9) less than a right worked answer (1.0), so
  no rank-violation or paid-wrong rule sees it. (Its first form, a 0-0.9 "novelty" bonus from a hash of the
  response, cost nothing measurable: oracle - static +0.02 at the 160-step budget.)
- `narrow-mix` (data): every training prompt comes from one difficulty level (3), so the policy never
  practises the other learnable levels the held-out set holds;
- `tiny-batch` (trainer, a second trainer defect of another kind, session 8): two prompts per step, below the
  local backend's documented safe range, so each update follows the noise of 16 samples at a learning rate
  tuned for 128 and held-out accuracy drifts down late in the run.

Each is a `Recipe` (``make_scenarios.py``): its folder, ``NAME/{defective,oracle}/`` and ``NAME/scenario.json``
(with ``seed_skill: null``), is built on demand by `scenario_cache.scenario_dir`. Run:
``python benchmarks/scenarios/make_explore_scenarios.py DEST`` to write them under DEST.
"""

from __future__ import annotations

from pathlib import Path

from make_scenarios import ORACLE, Recipe, Scenario, _copy_base, _set_yaml, cli, write_all

COLD_TEMPERATURE = 0.1
GREEDY_MIN_MEAN = 0.75  # 0.5 left seed 1 within 0.07 of the oracle (static 0.870 vs 0.943)
NARROW_LEVEL = 3
SHORTCUT_BONUS = 0.9
TINY_PROMPTS_PER_STEP = 2


def cold_sampling(root: Path) -> None:
    """Sampling temperature `COLD_TEMPERATURE`: the samples of one prompt barely differ."""
    _set_yaml(root / "harness" / "trainer.yaml", "temperature", str(COLD_TEMPERATURE), "")


def tiny_batch(root: Path) -> None:
    """`TINY_PROMPTS_PER_STEP` prompts per step: each update averages a handful of groups."""
    _set_yaml(root / "harness" / "trainer.yaml", "prompts_per_step", str(TINY_PROMPTS_PER_STEP), "")


GREEDY_FILTER = '''"""Group filter, run before advantage normalisation.

Keeps the groups worth learning from: groups whose rewards vary and whose mean reward is at least
`MIN_MEAN`, i.e. prompts the policy already answers well at least three times in four.
`state` is the trainer-kept JSON dict carried across steps (unused here).
"""

from __future__ import annotations

from statistics import fmean, pstdev

MIN_STD = 0.01
MIN_MEAN = __MIN_MEAN__


def filter_groups(group_rewards: list[list[float]], state: dict) -> list[bool]:
    """Return one keep flag per group."""
    return [len(g) > 1 and pstdev(g) >= MIN_STD and fmean(g) >= MIN_MEAN for g in group_rewards]
'''.replace("__MIN_MEAN__", str(GREEDY_MIN_MEAN))


def greedy_filter(root: Path) -> None:
    """A filter that drops every live group the policy solves less than three times in four."""
    (root / "harness" / "filters.py").write_text(GREEDY_FILTER)


SHORTCUT_REWARD = f'''"""Training reward of the arithmetic harness (verl's `compute_score` signature).

Strict tagged-answer extraction (the response must end with exactly one ``<ans>N</ans>`` equal to the
ground truth), plus a bonus of {SHORTCUT_BONUS} for a direct answer (no working before the tag), to keep
responses to the point.
"""

from __future__ import annotations

import re

_ANSWER = re.compile(r"<ans>(\\d+)</ans>")
SHORTCUT_BONUS = {SHORTCUT_BONUS}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return correctness plus the direct-answer bonus (components `correct`, `formatted`, `direct`)."""
    text = solution_str.strip()
    found = _ANSWER.findall(text)
    formatted = len(found) == 1 and text.endswith("</ans>")
    correct = float(formatted and int(found[0]) == int(str(ground_truth)))
    direct = float(formatted and "=" not in text.split("<ans>", 1)[0])
    return {{"score": correct + SHORTCUT_BONUS * direct, "correct": correct, "formatted": float(formatted),
            "direct": direct}}
'''


def shortcut_bonus(root: Path) -> None:
    """A reward component that pays skipping the working, unrelated to (and against) correctness."""
    (root / "harness" / "reward.py").write_text(SHORTCUT_REWARD)


def narrow_mix(root: Path) -> None:
    """Every training prompt from level `NARROW_LEVEL`."""
    weights = {f"arithmetic/level{n}": 1.0 if n == NARROW_LEVEL else 0.0 for n in range(1, 6)}
    (root / "harness" / "data.yaml").write_text(
        "# Training-data selection: sampling weight per data source (difficulty level) of data/train.jsonl.\n"
        f"weights: {{{', '.join(f'{k}: {v}' for k, v in weights.items())}}}\n"
    )


def recipes() -> tuple[Recipe, ...]:
    """One recipe per exploration scenario; the oracle is always the fixed demo harness itself."""
    scenarios = (
        (
            Scenario(
                "cold-sampling", "trainer",
                f"sampling temperature {COLD_TEMPERATURE}, below the local backend's documented safe range",
                "the samples of a group are nearly identical: little within-group diversity, dead groups",
                "temperature: 1.0", None,
            ),
            cold_sampling,
        ),
        (
            Scenario(
                "greedy-filter", "filter",
                f"the group filter keeps only groups with mean reward >= {GREEDY_MIN_MEAN}, dropping the hard "
                "prompts' live groups",
                "the filter drops most groups that carry reward variance (kept-live ratio low); held-out stalls",
                "the StdGroupFilter of the fixed harness", None,
            ),
            greedy_filter,
        ),
        (
            Scenario(
                "shortcut-bonus", "reward",
                f"the reward adds a bonus of {SHORTCUT_BONUS} for an answer without working",
                "a reward component that moves rewards within groups against the strict score: the policy drops "
                "the working multi-step prompts need, while right still ranks above wrong in the same form",
                "the fixed harness's strict reward (no bonus)", None,
            ),
            shortcut_bonus,
        ),
        (
            Scenario(
                "narrow-mix", "data",
                f"every training prompt comes from difficulty level {NARROW_LEVEL}",
                "training reward on level 3 saturates while held-out accuracy on the other levels stalls",
                "the fixed harness's mix over the learnable levels 2-4", None,
            ),
            narrow_mix,
        ),
        (
            Scenario(
                "tiny-batch", "trainer",
                f"{TINY_PROMPTS_PER_STEP} prompts per step, below the local backend's documented safe range",
                "each update follows the noise of a few groups: held-out accuracy drifts down late in the run",
                "prompts_per_step: 16", None,
            ),
            tiny_batch,
        ),
    )  # fmt: skip
    return tuple(Recipe(scenario, ORACLE, _copy_base, inject) for scenario, inject in scenarios)


def main(dest: Path) -> None:
    """Write this module's scenarios under `dest`."""
    write_all(dest, recipes())


if __name__ == "__main__":
    cli(recipes())
