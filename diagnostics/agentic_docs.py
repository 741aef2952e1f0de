"""The agentic layer's vocabulary: its metric names with their meaning and rule, the alerts that count as
reward hacks, and the level-1 mark.

Pure constants (no polars), so skill triggers and patches can name agentic metrics without loading the
table machinery. The rules that compute and grade these metrics are in `diagnostics/agentic.py`.
"""

from __future__ import annotations

# Level-1 trajectory filter (paper §8; skills/seeds.py `trajectory-filter`): the reward gives an episode it
# filters this exact score. It is -2**-24: recognisable exactly (float32 and JSON keep it), and numerically a
# zero reward, so a group filter that does not know the mark treats the episode as unpaid, and a group of
# unpaid episodes with some marks stays dead (std < 1e-6).
TRAJECTORY_MARK = -(2.0**-24)

# Agentic alerts that say the reward is being gamed (paper §9 toxic rewards, §10 one-turn collapse): like the
# score layer's hack alerts (`diagnostics.findings.HACK_ALERT_IDS`, which includes these), any new one at
# warning turns a candidate's strict improvement into "mixed", so it is never promoted. One-turn collapse is
# the signature of a brevity reward (the never-reward-brevity guard applied to turn counts): a branch whose
# turns collapse is refused even when its training reward is the highest.
ONE_TURN_COLLAPSE = "agentic.one_turn_collapse"
PAID_WITHOUT_SUCCESS = "agentic.paid_without_success"
REWARD_PAYS_TOOL_CALLS = "agentic.reward_pays_tool_calls"
REWARD_PAYS_FEWER_TURNS = "agentic.reward_pays_fewer_turns"
# The environment's answers to one call mislead the episodes that get them: not a reward hack.
MISLEADING_RESULT = "agentic.tool_result_misleads"
# The environment refuses well-formed calls it answers in other episodes: a limit of its code binds.
REFUSED_KNOWN_CALLS = "agentic.tool_refuses_known_calls"
# Replayed against fresh environments in another order, recorded calls get other answers (the environment
# carries state across episodes), or two identical replays disagree (it is nondeterministic):
# `diagnostics/env_replay.py`, evidence the sandbox replay adds to a session's report.
ENV_CARRIES_STATE = "agentic.env_carries_state"
ENV_NONDETERMINISTIC = "agentic.env_nondeterministic"
AGENTIC_HACK_ALERT_IDS = frozenset({ONE_TURN_COLLAPSE, PAID_WITHOUT_SUCCESS, REWARD_PAYS_TOOL_CALLS,
                                    REWARD_PAYS_FEWER_TURNS})  # fmt: skip

