"""Training reward (verl's compute_score signature): the first version of what EvoTrainer evolves.

Returns a dict: "score" is the reward; other numeric keys are logged as components. Pays 1.0 for a
correct final answer; 0.1 for a well-formed wrong one (a format bonus, a deliberate weakness to fix).
"""

import re

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return {"score", "formatted", "correct"}."""
    found = _ANSWER.findall(solution_str)
    formatted = len(found) == 1 and solution_str.strip().endswith("</answer>")
    correct = formatted and found[0].strip() == str(ground_truth).strip()
    return {
        "score": 1.0 if correct else (0.1 if formatted else 0.0),
        "formatted": float(formatted),
        "correct": float(correct),
    }
