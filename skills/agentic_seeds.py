"""Agentic seed skills: the paper's interventions for multi-turn episodes with tools (arXiv 2606.03108 §8-§10).

Triggers read the agentic health metrics (`diagnostics/agentic.py`, present only on runs with agentic
episodes) and the trigger context (`skills/context.py`); patches name the declared tools by role
(`TOOL_ROLES_MARK`, from the manifest's `env.tools`, `diagnostics/tool_roles.py`), so every skill works on any
agentic harness. `skills.patches.skill_fits` keeps them off harnesses without an env.

1. ``trajectory-filter`` (reward): the level-1 trajectory filter (§8). Many episodes abandon the task, loop
   (echo trap) or hit the token cap → wrap the reward so that such an episode, when the reward does not pay
   it like a success (at most half the successes' mean reward, ``reward_mean_success``), scores
   `TRAJECTORY_MARK` (-2**-24). The group-filter contract sees rewards only and the trainer
   masks no single episode, so the mark is how the filter learns which episodes to leave out: a mark-aware
   filter (the seed StdGroupFilter: `std-group-filter`) takes each group's spread over its unmarked episodes
   and drops a group whose unmarked episodes agree. With StdGroupFilter this is the paper's "dual-level
   filter" (Coding v10, +1.08). No trainer change: the mark is numerically a zero reward, so a filter that does
   not know it sees an unpaid episode, and the trigger waits for a mark-aware filter (``filter_drops_marked``)
   so the skill is never a no-op. A marked episode in a kept group still counts as unpaid (a group filter
   cannot drop single episodes); marks are counted in the report (``marked_rate``).
2. ``raise-turn-budget`` (trainer): the turn cap cuts work that would succeed. Its trigger is the agentic
   layer's own rules with their thresholds (`diagnostics/agentic.py`): the cut episodes are work in progress
   (no failed, no repeated call: ``cut_progress_rate``) and the ``agentic.echo_trap`` alert is quiet (a longer
   cap only lengthens loops), and either the ``agentic.cut_successes`` alert fires (successes use every turn
   the cap allows, ``success_at_cap_rate``), whatever share of all episodes the cap cuts, or
   ``agentic.episode_cut`` fires on the turn cap (``max_turns_rate``) → double ``max_turns`` (§7
   soft-truncation backtest, §10). A cap that binds on successes cuts the longer ones even when they are few
   of the batch (a level that needs one turn more than the cap allows is dead however small its share).
3. ``confirmed-behaviour-reward`` (reward): the reward pays a count of actions (tool spam: unsuccessful
   episodes earn more the more they call), or the policy stops checking its work → replace it with the strict
   answer reward plus confirmation terms: +0.1 when a search precedes the first action, +0.15 when a verify
   follows the last action (§9's SBE / ETT; asymmetric against reward ties; at most 0.25 < 1.0, correctness
   stays dominant). It credits a check after an action, never a count of anything.
4. ``never-pay-action-counts`` (guard): a reward pays tool calls or actions by count → warn (§9: iterative-
   debugging reward drove turns 38 → 56; behaviour rewards get hacked).

The existing ``never-reward-brevity`` guard (`skills/seeds.py`) covers turn counts: its length-term scan reads
`extra_info["num_turns"]`-style fields, and its trigger also fires when the rollouts show successful episodes
earning more the fewer turns they take (``turns_reward_corr``, the multiplicative efficiency factor that drove
turns 36.7 → 1.0 in SWE-4B v9).

What the reward sees: these templates read the episode from ``extra_info``: ``num_turns``, ``tool_calls``,
``stop_reason``, ``truncated`` and ``turns`` (a list of ``{"tool": name, ...}``); an episode without them is
never marked and earns no confirmation term. Pure data.
"""

from __future__ import annotations

from diagnostics.agentic import (
    ABANDON_MAX_TURNS,
    ACT_THEN_VERIFY_WARNING,
    CUT_PROGRESS_SHARE,
    CUT_SUCCESS_WARNING,
    CUT_WARNING,
    ECHO_TRAP_WARNING,
    REWARD_CORR_WARNING,
)
from diagnostics.agentic_docs import TRAJECTORY_MARK
from skills.models import SkillSpec
from skills.seed_parts import ANSWER_RULES, PAPER, ops
from skills.templates import ANSWER_PROTOCOL_MARK, REWARD_FUNCTION, TOOL_ROLES_MARK, VALUES_MARK

