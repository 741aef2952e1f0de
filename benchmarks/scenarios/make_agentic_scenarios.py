"""Generate the agentic defect-scenario harnesses from the lookup-agent example.

Every scenario is the fixed agentic harness (`examples/lookup-agent-oracle`) with exactly ONE realistic
defect injected into one editable file; its `oracle/` folder is that fixed harness. Two defects are taken
from the defective example (`examples/lookup-agent`: its efficiency reward and its `max_turns`), so a change
to the example flows into the scenarios on the next generation; two are written here (a per-turn token
budget too small for the longer answer turns, a reward that pays tool calls), and two in the environment's own
code (a lookup limit below what a level-3 episode needs; a module-level cache that carries answers from one
episode into the next). Defective files carry neutral
comments: the controller must find each defect from evidence (turn counts, stop reasons, tool-call rates),
not from a note.

The shared pieces (`Recipe`, `Scenario`, `_sub_once`, `_set_yaml`, `_neutral_docstring`) come from
`make_scenarios.py`, the arithmetic scenarios' generator; this file only adds the agentic scenarios, whose
folders have the same layout and are built on demand by `scenario_cache.scenario_dir`::

    NAME/defective/      complete harness folder (evotrainer.yaml, data/, eval/, harness/)
    NAME/oracle/         the same harness with the defect fixed
    NAME/scenario.json   name, factor, defect, symptom, fix, seed skill

Run: ``python benchmarks/scenarios/make_agentic_scenarios.py DEST`` to write them under DEST. Fails loudly
when the example no longer has the shape a transformation expects.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

from make_scenarios import ROOT, Recipe, Scenario, _neutral_docstring, _set_yaml, _sub_once, cli, write_all

DEMO = ROOT / "examples" / "lookup-agent"  # defective agentic example: source of two defects
ORACLE = ROOT / "examples" / "lookup-agent-oracle"  # fixed agentic example: the base of every scenario
NAME = "lookup-agent"  # the manifest name of both forms (the oracle's name would give the fixed form away)
TOOL_CALL_CREDIT = 0.5  # tool-spam: reward per tool call written, uncapped; above the 0.4 of a right answer
# turn-token-cap: tokens one turn may generate. A call turn is 10 (`<call>lookup h</call>`), an answer turn with
# a two-digit sum 11 or more (`6+4=10<ans>10</ans>` and EOS), every level-3 answer turn 11 to 14.
TURN_TOKEN_CAP = 10
# env-lookup-limit: successful lookups the environment allows an episode before it refuses the next call and ends
# the episode (stop reason tool_error). A level-3 episode needs 3; the env declares the constant a knob, safe 4-64.
ENV_LOOKUP_LIMIT = 2


def _demo_value(relative: str, key: str) -> str:
    """The raw YAML value of top-level `key` in a file of the defective example (comments stripped)."""
    text = (DEMO / relative).read_text()
    match = re.search(rf"^{re.escape(key)}:\s*([^#\n]+)", text, flags=re.MULTILINE)
    if match is None:
        raise SystemExit(f"{DEMO / relative}: no '{key}:' line; update {__file__}")
    return match.group(1).strip()


# --- the five defects (each edits one factor of a copy of the oracle harness) -----------------------------


def one_turn_collapse(root: Path) -> None:
    """The example's efficiency reward: (format + correctness) / num_turns, so a one-turn guess pays most."""
    source = (DEMO / "harness" / "reward.py").read_text()
    doc = (
        "Training reward of the lookup task (verl's `compute_score` signature).\n\n"
        "A well-formed final answer earns a format credit, a right one as much again; the reward is scaled by\n"
        "1 / num_turns so that the agent learns to answer without wasting turns.\n"
    )
    (root / "harness" / "reward.py").write_text(_neutral_docstring(source, doc, f"{DEMO}/harness/reward.py"))


def turn_budget(root: Path) -> None:
    """The example's turn budget: too few turns for a level-3 episode (three lookups, then the answer)."""
    _set_yaml(root / "harness" / "trainer.yaml", "max_turns", _demo_value("harness/trainer.yaml", "max_turns"), "")


