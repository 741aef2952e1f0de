"""Protected strict evaluator: exactly one <answer>...</answer>, at the very end, equal to the ground truth.

This is what the held-out score means; EvoTrainer never edits it and never shows it to its controller.
Replace it with your task's own check (same signature).
"""

import re

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def score(solution_str, ground_truth):
    """Return 1.0 for a correct final answer, else 0.0."""
    text = solution_str.strip()
    found = _ANSWER.findall(text)
    if len(found) != 1 or not text.endswith("</answer>"):
        return 0.0
    return 1.0 if found[0].strip() == str(ground_truth).strip() else 0.0
