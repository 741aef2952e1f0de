"""Group filter: one keep flag per GRPO group, called before advantage normalisation.

`state` is a JSON-serialisable dict the trainer keeps across steps. This one keeps every group.
"""


def filter_groups(group_rewards, state):
    """Return True for every group (no filtering)."""
    return [True] * len(group_rewards)
