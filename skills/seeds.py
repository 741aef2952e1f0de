"""Seed skills: the paper's known interventions, as data (arXiv 2606.03108).

Seven skills here and four agentic ones (``skills/agentic_seeds.py``: the level-1 trajectory filter, a raised
turn budget, confirmation-style behaviour terms, a guard against paying action counts), each with a
machine-checkable trigger over ``HealthReport.metrics`` plus context variables the controller adds
(``filter_present``, ``reward_discrete``, ``candidate_reward_length_term``, ...):

1. ``strict-answer-extraction`` (reward): the reward pays for wrong or malformed answers
   (``rewarded_wrong_rate``), fails correct ones (``unrewarded_correct_rate``) or does not rank a group's
   samples the way strict correctness does (``misranked_group_rate``; all three compare the reward with the
   protected evaluator on the run's own rollouts, ``diagnostics/score.py``) → replace the reward with a strict
   rule over the harness's declared answer protocol (exactly one answer, compared as the manifest says).
2. ``raise-length-budget`` (trainer): responses are cut at the cap → raise the cap first, before any reward
   redesign: ``max_new_tokens``, or on an agentic harness the per-turn ``max_turn_tokens`` (the patch names
   ``@length_cap``, `trainer_backend.local.plugin.LENGTH_CAPS`).
3. ``std-group-filter`` (filter): many zero-variance groups and no working filter → replace the harness's
   group-filter file (the manifest's ``group_filter`` entry, e.g. the demo's keep-everything filter) with
   StdGroupFilter (which also leaves episodes marked by a level-1 trajectory filter out of a group's
   spread: the "dual-level filter" with ``trajectory-filter``). The manifest is protected, so the skill
   cannot wire a filter into a harness whose manifest declares none; it fails loudly there instead.
4. ``dense-auxiliary-reward`` (reward): most groups dead under a discrete reward → strict reward plus a
   small continuous closeness term (max 0.2 < 1.0, correctness stays dominant).
5. ``never-reward-brevity`` (guard): a candidate reward pays for length, brevity or turns (a read of
   ``num_turns`` in a reward's numeric operations too), or agentic rollouts show successes paid more for fewer turns
   → warn; these rewards get hacked (one-turn collapse).
6. ``learnable-data-mix`` (data): dead groups concentrate in data sources too easy or too hard for the
   policy (most of their groups all solved or all failed: ``dead_source_share``, ``diagnostics/sources.py``)
   → set their weight in the data selection (``harness/data.yaml``'s ``weights``, over the values of the
   manifest's ``data.select_by`` field) to 0, from the run's per-source dead-group ratios. It removes data,
   so it waits for the critical dead-group ratio (> 0.5; between 0.3 and 0.5 the filter, skill 3, is the
   lighter fix: the demo's fixed harness sits at ~0.31 with its second-easiest source 58% dead), for
   responses that are not cut (``truncation_rate <= 0.15``: a
   truncated source looks too hard when the length budget is the defect; raise it first, skill 2) and for
   a reward that is not hacked and does not fail correct answers (``reward_hacking == 0``,
   ``unrewarded_correct_rate <= 0.05``: a format gate, as in the format-gate benchmark scenario, makes a
   learnable source look too hard; fix the reward first, skill 1).
7. ``stabilise-policy-updates`` (trainer): single updates jump far beyond a trust-region step
   (``ppo_kl_max``) or the training score collapses (``diagnostics/updates.py``) → learning rate / 10
   and the Clip-Higher range (0.2 / 0.28).

Template patches name files through the manifest (``@reward``, ``@trainer_config``; ``@data_selection``
through the trainer config), so they apply to any harness following the contract; the rewards of skills 1
and 4 are generated from the manifest's declared answer protocol (``write_reward``), so they apply to any
domain whose manifest declares one (``skills.patches.skill_fits``). A skill's ``domain`` only orders
retrieval (own domain first, ``skills/retrieval.py``). Pure data.
"""

from __future__ import annotations

