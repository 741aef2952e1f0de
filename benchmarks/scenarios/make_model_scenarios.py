"""Defect scenarios of a real pretrained model: SmolLM2-135M-Instruct on the arithmetic task.

The base is the fixed `examples/arithmetic-smollm2` (the models cache's SmolLM2, chat prompts asking for the
answer format, a short warm start, then GRPO); each defect is one edit of its `harness/trainer.yaml`:

- `no-warm-start` (trainer): the instruct model is trained as it ships. It never writes `<ans>N</ans>`, so
  every group is flat and strict accuracy stays 0 (measured on one H200: 0.000 after 120 GRPO steps, against
  0.920 with the warm start). The health report names it (`behaviour.format_never_written`) and the offline
  controller proposes the warm start from that evidence (`warmstart_steps` from 0, a pilot that restarts from
  the model as it ships); no seed skill names it.

The issue's second defect, `wrong-stop` (warm-start targets ending with a token generation never stops on),
cannot be written as a harness edit here: the local backend decides the end-of-turn token once for every
model, ends warm-start targets with it and refuses a template that never emits it
(`trainer_backend/local/hf.py`), so no setting of a harness can make it wrong. `behaviour.runs_past_answer`
names the symptom where a model folder lets it through.

Runs need the model (`evotrainer models get smollm2-135m-instruct`) and, for the scenario's real budget, a
GPU; on a CPU the tests run the defective form on a smoke budget and check the diagnosis and the candidate
(`tests/integration/test_smollm2_no_warm_start_is_diagnosed_and_warm_started.py`). Each is a `Recipe`
(``make_scenarios.py``), built on demand by `scenario_cache.scenario_dir`. Run:
``python benchmarks/scenarios/make_model_scenarios.py DEST`` to write them under DEST.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from make_scenarios import ROOT, Recipe, Scenario, _set_yaml, cli, write_all

SMOLLM2 = ROOT / "examples" / "arithmetic-smollm2"


def _copy_smollm2(base: Path, dest: Path) -> None:
    """Copy the SmolLM2 harness `base` without its README (it explains the warm start); neutral comments."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(base, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git", "README.md"))
    settings = dest / "harness" / "trainer.yaml"
    text = settings.read_text()
    start = text.index("# As shipped the model never writes")  # the comment names the defect and its fix
    end = text.index("warmstart_steps:", start)
    neutral = "# Supervised warm start on worked solutions, in the chat template.\n"
    settings.write_text(text[:start] + neutral + text[end:])
    reward = dest / "harness" / "reward.py"  # every harness file reads the same in both forms but the defect's
    reward.write_text(reward.read_text().replace(", fixed form.", ".", 1))


def no_warm_start(root: Path) -> None:
    """No warm start: the instruct model is trained as it ships."""
    _set_yaml(root / "harness" / "trainer.yaml", "warmstart_steps", "0", "")


def recipes() -> tuple[Recipe, ...]:
    """This module's scenarios."""
    scenario = Scenario(
        "no-warm-start", "trainer", "no supervised warm start: the instruct model is trained as it ships",
        "no response writes the answer format: every group is flat, strict accuracy stays 0",
        "warmstart_steps: 200", None,
    )  # fmt: skip
    return (Recipe(scenario, SMOLLM2, _copy_smollm2, no_warm_start),)


def main(dest: Path) -> None:
    """Write this module's scenarios under `dest`."""
    write_all(dest, recipes())


if __name__ == "__main__":
    cli(recipes())
