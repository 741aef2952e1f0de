"""Rollback: test fixes from the incumbent's starting policy when its own run damaged the policy.

Pilots normally start from the incumbent's final checkpoint. When the incumbent's own run collapsed the
policy on held-out prompts (a destabilising optimiser: 0.70 -> 0.00 in 40 steps), every candidate tested
from that checkpoint starts from a broken policy, and a fix that would have prevented the collapse cannot
show it within one pilot. Then the candidates restart from the checkpoint the incumbent itself started from
(v0: the warm start), while the control still continues the incumbent: the comparison is "the fixed harness
from before the collapse" against "the status quo", and the winner's lineage is the shorter one.

"Collapsed" means the held-out strict accuracy lost at least half of its starting value over the run
(`COLLAPSE_FRACTION`, the same bar as the training-score collapse alert in diagnostics/updates.py), the drop
is at least `min_effect` and its paired bootstrap CI lies below zero. A milder drop (a hackable reward's
number spam, a leak: 0.70 -> 0.63) is not rolled back: the fixes recover from there, and restarting would
throw away the steps the policy did learn from.

One exception: a run that learned to exploit its reward. When the incumbent's report says so
(`score.reward_hacking` critical) and held-out strict fell during its run (at least `min_effect`, the paired
CI below zero, however little), a candidate that repairs the very defect its reward's code names (a gate, an
unread reference: `CandidateInfo.repairs_reward`) restarts from the incumbent's own start; every other
candidate and the control continue it (`RollbackInfo.repairs_only`). The exploit is what the run learned, and
the repaired reward would have to unlearn it within one pilot (synth-shown-tests: v0 went 0.32 -> 0.218 while it
learned lookup tables of the examples its prompts show; the repair reached 0.520 from there in 30 steps, and
the fixed harness 0.684 in 20 from the start).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agent.decisions.evidence import paired
from agent.state import RollbackInfo, VersionInfo
from diagnostics.schema import START_CHECKPOINT
from diagnostics.stats import paired_bootstrap

if TYPE_CHECKING:
    import polars as pl

COLLAPSE_FRACTION = 0.5  # held-out strict lost at least half of its starting value
REWARD_HACKING = "score.reward_hacking"  # the report's alert that the run learned to exploit its reward
START_CHECKPOINT_FILE = START_CHECKPOINT  # a root run's step-0 policy and optimizer (local backend)


def own_start(run_dir: str | Path) -> str:
    """The step-0 policy a root run (v0, or a pilot that restarted from the starting model) kept, "" if none."""
    path = Path(run_dir) / START_CHECKPOINT_FILE
    return str(path) if path.is_file() else ""


def rollback_point(
    version: VersionInfo, min_effect: float, val: pl.DataFrame | None = None, *, hacked: bool = False
) -> RollbackInfo:
    """Where candidates should start: `{}` (the incumbent's checkpoint) or the incumbent's own start.

    `val` holds the incumbent run's validation rows (its run table's, so the session reads them once); without
    it they are read from the run folder. Returns `{"checkpoint", "steps", "reason"}` when the incumbent's run
    collapsed held-out accuracy (see above) and its starting checkpoint is still on disk; with `hacked` (its
    report says it learned to exploit the reward), any significant fall of at least `min_effect` counts, for the
    candidates that repair the reward only (`"repairs_only": True`).
    """
    from diagnostics.score import strict_by_step
    from diagnostics.table import read_run_table

    start = version.get("start_checkpoint") or ""
    if not start or not Path(start).is_file():
        return RollbackInfo()
    if val is None:
        val = read_run_table(Path(version["run_dir"]), splits=("val",)).val
    scores = strict_by_step(val)
    if len(scores) < 2 or 0 not in scores:
        return RollbackInfo()
    before, after = paired(scores[0], scores[max(scores)])
    if not before:
        return RollbackInfo()
    cmp = paired_bootstrap(before, after)
    start_acc, end_acc = sum(before) / len(before), sum(after) / len(after)
    if cmp.delta > -min_effect or cmp.ci_high >= 0:
        return RollbackInfo()
    fell = f"{start_acc:.3f} -> {end_acc:.3f} ({cmp.delta:+.3f} [{cmp.ci_low:+.3f}, {cmp.ci_high:+.3f}])"
    fell += f" during {version['run_id']}"
    step = f"from the policy it started from (lineage step {version.get('start_steps', 0)})"
    if end_acc <= (1 - COLLAPSE_FRACTION) * start_acc:
        reason = f"held-out strict collapsed {fell}: candidates restart {step}; the control continues it"
        return RollbackInfo(checkpoint=start, steps=int(version.get("start_steps", 0)), reason=reason)
    if not hacked:
        return RollbackInfo()
    reason = (
        f"held-out strict fell {fell} while the run learned to exploit its reward ({REWARD_HACKING}): the candidates "
        f"that repair the reward restart {step}; the control and the other candidates continue it"
    )
    return RollbackInfo(checkpoint=start, steps=int(version.get("start_steps", 0)), reason=reason, repairs_only=True)