from diagnostics.agentic import REWARD_CORR_WARNING
from diagnostics.agentic_docs import TRAJECTORY_MARK
from diagnostics.score import MISRANKED_GROUP_WARNING
from diagnostics.sources import DEAD_SOURCE_AT, DEAD_SOURCE_SHARE_WARNING, MIN_SOURCE_GROUPS
from skills.agentic_seeds import AGENTIC_SKILLS
from skills.models import SkillSpec
from skills.seed_parts import ANSWER_RULES, PAPER, ops
from skills.templates import ANSWER_PROTOCOL_MARK

STRICT_REWARD = f'''"""Strict reward: exactly one answer of the declared protocol, equal to the ground truth.

Installed by the EvoTrainer skill `strict-answer-extraction` (paper arXiv 2606.03108 §6.3 rule 4, §9).
The answer protocol below is the one evotrainer.yaml declares (its `answer:` field), copied in when this
file was written. A response earns 1.0 only when it holds exactly one answer, nothing follows it when the
protocol is final, and it equals the ground truth under the declared comparison; everything else (no
answer, several answers, text after a final answer, a wrong one) earns 0.0, so answer spam and
format-only outputs score low. When TOOL_GATE is set (the harness's env declares tools), a right answer
also needs at least one tool call in the episode: without one it is a guess.
"""

import math
import re

{ANSWER_PROTOCOL_MARK}
{ANSWER_RULES}

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return {{"score": 1.0 | 0.0, "format_ok": 0/1, "correct": 0/1}}."""
    answer = extract_answer(solution_str)
    correct = answer is not None and episode_used_a_tool(extra_info, solution_str) and same_answer(answer, ground_truth)
    return {{"score": float(correct), "format_ok": float(answer is not None), "correct": float(correct)}}
'''

DENSE_REWARD = f'''"""Strict reward plus a small dense term that gives dead groups a gradient.

Installed by the EvoTrainer skill `dense-auxiliary-reward` (paper arXiv 2606.03108 §6.3 rule 1, §6.4):
when most groups are dead under a discrete reward, add a continuous signal. The answer protocol below is
the one evotrainer.yaml declares, copied in when this file was written. A correct, well-formed answer
earns 1.0; a well-formed wrong answer earns AUX_WEIGHT * closeness (1 - relative error, clipped at 0, for
numeric comparisons; the characters' similarity ratio for exact ones); a malformed response earns 0.0.
The bonus never reaches 1.0, so correctness stays dominant, and it never pays for length or brevity (§9).
"""

import difflib
import math
import re

AUX_WEIGHT = 0.2
{ANSWER_PROTOCOL_MARK}
{ANSWER_RULES}

def closeness(answer, ground_truth):
    """Return how close a wrong answer is to the ground truth, in [0, 1]."""
    truth = str(ground_truth).strip()
    if COMPARE == "exact":
        return difflib.SequenceMatcher(None, answer, truth).ratio()
    a, b = _number(answer), _number(truth)
    if a is None or b is None:
        return 0.0
    return max(0.0, 1.0 - abs(a - b) / max(1.0, abs(b)))


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return {{"score", "format_ok", "correct", "closeness"}}; score in [0, 1]."""
    answer = extract_answer(solution_str)
    if answer is None or not episode_used_a_tool(extra_info, solution_str):
        return {{"score": 0.0, "format_ok": float(answer is not None), "correct": 0.0, "closeness": 0.0}}
    if same_answer(answer, ground_truth):
        return {{"score": 1.0, "format_ok": 1.0, "correct": 1.0, "closeness": 1.0}}
    near = closeness(answer, ground_truth)
    return {{"score": AUX_WEIGHT * near, "format_ok": 1.0, "correct": 0.0, "closeness": near}}
'''