LEVEL1_WRAPPER = f'''# --- EvoTrainer skill trajectory-filter: level-1 trajectory filter (paper arXiv 2606.03108 §8) ---
# An episode that abandoned the task (ABANDON_AT turns or fewer without an action), looped (more than ECHO_AT
# turns, or stopped as an echo trap) or hit the token cap, and that the reward above does not pay like a
# success (score at most PAY_FLOOR: half the successes' mean reward in the run), scores TRAJECTORY_MARK
# instead. A mark-aware group filter (StdGroupFilter) leaves such episodes out of their group's spread; to
# any other filter the mark (-2**-24) is an unpaid episode.
# Episodes whose extra_info carries no trajectory (num_turns) are never marked.
{VALUES_MARK}
{TOOL_ROLES_MARK}
TRAJECTORY_MARK = {TRAJECTORY_MARK!r}
_level1_reward = {REWARD_FUNCTION}


def _level1_reason(info, score):
    """Why the level-1 filter drops this episode ("abandon", "echo_trap", "token_cap"), or None."""
    n = info.get("num_turns")
    if not isinstance(n, int) or isinstance(score, bool) or not isinstance(score, (int, float)) or score > PAY_FLOOR:
        return None
    stop = info.get("stop_reason")
    trajectory = info.get("turns")
    called = None
    if isinstance(trajectory, list):
        called = [t.get("tool") for t in trajectory if isinstance(t, dict) and t.get("tool")]
    if ACT_TOOLS and called is not None:
        acted = any(name in ACT_TOOLS for name in called)
    else:  # no act-role tool: the answer is the action, and any tool call counts as doing the work
        acted = bool(called) if called is not None else bool(info.get("tool_calls"))
    if stop == "abandon" or (n <= ABANDON_AT and not acted):
        return "abandon"
    if stop == "echo_trap" or n > ECHO_AT:
        return "echo_trap"
    if stop == "length" or info.get("truncated") is True:
        return "token_cap"
    return None


def {REWARD_FUNCTION}(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """The reward above; an episode the level-1 filter drops scores TRAJECTORY_MARK (level1_filtered = 1)."""
    value = _level1_reward(data_source, solution_str, ground_truth, extra_info, **kwargs)
    score = value.get("score") if isinstance(value, dict) else value
    reason = _level1_reason(extra_info if isinstance(extra_info, dict) else {{}}, score)
    out = dict(value) if isinstance(value, dict) else {{"score": value}}
    out["level1_filtered"] = 0.0 if reason is None else 1.0
    if reason is not None:
        out["score"] = TRAJECTORY_MARK
    return out
'''

CONFIRMED_REWARD = f'''"""Strict reward plus confirmation terms: a look before the first action, a check after the last.

Installed by the EvoTrainer skill `confirmed-behaviour-reward` (paper arXiv 2606.03108 §9: r = CR + 0.1 SBE +
0.15 ETT). A well-formed answer equal to the ground truth earns 1.0; a well-formed answer (right or wrong)
earns SEARCH_BONUS when a search call came before the episode's first action and VERIFY_BONUS when a verify
call came after its last action (without act-role tools the final answer is the action: a search or verify
before it counts). A malformed response earns 0.0. The terms confirm behaviour already done; nothing is
counted (paying tool calls or turns gets hacked: tool spam, one-turn collapse), and the bonus (at most 0.25)
never reaches the correctness term. The answer protocol and the tools by role are the ones evotrainer.yaml
declares, copied in when this file was written.
"""

import math
import re

SEARCH_BONUS = 0.1  # asymmetric weights: symmetric ones tied many episodes' rewards (paper §9)
VERIFY_BONUS = 0.15
{ANSWER_PROTOCOL_MARK}
{TOOL_ROLES_MARK}
{ANSWER_RULES}

def called_tools(extra_info):
    """The tools the episode called, in order (from extra_info["turns"]; empty when not recorded)."""
    turns = (extra_info or {{}}).get("turns") or []
    return [t.get("tool") for t in turns if isinstance(t, dict) and t.get("tool")]


def confirmations(tools):
    """(a search before the first action, a verify after the last action) for one episode's tool calls."""
    acts = [i for i, name in enumerate(tools) if name in ACT_TOOLS]
    if ACT_TOOLS and not acts:
        return False, False  # it never acted: nothing to confirm
    first = acts[0] if acts else None
    last = acts[-1] if acts else -1
    searched = any(name in SEARCH_TOOLS for name in tools[:first])
    verified = any(name in VERIFY_TOOLS for name in tools[last + 1 :])
    return searched, verified


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return {{"score", "format_ok", "correct", "searched", "verified"}}; score in [0, 1.25]."""
    answer = extract_answer(solution_str)
    if answer is None:
        return {{"score": 0.0, "format_ok": 0.0, "correct": 0.0, "searched": 0.0, "verified": 0.0}}
    correct = float(episode_used_a_tool(extra_info, solution_str) and same_answer(answer, ground_truth))
    searched, verified = confirmations(called_tools(extra_info))
    score = correct + SEARCH_BONUS * searched + VERIFY_BONUS * verified
    return {{"score": score, "format_ok": 1.0, "correct": correct, "searched": float(searched),
            "verified": float(verified)}}
'''