_AGENTIC_DOCS: dict[str, tuple[str, str]] = {  # metric -> (meaning, rule that grades it)
    "turns_mean": ("mean turns per episode", "agentic.one_turn_collapse, agentic.echo_trap, agentic.turns_rising"),
    "turns_p90": ("P90 of turns per episode", "agentic.one_turn_collapse"),
    "turns_mean_success": ("mean turns of successful episodes", "agentic.failed_turns, agentic.echo_trap"),
    "turns_mean_failed": ("mean turns of unsuccessful episodes", "agentic.failed_turns"),
    "turns_p90_success": ("P90 turns of successful episodes", "agentic.failed_turns"),
    "turns_p90_failed": ("P90 turns of unsuccessful episodes", "agentic.failed_turns"),
    "failed_turns_ratio": ("mean turns of unsuccessful episodes / mean turns", "agentic.failed_turns > 1.5"),
    "turns_rising": ("1 when mean turns rose 3 steps in a row (0 otherwise)", "agentic.turns_rising"),
    "one_turn_rate": ("share of one-turn episodes", "agentic.one_turn_collapse > 0.5 / 0.9"),
    "tool_calls_mean": ("mean tool calls per episode (tool-call frequency)", "agentic.tool_spam"),
    "tool_calls_per_turn": ("tool calls / turns over all episodes", "agentic.tool_spam"),
    "tool_calls_mean_success": ("mean tool calls of successful episodes", "agentic.reward_pays_tool_calls"),
    "tool_calls_mean_failed": ("mean tool calls of unsuccessful episodes", "agentic.reward_pays_tool_calls"),
    "tool_failure_rate": ("failed calls / calls, all tools", "agentic.tool_failure"),
    "tool_failure_rate_max": ("highest failure rate of a tool with >= 20 calls", "agentic.tool_failure > 0.15"),
    "tool_failure_rate/<tool>": ("failure rate of one tool (the 16 most called)", "agentic.tool_failure"),
    "tool_share/<tool>": ("share of all calls made to one tool (the 16 most called)", "agentic.tool_diversity"),
    "search_ratio": ("search-role calls / calls", "agentic.action_timidity"),
    "act_ratio": ("act-role calls / calls", "agentic.action_timidity"),
    "verify_ratio": ("verify-role calls / calls", "agentic.act_then_verify"),
    "act_by_answer": ("1 when the harness has no act-role tool and its final answer is the action", "-"),
    "first_action_turn": ("mean turn (1-based) of the first action (act-role tool mode only)",
                          "agentic.action_timidity"),
    "first_action_position": ("mean of (first action index) / (turns - 1) over acting episodes of >= 2 turns",
                              "agentic.action_timidity > 0.75"),
    "search_before_act_rate": ("acting episodes with a search before the first action",
                               "agentic.search_before_act < 0.5"),
    "act_then_verify_rate": ("acting episodes with a verify after the last action (answer mode: before the "
                             "answer)", "agentic.act_then_verify < 0.5"),
    "tool_type_entropy": (
        "mean per-episode entropy of the tool names called (bits), over episodes of two or more calls",
        "agentic.tool_diversity",
    ),
    "tool_type_entropy_norm": (
        "tool_type_entropy / log2(tools the harness declares, else distinct tools in the run); unknown (NaN) on a "
        "harness with one tool or a run without a two-call episode",
        "agentic.tool_diversity < 0.2",
    ),
    "max_same_tool_run_mean": ("mean longest run of one tool per episode", "agentic.same_tool_run"),
    "max_same_tool_run_p90": ("P90 of the longest run of one tool per episode", "agentic.same_tool_run > 10"),
    "call_bigram_repetition": ("mean 1 - unique/total bigrams of (tool, arguments) calls, episodes with >= 3",
                               "agentic.call_repetition > 0.5"),
    "repeated_call_rate": ("mean share of calls repeating an identical earlier call, episodes with >= 2",
                           "agentic.tool_spam > 0.3"),
    "abandon_rate": ("share of episodes with <= 3 turns and no action (or stop reason abandon)",
                     "agentic.abandonment > 0.2 / 0.5"),
    "echo_trap_turns": ("turns above which an unsuccessful episode is an echo trap", "agentic.echo_trap"),
    "echo_trap_rate": ("share of unsuccessful episodes above echo_trap_turns (or stopped as echo traps)",
                       "agentic.echo_trap > 0.1 / 0.3"),
    "max_turns_rate": ("share of episodes stopped at the turn cap (stop reason max_turns)", "agentic.episode_cut"),
    "token_cap_rate": ("share of episodes stopped at the token cap (stop reason length, or truncated)",
                       "agentic.episode_cut"),
    "cut_rate": ("share of episodes cut at the turn or token cap", "agentic.episode_cut > 0.15"),
    "turn_cap": ("the turn cap seen in the run (turns of episodes stopped at max_turns)", "agentic.cut_successes"),
    "success_at_cap_rate": ("successful episodes that used every turn the cap allows", "agentic.cut_successes > 0.2"),
    "cut_solvable_rate": ("episodes cut at the turn cap whose GRPO group has a success", "agentic.cut_successes"),
    "cut_progress_rate": ("episodes cut at the turn cap with no failed and no repeated call (work in progress, "
                          "not a loop); >= 0.5 (CUT_PROGRESS_SHARE) with max_turns_rate > 0.15: the cap, not a "
                          "loop, ends them", "agentic.episode_cut"),
    "reward_mean_success": ("mean reward of successful episodes (the scale the trajectory-filter skill's pay floor "
                            "reads)", "agentic.paid_without_success"),
    "reward_mean_failed": ("mean reward of unsuccessful episodes", "agentic.paid_without_success"),
    "paid_without_success_rate": ("episodes (with a strict score) the reward pays like successes (>= 0.5 x their "
                                  "mean reward) without success", "agentic.paid_without_success > 0.1 / 0.3"),
    "tool_calls_reward_corr": ("corr(tool calls, reward) among unsuccessful episodes",
                               "agentic.reward_pays_tool_calls > 0.3"),
    "turns_reward_corr": ("corr(turns, reward) among successful episodes", "agentic.reward_pays_fewer_turns < -0.3"),
    "tool_result_gap": ("largest success-rate gap between episodes without and with one successfully answered call "
                        "(tool and arguments, >= 20 episodes each side), among gaps significant at p < 0.01 after a "
                        "Bonferroni correction; 0 when none is", "agentic.tool_result_misleads > 0.3 / 0.5"),
    "tool_result_gap_episodes": ("episodes that made the call with the largest significant gap",
                                 "agentic.tool_result_misleads"),
    "refused_known_call_rate": ("failed calls among the calls to known calls (a tool and arguments the environment "
                                "answered successfully in >= 5 episodes); NaN under 20 such failures",
                                "agentic.tool_refuses_known_calls > 0.05 / 0.15"),
    "refused_known_calls": ("calls to known calls the environment failed", "agentic.tool_refuses_known_calls"),
    "marked_rate": ("share of episodes the level-1 trajectory filter marked (reward == TRAJECTORY_MARK)",
                    "agentic.level1_marked > 0.3"),
}  # fmt: skip