STD_GROUP_FILTER = '''"""StdGroupFilter: drop low-information GRPO groups before advantage normalisation.

Installed by the EvoTrainer skill `std-group-filter` (paper arXiv 2606.03108 §8, App. C). Always drops
groups whose reward std is 0 (zero advantage). After a warm-up, also drops groups whose std falls below
`ema_mean - z * ema_std` of an EMA over the batch std distribution (z from KEEP_RATIO through the inverse
normal CDF: 0.9 -> 1.28) or below MIN_STD; never drops more than 1 - MIN_KEEP_RATIO of the groups that
have any variance. Contract: filter_groups(group_rewards, state) -> one keep flag per group; `state` is a
JSON-serialisable dict the trainer keeps across steps. Episodes scored TRAJECTORY_MARK by a level-1
trajectory filter in the reward (§8: abandonment, echo traps, token-cap hits) are left out of each group's
spread: a group whose other episodes all agree is dropped (the "dual-level filter").
"""

import math
from statistics import NormalDist, fmean, pstdev

TRAJECTORY_MARK = __MARK__  # -2**-24: the score of an episode the level-1 trajectory filter dropped
KEEP_RATIO = 0.9
MIN_KEEP_RATIO = 0.5
EMA_DECAY = 0.1  # weight of the newest batch in the EMA
MIN_STD = 0.01
WARMUP_GROUPS = 20
ZERO_STD = 1e-6


def filter_groups(group_rewards, state):
    """Return one keep flag per group (True = use the group for the policy update)."""
    # An episode a level-1 trajectory filter marked (its reward scored TRAJECTORY_MARK) carries no information
    # of its own: a group's spread is that of its other episodes.
    unmarked = [[r for r in g if r != TRAJECTORY_MARK] for g in group_rewards]
    stds = [pstdev(g) if len(g) > 1 else 0.0 for g in unmarked]
    keep = [s > ZERO_STD for s in stds]
    if state.get("groups_seen", 0) >= WARMUP_GROUPS and "ema_mean" in state:
        z = NormalDist().inv_cdf(KEEP_RATIO)
        threshold = max(MIN_STD, state["ema_mean"] - z * state["ema_std"])
        live = [i for i, k in enumerate(keep) if k]
        floor = math.ceil(MIN_KEEP_RATIO * len(live))
        by_std = sorted(live, key=lambda i: stds[i], reverse=True)
        keep = [False] * len(stds)
        for rank, i in enumerate(by_std):
            keep[i] = stds[i] >= threshold or rank < floor
    live_stds = [s for s in stds if s > ZERO_STD]
    if live_stds:
        mean, spread = fmean(live_stds), pstdev(live_stds)
        if "ema_mean" in state:
            mean = (1 - EMA_DECAY) * state["ema_mean"] + EMA_DECAY * mean
            spread = (1 - EMA_DECAY) * state["ema_std"] + EMA_DECAY * spread
        state["ema_mean"], state["ema_std"] = mean, spread
    state["groups_seen"] = state.get("groups_seen", 0) + len(stds)
    return keep
'''.replace("__MARK__", repr(TRAJECTORY_MARK))