AGENTIC_SKILLS: tuple[SkillSpec, ...] = (
    SkillSpec(
        name="trajectory-filter",
        domain="swe",
        trigger=f"filter_drops_marked == 1 and marked_rate < 0.01 and (abandon_rate > 0.2 or echo_trap_rate > 0.1 "
        f"or token_cap_rate > {CUT_WARNING})",
        factor="reward",
        patch_kind="template",
        patch=ops(
            {
                "op": "wrap_reward",
                "file": "@reward",
                "content": LEVEL1_WRAPPER,
                "values": {
                    "ABANDON_AT": "{{ abandon_at }}",
                    "ECHO_AT": "{{ echo_trap_turns }}",
                    "PAY_FLOOR": "{{ pay_share * reward_mean_success }}",
                },
            }
        ),
        params={"abandon_at": ABANDON_MAX_TURNS, "pay_share": 0.5},
        expected_outcome="abandoned, looping and token-capped episodes that earn nothing stop shaping the update: "
        "marked_rate equals their share, groups left with one unanimous outcome are dropped by the group filter, "
        "strict_acc holds or rises (Coding v10 dual-level filter +1.08; SWE-4B: covered 2-4% of trajectories)",
        validation_rule="backtest: no rank violations against strict correctness, kept-sample ratio >= 0.5; pilot: "
        "strict_acc_delta >= 0 vs parent (paired test) and abandon_rate / echo_trap_rate not above the parent's",
        applicability=("*",),
        provenance=f"{PAPER} §8 (two-level filter: first per trajectory, -999 for abandonment <= 3 turns with no "
        "edit, echo trap > 60 turns with CR = 0, max-token hit; then per group, StdGroupFilter), §7 (coverage), "
        "§10. The mark value and the mark-aware filter are EvoTrainer's (no per-sample mask in the trainer)",
    ),
    SkillSpec(
        name="raise-turn-budget",
        domain="swe",
        trigger=f"cut_progress_rate >= {CUT_PROGRESS_SHARE} and echo_trap_rate < {ECHO_TRAP_WARNING} "
        f"and (success_at_cap_rate > {CUT_SUCCESS_WARNING} or max_turns_rate > {CUT_WARNING})",
        factor="trainer",
        patch_kind="template",
        patch=ops(
            {
                "op": "set_yaml_key",
                "file": "@trainer_config",
                "key": "max_turns",
                "value": "{{ int(min(max(2 * current, current + 2), max_turns_limit)) }}",
                "create": True,
                "default": "{{ int(turn_cap) }}",
            }
        ),
        params={"max_turns_limit": 64},
        expected_outcome="fewer episodes cut at the turn cap (max_turns_rate falls) and successes no longer use every "
        "allowed turn (success_at_cap_rate falls); strict_acc rises without any reward change",
        validation_rule="pilot: max_turns_rate below the parent's, echo_trap_rate not above it, strict_acc_delta >= 0 "
        "vs parent (paired test); do this before a reward redesign, as for the token budget",
        applicability=("*",),
        provenance=f"{PAPER} §7 (soft-truncation backtest: 15 turns cut 6-18 successes, 20 turns 3-5), §10 "
        "(truncation fixed by the budget first). Not for echo traps: cut episodes must be work in progress "
        "(cut_progress_rate) or successes must press against the cap (success_at_cap_rate)",
    ),
    SkillSpec(
        name="confirmed-behaviour-reward",
        domain="swe",
        trigger=f"tool_calls_reward_corr > {REWARD_CORR_WARNING} or candidate_reward_action_count_term >= 1 "
        f"or act_then_verify_rate < {ACT_THEN_VERIFY_WARNING}",
        factor="reward",
        patch_kind="template",
        patch=ops({"op": "write_reward", "file": "@reward", "content": CONFIRMED_REWARD}),
        expected_outcome="the reward stops paying call counts (tool_calls_reward_corr and paid_without_success_rate "
        "fall, repeated_call_rate falls); act_then_verify_rate and search_before_act_rate rise; strict_acc holds or "
        "rises",
        validation_rule="backtest: hack corpus max score <= 0.1, no rank violations against strict correctness; "
        "pilot: strict_acc_delta >= 0 vs parent (paired test), turns_mean neither collapses nor explodes",
        applicability=("*",),
        provenance=f"{PAPER} §9 (final SWE reward CR + 0.1 IF + 0.1 SBE + 0.15 ETT; asymmetric weights against "
        "ties; toxic rewards: prefer terms that confirm behaviour already done), §6.3 rule 5 (laziness -> "
        "self-test reward)",
    ),
    SkillSpec(
        name="never-pay-action-counts",
        domain="swe",
        trigger=f"candidate_reward_action_count_term >= 1 or tool_calls_reward_corr > {REWARD_CORR_WARNING}",
        factor="guard",
        patch_kind="template",
        patch=ops(
            {
                "op": "guard",
                "rule": "refuse a candidate reward that pays a count of tool calls, actions or turns; credit a "
                "check done after an action (a test after the last edit, a search before the first) instead",
            }
        ),
        expected_outcome="no candidate reward pays behaviour by count; avoids tool spam and echo traps (SWE-4B: an "
        "iterative-debugging reward drove turns 38 -> 56; a fail-to-pass progress reward exploded turns, BC -10 pp)",
        validation_rule="every candidate reward's source is scanned (skills.context.count_terms) and the rollouts "
        "checked (tool_calls_reward_corr); a match is shown as a warning and needs a justification to proceed",
        applicability=("*",),
        provenance=f"{PAPER} §9 (toxic rewards: any reward that directly optimises a behaviour metric gets hacked)",
    ),
)