def turn_token_cap(root: Path) -> None:
    """A per-turn token budget that fits a call but not a long answer turn (a sum and its answer)."""
    _set_yaml(root / "harness" / "trainer.yaml", "max_turn_tokens", str(TURN_TOKEN_CAP), "")


TOOL_SPAM_REWARD = f'''"""Training reward of the lookup task (verl's `compute_score` signature).

A right final answer (the text after the last observation, ``3+5=8<ans>8</ans>``) earns 0.4, and every tool
call earns {TOOL_CALL_CREDIT}, so that the agent learns to consult its tool before it answers. Components: `correct`,
`tool_calls`.
"""

from __future__ import annotations

import re

_FINAL = re.compile(r"(?:[0-9+]+=[0-9]+)?<ans>(\\d+)</ans>")


def tool_calls(extra_info: dict | None, solution_str: str) -> int:
    """The trajectory's tool calls: the trainer's count when it passes one, else the calls in the text."""
    count = (extra_info or {{}}).get("tool_calls")
    if isinstance(count, int) and not isinstance(count, bool):
        return count
    return solution_str.count("</call>")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return 0.4 for a right final answer plus {TOOL_CALL_CREDIT} per tool call."""
    match = _FINAL.fullmatch(solution_str.rsplit("</obs>", 1)[-1].strip())
    correct = match is not None and int(match.group(1)) == int(str(ground_truth))
    calls = tool_calls(extra_info, solution_str)
    score = 0.4 * float(correct) + {TOOL_CALL_CREDIT} * calls
    return {{"score": score, "correct": float(correct), "tool_calls": float(calls)}}
'''


def env_lookup_limit(root: Path) -> None:
    """An environment that refuses the third lookup of an episode and ends it: level-3 episodes never answer."""
    env = root / "harness" / "env.py"
    env.write_text(_sub_once(r"^MAX_LOOKUPS = \d+$", f"MAX_LOOKUPS = {ENV_LOOKUP_LIMIT}", env.read_text(), str(env)))


def env_episode_leak(root: Path) -> None:
    """An environment whose module-level cache answers a key with the value an earlier episode's table held."""
    env = root / "harness" / "env.py"
    text = _sub_once(
        r"^MAX_LOOKUPS = \d+$",
        "\\g<0>\n_ANSWERED: dict[str, int] = {}  # values already looked up, by key (saves a table read)",
        env.read_text(),
        str(env),
    )
    text = _sub_once(
        r"^            return str\(self\.table\[key\]\)$",
        "            return str(_ANSWERED.setdefault(key, self.table[key]))",
        text,
        str(env),
    )
    env.write_text(text)


def tool_spam(root: Path) -> None:
    """A reward that pays every tool call: calling until the turn cap outearns answering right."""
    (root / "harness" / "reward.py").write_text(TOOL_SPAM_REWARD)