_CORE_SKILLS: tuple[SkillSpec, ...] = (
    SkillSpec(
        name="strict-answer-extraction",
        domain="math",
        trigger="reward_hacking >= 1 or rewarded_wrong_rate > 0.05 or unrewarded_correct_rate > 0.05 "
        f"or misranked_group_rate > {MISRANKED_GROUP_WARNING}",
        factor="reward",
        patch_kind="template",
        patch=ops({"op": "write_reward", "file": "@reward", "content": STRICT_REWARD}),
        expected_outcome="rewarded_wrong_rate falls to ~0 and the reward_hacking alarm clears; training reward "
        "tracks strict_acc again; strict_acc holds or rises within the next version",
        validation_rule="backtest: hack corpus max score <= 0.1 and no rank violations against strict correctness "
        "on cached rollouts; pilot: reward_hacking == 0 and strict_acc_delta >= 0 (paired test vs parent)",
        applicability=("*",),
        provenance=f"{PAPER} §6.3 rule 4 (shaped reward up, strict flat: reward hacking), §9, §10",
    ),
    SkillSpec(
        name="raise-length-budget",
        domain="math",
        trigger="truncation_rate > 0.15",
        factor="trainer",
        patch_kind="template",
        patch=ops(
            {
                "op": "set_yaml_key",
                "file": "@trainer_config",
                "key": "@length_cap",  # max_new_tokens; an agentic harness's per-turn max_turn_tokens
                "value": "{{ min(max(2 * current, min_tokens), max_tokens) }}",
            }
        ),
        params={"min_tokens": 64, "max_tokens": 32768},
        expected_outcome="truncation_rate drops below 0.05 and format_failure_rate falls; strict_acc rises "
        "without any reward change (responses were cut before their answer)",
        validation_rule="pilot: truncation_rate <= 0.05 and strict_acc_delta >= 0; do this before redesigning the "
        "reward, and re-diagnose the reward only after truncation is fixed",
        applicability=("*",),
        provenance=f"{PAPER} §10 (truncation ~18% at Math v0; Coding format-gate false negatives: raise "
        "max_new_tokens before any reward redesign), §12.2 (Math v5 length unlock)",
    ),
    SkillSpec(
        name="std-group-filter",
        domain="swe",
        trigger="dead_group_ratio > 0.3 and filter_present == 0",
        factor="filter",
        patch_kind="template",
        patch=ops({"op": "replace_file", "file": "@group_filter", "content": STD_GROUP_FILTER}),
        expected_outcome="groups used for the update all carry variance; dead_group_ratio among kept groups ~0, "
        "kept ratio >= 0.5; strict_acc gains ~+1 point over a few versions (Math v7 +0.96, Coding v9 +1.17)",
        validation_rule="backtest: kept-sample ratio >= 0.5 and every kept group has std > 0 on cached rollouts; "
        "pilot: strict_acc_delta >= 0 vs parent with no entropy collapse",
        applicability=("math", "code", "swe"),
        provenance=f"{PAPER} §8 StdGroupFilter (top_p, keep 0.9, min keep 0.5, EMA 0.1, min std 0.01, warm-up 20), "
        "§3 (transferred SWE -> Coding v9 and Math v7)",
    ),
    SkillSpec(
        name="dense-auxiliary-reward",
        domain="math",
        trigger="dead_group_ratio > 0.5 and reward_discrete == 1",
        factor="reward",
        patch_kind="template",
        patch=ops({"op": "write_reward", "file": "@reward", "content": DENSE_REWARD}),
        expected_outcome="dead groups regain variance (SWE-9B: 45% of dead groups rescued in backtest; DGR "
        "~60% -> ~28%); strict_acc rises while correctness stays the dominant reward term",
        validation_rule="backtest: >= 30% of dead groups regain non-zero std and no rank violations between "
        "correct and wrong answers; pilot: dead_group_ratio falls and strict_acc_delta >= 0, reward_hacking == 0",
        applicability=("*",),
        provenance=f"{PAPER} §6.3 rule 1, §6.4 (DGR > 50% and discrete reward -> add an auxiliary continuous "
        "signal), §7 (IF-judge dead-group rescue)",
    ),
    SkillSpec(
        name="never-reward-brevity",
        domain="swe",
        # a single-turn run has no turn counts: the turn term is then declared False, not unknown
        trigger="candidate_reward_length_term >= 1 "
        f"or (known(turns_reward_corr) and turns_reward_corr < -{REWARD_CORR_WARNING})",
        factor="guard",
        patch_kind="template",
        patch=ops(
            {
                "op": "guard",
                "rule": "refuse a candidate reward that pays for short responses, few turns or low token counts "
                "(an efficiency factor such as 1 - 0.3 * num_turns / max_turns included); reward confirmed "
                "behaviour (a correct answer, a test after an edit) instead",
            }
        ),
        expected_outcome="no candidate reward pays for brevity; avoids one-turn collapse (turns 36.7 -> 1.0, "
        "BC 21.3 -> 0.0, dead groups 19.5% -> 100% in SWE-4B v9)",
        validation_rule="every candidate reward's source is scanned (skills.context.length_terms: lengths, tokens "
        "and turn counts, extra_info['num_turns'] reads included) and agentic rollouts are checked (successful "
        "episodes paid more for fewer turns: turns_reward_corr); a match is shown as a warning and needs an "
        "explicit justification to proceed",
        applicability=("*",),
        provenance=f"{PAPER} §9 (toxic rewards: never reward brevity directly), §10 (one-turn collapse)",
    ),
    SkillSpec(
        name="learnable-data-mix",
        domain="math",
        trigger=f"dead_group_ratio > 0.5 and dead_source_share >= {DEAD_SOURCE_SHARE_WARNING} "
        "and truncation_rate <= 0.15 and reward_hacking == 0 and unrewarded_correct_rate <= 0.05",
        factor="data",
        patch_kind="template",
        patch=ops(
            {
                "op": "reweight_sources",
                "file": "@data_selection",
                "key": "weights",
                "dead_at": "{{ dead_at }}",
                "min_groups": "{{ min_groups }}",
            }
        ),
        params={"dead_at": DEAD_SOURCE_AT, "min_groups": MIN_SOURCE_GROUPS},
        expected_outcome="dead sources leave the batch: dead_group_ratio and dead_source_share fall and every "
        "sampled source carries GRPO signal; strict_acc on the held-out set holds or rises (demo, strict reward, "
        "48 tokens, 60 steps, seeds 0/1: the rule's mix, the two middle sources at 0.5 each, 0.81/0.93 vs the "
        "defective mix 0.77/0.89)",
        validation_rule="pilot: dead_source_share < 0.3, dead_group_ratio below the parent's and strict_acc_delta "
        ">= 0 vs parent (paired test); the re-weighted file still loads (trainer_backend.local.config."
        "load_data_weights)",
        applicability=("*",),
        provenance=f"{PAPER} §1-2 (data selection is an intervention factor), §6.1 (dead-data ratio: group "
        "reward std 0; dead > 50% CRITICAL, applied here per source; Math: solve rate per subset). The per-source "
        "rule is EvoTrainer's (inferred, not a paper skill), checked on the demo harness and the dead-groups "
        "benchmark scenario (it zeroes the always-solved and never-solved sources there, as the oracle does)",
    ),
    SkillSpec(
        name="stabilise-policy-updates",
        domain="*",
        trigger="ppo_kl_max > 0.02 or train_score_collapse > 0.5",
        factor="trainer",
        patch_kind="template",
        patch=ops(
            {"op": "set_yaml_key", "file": "@trainer_config", "key": "lr", "value": "{{ current / lr_divisor }}"},
            {"op": "set_yaml_key", "file": "@trainer_config", "key": "clip_low", "value": "{{ min(current, 0.2) }}"},
            {"op": "set_yaml_key", "file": "@trainer_config", "key": "clip_high", "value": "{{ min(current, 0.28) }}"},
        ),
        params={"lr_divisor": 10},
        expected_outcome="per-step policy shift back to a trust-region step (ppo_kl_max < 0.02) and no training-score "
        "collapse; strict_acc holds or rises instead of collapsing",
        validation_rule="pilot: ppo_kl_max <= 0.02, train_score_collapse < 0.5 and strict_acc_delta >= 0 vs parent "
        "(paired test). A policy that already collapsed does not recover within one pilot: the skill stops the "
        "damage, and the controller's rollback (agent/decisions/rollback.py) tests it from the pre-collapse policy",
        applicability=("*",),
        provenance=f"{PAPER} execution step (watch for entropy collapse or KL explosion), §12 (GRPO with Clip-Higher "
        "ε 0.20 / 0.27-0.28, token-level clipping); the KL and collapse thresholds are EvoTrainer's, set from the "
        "demo's oracle harness (max step KL 0.002) and the unstable-optimiser scenario (0.12, score 0.57 -> 0)",
    ),
)
SEED_SKILLS: tuple[SkillSpec, ...] = (*_CORE_SKILLS, *AGENTIC_SKILLS)
