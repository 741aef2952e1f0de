"""A small agentic harness for the agentic skill tests: the skeleton harness plus an env.

Task: answer with the note stored under a key. Tools, one per role: ``search_notes`` (search: the note under
a key), ``edit_draft`` (act: write a draft answer), ``check_draft`` (verify: is the draft the note?). The
trainer config carries the episode settings (``max_turns``, ``max_turn_tokens``, ``mask_observations``). The
reward is the skeleton's (1.0 correct, 0.1 well-formed wrong) unless `reward` replaces it, e.g. with a reward
that pays tool calls.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.manifest import Harness, load_harness

SKELETON = Path(__file__).resolve().parents[2] / "examples" / "skeleton"

ENV_SECTION = """env:
  entry: harness/env.py:make_env
  call_pattern: '<call>(\\w+) (.*?)</call>'
  call_end: '</call>'
  observation: '<obs>{result}</obs>'
  tools:
    - name: search_notes
      description: the note stored under a key
      parameters: {type: object, properties: {key: {type: string}}, required: [key]}
    - name: edit_draft
      description: write the draft answer
      parameters: {type: object, properties: {text: {type: string}}, required: [text]}
    - name: check_draft
      description: whether the draft is the note
      parameters: {type: object, properties: {}}
"""

ENV_CODE = '''"""The notes environment: look a note up, write a draft, check the draft."""


class Notes:
    def __init__(self, row):
        self.note = str(row.get("ground_truth", ""))
        self.draft = ""

    def call(self, tool, arguments):
        if tool == "search_notes":
            return self.note
        if tool == "edit_draft":
            self.draft = str(arguments.get("text", ""))
            return "saved"
        if tool == "check_draft":
            return {"result": "match" if self.draft == self.note else "no match", "success": True}
        return {"result": f"unknown tool {tool}", "success": False}


def make_env(row):
    return Notes(row)
'''

PAYS_CALLS = '''"""A defective agentic reward: correct answers earn 1.0, and every tool call earns 0.1 (tool spam)."""

import re

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    found = _ANSWER.findall(solution_str)
    correct = len(found) == 1 and found[0].strip() == str(ground_truth).strip()
    calls = (extra_info or {}).get("tool_calls", 0)
    return {"score": float(correct) + 0.1 * calls, "correct": float(correct)}
'''

EFFICIENCY = '''"""A defective agentic reward: correctness times an efficiency factor (paper §10: one-turn collapse)."""

import re

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
MAX_TURNS = 8


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    found = _ANSWER.findall(solution_str)
    correct = len(found) == 1 and found[0].strip() == str(ground_truth).strip()
    efficiency = 1 - 0.3 * (extra_info or {}).get("num_turns", 1) / MAX_TURNS
    return float(correct) * efficiency
'''


def make_agentic_harness(root: Path, *, reward: str | None = None, trainer_extra: str = "max_turns: 4\n") -> Harness:
    """Copy the skeleton to `root`, declare the notes env and its tools, and return the loaded harness."""
    shutil.copytree(SKELETON, root)
    manifest = root / "evotrainer.yaml"
    manifest.write_text(manifest.read_text() + ENV_SECTION)
    (root / "harness" / "env.py").write_text(ENV_CODE)
    trainer = root / "harness" / "trainer.yaml"
    trainer.write_text(trainer.read_text() + trainer_extra + "max_turn_tokens: 16\nmask_observations: true\n")
    if reward is not None:
        (root / "harness" / "reward.py").write_text(reward)
    return load_harness(root)
