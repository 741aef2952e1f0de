"""StdGroupFilter-style group filter (paper App. C), run before advantage normalisation.

Always drops groups whose reward std is below `MIN_STD` (zero-variance "dead" groups: no GRPO signal).
After a warm-up of `WARMUP_GROUPS` groups it also drops low-information groups whose std falls below
``ema_mean - z * ema_std`` of an exponential moving average of group stds, with z from `KEEP_RATIO`
(0.9 -> z ~ 1.28), but never keeps fewer than `MIN_KEEP_RATIO` of the groups it would otherwise keep.
`state` is the trainer-kept JSON dict (EMA and count) carried across steps and checkpoints.
"""

from __future__ import annotations

import math
from statistics import NormalDist, fmean, pstdev

MIN_STD = 0.01
KEEP_RATIO = 0.9
MIN_KEEP_RATIO = 0.5
EMA_DECAY = 0.1
WARMUP_GROUPS = 20


def filter_groups(group_rewards: list[list[float]], state: dict) -> list[bool]:
    """Return one keep flag per group; updates `state` ("ema_mean", "ema_var", "seen") in place."""
    stds = [pstdev(g) if len(g) > 1 else 0.0 for g in group_rewards]
    keep = [s >= MIN_STD for s in stds]
    seen = int(state.get("seen", 0))
    if seen >= WARMUP_GROUPS and "ema_mean" in state:
        z = NormalDist().inv_cdf(KEEP_RATIO)
        floor = state["ema_mean"] - z * math.sqrt(max(state["ema_var"], 0.0))
        candidate = [k and s >= floor for k, s in zip(keep, stds, strict=True)]
        if sum(candidate) >= math.ceil(MIN_KEEP_RATIO * sum(keep)):
            keep = candidate
    live = [s for s in stds if s >= MIN_STD]
    if live:
        mean, var = fmean(live), pstdev(live) ** 2
        if "ema_mean" not in state:
            state["ema_mean"], state["ema_var"] = mean, var
        else:
            state["ema_mean"] = (1 - EMA_DECAY) * state["ema_mean"] + EMA_DECAY * mean
            state["ema_var"] = (1 - EMA_DECAY) * state["ema_var"] + EMA_DECAY * var
    state["seen"] = seen + len(group_rewards)
    return keep