SCENARIOS: tuple[tuple[Scenario, Callable[[Path], None]], ...] = (
    (
        Scenario(
            "one-turn-collapse", "reward",
            "the reward is (0.5 formatted + 0.5 correct) / num_turns: a one-turn guess (0.5) outearns two "
            "lookups and a right answer (1.0 / 3)",
            "turns per episode fall towards 1 and tool calls towards 0 while the training reward rises; held-out "
            "strict accuracy falls (one-turn collapse: answers without any lookup)",
            "pay a right, well-formed answer after a lookup, never the turn count "
            "(examples/lookup-agent-oracle/harness/reward.py)",
            "never-reward-brevity",
        ),
        one_turn_collapse,
    ),
    (
        Scenario(
            "turn-budget", "trainer",
            "max_turns: 3, while a level-3 episode needs 4 turns (three lookups, then the answer)",
            "every level-3 episode stops at the turn cap (stop reason max_turns) before its answer: successes "
            "cut, level-3 groups dead",
            "max_turns: 6", "raise-turn-budget",
        ),
        turn_budget,
    ),
    (
        Scenario(
            "turn-token-cap", "trainer",
            f"max_turn_tokens: {TURN_TOKEN_CAP}: a call turn fits (10 tokens), but an answer turn that writes a "
            "two-digit sum (11 or more) or a three-term sum (11 to 14) is cut before its answer",
            "answer turns stop at the per-turn token cap (stop reason length, token_cap_rate and truncation_rate "
            "up): level-3 and two-digit level-2 episodes end without an answer, their groups dead",
            "max_turn_tokens: 24",
            "raise-length-budget",  # its @length_cap is the per-turn budget on an agentic harness
        ),
        turn_token_cap,
    ),
    (
        Scenario(
            "tool-spam", "reward",
            f"the reward pays {TOOL_CALL_CREDIT} per tool call, uncapped, and 0.4 for a right answer: a call earns "
            "more than a right answer, so calling until the turn cap outearns answering",
            "tool calls per episode climb to the turn cap, stop reason max_turns dominates, the reward pays "
            "trajectories without success; held-out strict accuracy falls",
            "pay a right answer after a lookup, never a count of calls "
            "(examples/lookup-agent-oracle/harness/reward.py)",
            "confirmed-behaviour-reward",
        ),
        tool_spam,
    ),
    (
        Scenario(
            "env-lookup-limit", "env",
            f"the environment's MAX_LOOKUPS = {ENV_LOOKUP_LIMIT}: it refuses an episode's third lookup and ends the "
            "episode, while a level-3 episode needs three lookups before its answer",
            "level-3 episodes stop on a refused call (stop reason tool_error) before their answer; the refused "
            "calls are well-formed lookups the environment answers in other episodes; level-3 groups dead",
            "MAX_LOOKUPS = 8 (its declared default; examples/lookup-agent-oracle/harness/env.py)",
            None,  # no seed skill names the environment's code
        ),
        env_lookup_limit,
    ),
    (
        Scenario(
            "env-episode-leak", "env",
            "the environment keeps a module-level cache of looked-up values by key: a lookup answers the value "
            "of the first episode (in the sandbox worker's life) that looked the key up, not the value in this "
            "episode's own table",
            "lookups succeed but their values are stale, so sums are wrong and accuracy stays near chance; the "
            "rollouts look like a policy that cannot add. Replayed in another order against fresh environments, "
            "the recorded lookups get other answers (agentic.env_carries_state)",
            "build every episode's environment from a fresh import of the env module "
            "(EVOTRAINER_ENV_ISOLATION = 'fresh_module'), or drop the cache "
            "(examples/lookup-agent-oracle/harness/env.py)",
            None,  # no seed skill names the environment's code
        ),
        env_episode_leak,
    ),
)  # fmt: skip


def _copy_base(base: Path, dest: Path) -> None:
    """A copy of the fixed example `base` whose files name neither the defect nor the fixed form."""
    if dest.exists():
        shutil.rmtree(dest)
    # README.md is left out: the examples' READMEs name the defects and their fixes.
    shutil.copytree(base, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git", "README.md"))
    reward = dest / "harness" / "reward.py"
    reward.write_text(_sub_once(r", fixed form\.$", ".", reward.read_text(), str(reward)))
    trainer = dest / "harness" / "trainer.yaml"  # its comment says how many turns a level needs: evidence only
    trainer.write_text(_sub_once(r"^# Episodes:.*\n(?:#.*\n)*", "# Episodes.\n", trainer.read_text(), str(trainer)))
    manifest = dest / "evotrainer.yaml"
    manifest.write_text(_sub_once(r"^name:.*$", f"name: {NAME}", manifest.read_text(), str(manifest)))


def recipes() -> tuple[Recipe, ...]:
    """One recipe per agentic scenario, each on the fixed example `ORACLE`."""
    return tuple(Recipe(scenario, ORACLE, _copy_base, inject) for scenario, inject in SCENARIOS)


def main(dest: Path) -> None:
    """Write this module's scenarios under `dest`."""
    write_all(dest, recipes())


if __name__ == "__main__":
    cli(recipes())