def _doc(meaning: str, rule: str) -> str:
    graded_here = rule.split()[0] in AGENTIC_HACK_ALERT_IDS and any(op in rule for op in "<>")
    return f"{meaning} (rule: {rule}{'; a hack alert: new in a candidate, it blocks promotion' if graded_here else ''})"


# metric -> "meaning (rule: alert_id op warning[ / critical])": the documentation of every agentic metric and
# the alert that grades it (the report's METRIC_DOCS includes it; a test checks it against the graded rules).
AGENTIC_METRIC_DOCS = {k: _doc(meaning, rule) for k, (meaning, rule) in _AGENTIC_DOCS.items()}
# The replay check's metrics (`diagnostics/env_replay.py`): evidence the diagnose step adds to an agentic run's
# report by running the environment again in the sandbox, so the agentic layer itself never computes them.
_REPLAY_DOCS: dict[str, tuple[str, str]] = {
    "env_replay_changed_rate": ("replayed calls (fresh environments, another order, a fresh sandbox process) "
                                "answered otherwise than the run recorded, where two identical replays agree",
                                "agentic.env_carries_state > 0.01 / 0.05"),
    "env_replay_changed_calls": ("replayed calls whose answer changed with the episodes before them",
                                 "agentic.env_carries_state"),
    "env_replay_nondeterministic_rate": ("replayed calls two identical replays answered differently",
                                         "agentic.env_nondeterministic > 0.01 / 0.05"),
    "env_replay_calls": ("calls replayed (a bounded sample of the run's episodes)", "agentic.env_carries_state"),
}  # fmt: skip
REPLAY_METRIC_DOCS = {k: _doc(meaning, rule) for k, (meaning, rule) in _REPLAY_DOCS.items()}
# The few agentic metrics a session's HTML report shows per version (agent/reporting).
HEADLINE_METRICS = (
    "turns_mean", "turns_p90", "tool_calls_mean", "tool_failure_rate", "abandon_rate", "echo_trap_rate",
    "cut_rate", "search_before_act_rate", "act_then_verify_rate", "repeated_call_rate", "paid_without_success_rate",
)  # fmt: skip
AGENTIC_METRICS = frozenset(k for k in _AGENTIC_DOCS if "<" not in k)
PER_TOOL_PREFIXES = ("tool_failure_rate/", "tool_share/")


def is_agentic_metric(key: str) -> bool:
    """True for a metric this layer writes (the flat names and the per-tool `tool_*/<tool>` keys)."""
    return key in AGENTIC_METRICS or key.startswith(PER_TOOL_PREFIXES)
