"""Defect scenarios of the arithmetic and program-synthesis tasks: each one's base and defect.

Every scenario is the fixed demo harness (`examples/arithmetic-oracle`) with exactly ONE realistic defect
injected; its `oracle/` folder is the fixed form the defect is measured against. Three defects are taken
from the defective demo (`examples/arithmetic`: its reward, its `max_new_tokens`, its data mix), three are
written here (a format gate with false negatives, destabilising optimiser settings, a train-only answer
leak). Defective files carry neutral comments: the controller (heuristic or LLM) must find the defect from
evidence, not from a `DEFECT:` note.

The program-synthesis scenarios (`synth-*`) follow the same rule on the second domain: the base
is the fixed `examples/synth-fn-oracle`, and each defect is taken from the defective `examples/synth-fn`
(its reward's test selection, step limit and character gate; its `max_new_tokens`).

This module also holds what the other generators share: `Scenario` (a scenario's description, written as
its `scenario.json`), `Recipe` (a scenario, the example it starts from and how each form is made) and the
text helpers. Nothing here is committed as a folder: `scenario_cache.scenario_dir(name, form)` builds a
scenario on first use. A recipe writes, into a scenario folder NAME::

    NAME/defective/      complete harness folder (evotrainer.yaml, data/, eval/, harness/)
    NAME/oracle/         the same harness with the defect fixed
    NAME/scenario.json   name, factor, defect, symptom, fix, seed skill expected to apply

Run: ``python benchmarks/scenarios/make_scenarios.py DEST`` writes this module's scenarios under DEST.
Fails loudly when the demo harness no longer has the shape a transformation expects.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEMO = ROOT / "examples" / "arithmetic"  # defective demo: source of three defects
ORACLE = ROOT / "examples" / "arithmetic-oracle"  # fixed demo: the base of every scenario
LEAK_LEVEL = 6
LEAK_SOURCE_LEVELS = (2, 3, 4)
LEAK_SOURCE = "arithmetic/annotated"  # the data source of the leaking rows (data.yaml weighs data sources)
LR_FACTOR = 16  # unstable-optimiser: learning rate this many times the fixed harness's


@dataclass(frozen=True)
class Scenario:
    """One defect, where it lives, what it does and how the oracle fixes it."""

    name: str
    factor: str  # reward | data | trainer (the editable factor that holds the defect)
    defect: str
    symptom: str
    fix: str
    seed_skill: str | None  # the seed skill whose trigger should fire, None if no seed skill covers it


@dataclass(frozen=True)
class Recipe:
    """One scenario as committed: its description, the example it starts from and the edits that make each form.

    Both forms start as `copy_base(base, folder)`, a copy of the fixed example `base` whose files name neither
    the defect nor the fixed form; `inject` then applies the defect to `defective/`, and `fix` (when the fixed
    example alone is not the oracle) adjusts `oracle/`.
    """

    scenario: Scenario
    base: Path  # the fixed example under examples/ both forms are copied from
    copy_base: Callable[[Path, Path], None]  # (base, dest): a neutral copy of the example
    inject: Callable[[Path], None]  # edits the defective form in place
    fix: Callable[[Path], None] | None = None  # edits the oracle form in place, None: the copy is the oracle

    def write(self, folder: Path) -> None:
        """Write both forms and `scenario.json` into `folder` (created; its forms must not exist yet)."""
        folder.mkdir(parents=True, exist_ok=True)
        self.copy_base(self.base, folder / "defective")
        self.inject(folder / "defective")
        self.copy_base(self.base, folder / "oracle")
        if self.fix is not None:
            self.fix(folder / "oracle")
        (folder / "scenario.json").write_text(json.dumps(asdict(self.scenario), indent=2) + "\n")


def _sub_once(pattern: str, repl: str, text: str, where: str) -> str:
    new, count = re.subn(pattern, repl, text, count=1, flags=re.MULTILINE)
    if count != 1:
        raise SystemExit(f"{where}: pattern {pattern!r} not found; the demo harness changed shape, update {__file__}")
    return new


def _neutral_docstring(source: str, docstring: str, where: str) -> str:
    """Replace a module docstring (which may name the defect) with a neutral one."""
    return _sub_once(r'\A"""(?:.|\n)*?"""', f'"""{docstring}"""', source, where)


def _demo_value(relative: str, key: str) -> str:
    """The raw YAML value of top-level `key` in a demo file (comments stripped)."""
    text = (DEMO / relative).read_text()
    match = re.search(rf"^{re.escape(key)}:\s*([^#\n]+)", text, flags=re.MULTILINE)
    if match is None:
        raise SystemExit(f"{DEMO / relative}: no '{key}:' line; update {__file__}")
    return match.group(1).strip()


def _set_yaml(path: Path, key: str, value: str, comment: str) -> None:
    text = path.read_text()
    path.write_text(_sub_once(rf"^{re.escape(key)}:.*$", f"{key}: {value}{comment}", text, str(path)))


# --- the six defects (each edits one factor of a copy of the oracle harness) ------------------------------


def hackable_reward(root: Path) -> None:
    """The demo's lenient reward: answer anywhere + partial credit per number written."""
    source = (DEMO / "harness" / "reward.py").read_text()
    doc = (
        "Training reward of the arithmetic harness (verl's `compute_score` signature).\n\n"
        "Credits the answer wherever it appears, and gives partial credit for worked numbers.\n"
    )
    (root / "harness" / "reward.py").write_text(_neutral_docstring(source, doc, "demo reward.py"))


def length_budget(root: Path) -> None:
    """The demo's too-small generation budget."""
    _set_yaml(
        root / "harness" / "trainer.yaml", "max_new_tokens", _demo_value("harness/trainer.yaml", "max_new_tokens"), ""
    )


def dead_groups(root: Path) -> None:
    """The demo's data mix: mostly always-solved (level 1) and never-solved (level 5) prompts."""
    weights = _demo_value("harness/data.yaml", "weights")
    (root / "harness" / "data.yaml").write_text(
        "# Training-data selection: sampling weight per data source (difficulty level) of data/train.jsonl.\n"
        f"weights: {weights}\n"
    )


FORMAT_GATE_REWARD = '''"""Training reward of the arithmetic harness (verl's `compute_score` signature).

Output protocol: the worked steps, separated by "; ", then exactly one tagged answer at the end, e.g.
``7*3=21; 12+21=33<ans>33</ans>``. Responses that break the protocol score 0.
"""

from __future__ import annotations

import re

_PROTOCOL = re.compile(r"^\\d+[+*]\\d+=\\d+(?:; \\d+[+*]\\d+=\\d+)*<ans>(\\d+)</ans>$")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return 1.0 for a protocol-conforming correct answer, else 0.0 (plus a `formatted` component)."""
    match = _PROTOCOL.match(solution_str.strip())
    correct = match is not None and int(match.group(1)) == int(str(ground_truth))
    return {"score": float(correct), "formatted": float(match is not None)}
'''


def format_gate(root: Path) -> None:
    """A format gate that demands "; " between steps: every correct multi-step answer (levels 4-5) scores 0."""
    (root / "harness" / "reward.py").write_text(FORMAT_GATE_REWARD)


def unstable_optimiser(root: Path) -> None:
    """A learning rate `LR_FACTOR` x the demo's and PPO ratio clipping opened so wide it never binds."""
    path = root / "harness" / "trainer.yaml"
    lr = float(re.search(r"^lr:\s*([^#\n]+)", path.read_text(), re.MULTILINE).group(1))  # type: ignore[union-attr]
    _set_yaml(path, "lr", f"{LR_FACTOR * lr:.1e}", "")
    _set_yaml(path, "clip_low", "0.9", "")
    _set_yaml(path, "clip_high", "10.0", "")


def leak_rows(train_rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Training rows whose prompt already states the result (``12+9=21=>``); the held-out set has none."""
    out: list[dict[str, object]] = []
    for row in train_rows:
        if row["level"] in LEAK_SOURCE_LEVELS:
            prompt = str(row["prompt"])
            assert prompt.endswith("=>"), f"unexpected prompt shape {prompt!r}"
            out.append(
                {
                    **row,
                    "prompt": f"{prompt[:-2]}={row['ground_truth']}=>",
                    "prompt_id": f"train-{LEAK_LEVEL}-{len(out):04d}",
                    "level": LEAK_LEVEL,
                    "data_source": LEAK_SOURCE,
                }
            )
    return out


def _add_leak_level(root: Path) -> None:
    path = root / "data" / "train.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows += leak_rows(rows)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def train_leak(root: Path) -> None:
    """80% of each training batch comes from annotated prompts that contain their own answer.

    (At 50% the leak cost nothing at the benchmark's 160 steps: static 0.833 vs oracle 0.820, so the scenario
    could not tell a fix from noise. At 80% the policy learns to copy the stated result after made-up
    working, and held-out accuracy falls below where it started.)
    """
    _add_leak_level(root)
    mix = {"arithmetic/level1": 0.0, "arithmetic/level2": 0.05, "arithmetic/level3": 0.05, "arithmetic/level4": 0.1}
    mix.update({"arithmetic/level5": 0.0, LEAK_SOURCE: 0.8})
    (root / "harness" / "data.yaml").write_text(
        "# Training-data selection: sampling weight per data source of data/train.jsonl (annotated prompts too).\n"
        f"weights: {{{', '.join(f'{k}: {v}' for k, v in mix.items())}}}\n"
    )


def train_leak_oracle(root: Path) -> None:
    """Same training pool, but the annotated (leaking) prompts get weight 0."""
    _add_leak_level(root)
    _set_yaml(root / "harness" / "data.yaml", "weights", _oracle_weights_with(LEAK_SOURCE, 0.0), "")


def _oracle_weights_with(source: str, weight: float) -> str:
    weights = re.search(r"^weights:\s*\{(.*)\}", (ORACLE / "harness" / "data.yaml").read_text(), re.MULTILINE)
    if weights is None:
        raise SystemExit(f"{ORACLE}/harness/data.yaml: no weights mapping; update {__file__}")
    return f"{{{weights.group(1)}, {source}: {weight}}}"


SCENARIOS: tuple[tuple[Scenario, Callable[[Path], None], Callable[[Path], None] | None], ...] = (
    (
        Scenario(
            "hackable-reward", "reward",
            "the training reward credits the answer anywhere in the response and gives 0.1 per number written",
            "training reward rises while strict held-out accuracy stalls or falls (number spam)",
            "strict tagged-answer extraction (examples/arithmetic-oracle/harness/reward.py)",
            "strict-answer-extraction",
        ),
        hackable_reward, None,
    ),
    (
        Scenario(
            "length-budget", "trainer",
            "max_new_tokens is too small for the worked solutions of levels 4-5",
            "high truncation rate; truncated responses never reach the answer tag",
            "max_new_tokens: 48", "raise-length-budget",
        ),
        length_budget, None,
    ),
    (
        Scenario(
            "dead-groups", "data",
            "the data mix is dominated by always-solved (level 1) and never-solved (level 5) prompts",
            "high dead-group ratio (zero reward variance): most of each batch carries no GRPO signal",
            "weight the learnable levels 2-4", "learnable-data-mix",
        ),
        dead_groups, None,
    ),
    (
        Scenario(
            "format-gate", "reward",
            "the reward's output protocol demands '; ' between steps, which the policy never writes",
            "every correct multi-step answer (levels 4-5) scores 0: strict-correct but unrewarded samples "
            "(rank violations), dead groups at level 4",
            "accept the answer tag regardless of step separators (examples/arithmetic-oracle/harness/reward.py)",
            "strict-answer-extraction",
        ),
        format_gate, None,
    ),
    (
        Scenario(
            "unstable-optimiser", "trainer",
            f"learning rate {LR_FACTOR}x the fixed harness's, PPO ratio clipping opened to [0.1, 11] (never binds)",
            "large policy updates: entropy and response length swing, strict accuracy collapses",
            "the fixed harness's lr, clip_low 0.2, clip_high 0.28", "stabilise-policy-updates",
        ),
        unstable_optimiser, None,
    ),
    (
        Scenario(
            "train-leak", "data",
            "80% of each training batch is drawn from annotated prompts that state their own result "
            "(e.g. '12+9=21=>'); held-out prompts never do",
            "on annotated prompts the policy learns to copy the stated result after made-up working; held-out "
            "strict accuracy falls below its starting point; most groups are dead",
            "weight 0 on the annotated level (the oracle keeps the same training pool)", "learnable-data-mix",
        ),
        train_leak, train_leak_oracle,
    ),
)  # fmt: skip


def _copy_base(base: Path, dest: Path) -> None:
    """Copy the fixed arithmetic harness `base` (no README), named and commented the same in both forms."""
    if dest.exists():
        shutil.rmtree(dest)
    # README.md is left out: the demo's READMEs name the defects and their fixes.
    shutil.copytree(base, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git", "README.md"))
    reward = dest / "harness" / "reward.py"  # every harness file reads the same in both forms but the defect's
    reward.write_text(reward.read_text().replace(", fixed form.", ".", 1))
    manifest = dest / "evotrainer.yaml"
    manifest.write_text(_sub_once(r"^name:.*$", "name: arithmetic", manifest.read_text(), str(manifest)))


# --- program-synthesis scenarios: the fixed synth-fn harness, one defect each ------------------
#
# Base: `examples/synth-fn-oracle`. The defects are taken from the defective demo `examples/synth-fn` (its
# reward holds three of them, its trainer config the fourth), so a change there flows into the scenarios.

SYNTH_DEMO = ROOT / "examples" / "synth-fn"
SYNTH_ORACLE = ROOT / "examples" / "synth-fn-oracle"
SYNTH_REWARD_DOC = (
    "It is run on the problem's test cases and scored by the share it passes: the continuous pass ratio of\n"
    "the paper's coding domain. A program that does not parse, or the wrong type of answer, passes nothing.\n"
)


def _synth_copy_base(base: Path, dest: Path) -> None:
    """Copy the fixed synth-fn harness `base` (no README), with a reward docstring that reads the same in both forms."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(base, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git", "README.md"))
    reward = dest / "harness" / "reward.py"
    text = reward.read_text().replace(", fixed form.", ".", 1)
    first = r"^It is run on every test case(?:.|\n)*?passes nothing\.\n"
    reward.write_text(_sub_once(first, SYNTH_REWARD_DOC, text, str(reward)))
    manifest = dest / "evotrainer.yaml"
    manifest.write_text(_sub_once(r"^name:.*$", "name: synth-fn", manifest.read_text(), str(manifest)))


def _synth_demo_piece(pattern: str) -> str:
    """The text of the defective demo's reward that `pattern` matches (exactly once)."""
    found = re.findall(pattern, (SYNTH_DEMO / "harness" / "reward.py").read_text(), flags=re.MULTILINE)
    if len(found) != 1:
        raise SystemExit(f"{SYNTH_DEMO}/harness/reward.py: {pattern!r} matched {len(found)} times; update {__file__}")
    return str(found[0])


_SYNTH_TEST_CASES = r"^def test_cases\(.*\n(?:    .*\n|\n(?=    ))*"
_SYNTH_GATE_DEF = r"^_SAFE = .*\n"
_SYNTH_GATE_CHECK = r"^    if not _SAFE\.fullmatch.*\n        return .*\n"


def _synth_reward(root: Path, pattern: str, piece: str) -> None:
    path = root / "harness" / "reward.py"
    path.write_text(_sub_once(pattern, piece.replace("\\", "\\\\"), path.read_text(), str(path)))


def synth_shown_tests(root: Path) -> None:
    """The demo's test selection: the reward runs the examples the prompt shows, not the hidden test cases."""
    _synth_reward(root, _SYNTH_TEST_CASES, _synth_demo_piece(_SYNTH_TEST_CASES))


def synth_test_timeout(root: Path) -> None:
    """The demo's per-test step limit: correct programs that loop (`sum(range(x+1))`) run out of steps."""
    _synth_reward(root, r"^STEP_LIMIT = .*$", _synth_demo_piece(r"^STEP_LIMIT = .*$"))


def synth_format_gate(root: Path) -> None:
    """The demo's safety gate: only plain arithmetic in x is run, so `%`, calls and subscripts score 0."""
    gate = _synth_demo_piece(_SYNTH_GATE_DEF)
    _synth_reward(root, r"^# --- end of the interpreter ---\n", f"# --- end of the interpreter ---\n\n{gate}")
    check = _synth_demo_piece(_SYNTH_GATE_CHECK)
    call = "    tests = test_cases(ground_truth, extra_info or {})\n"
    _synth_reward(root, r"^    tests = test_cases\(.*\n", f"{call}{check}")


def synth_length_budget(root: Path) -> None:
    """The demo's generation budget: too short for the loop family's programs."""
    budget = re.search(r"^max_new_tokens:\s*([^#\n]+)", (SYNTH_DEMO / "harness" / "trainer.yaml").read_text(), re.M)
    if budget is None:
        raise SystemExit(f"{SYNTH_DEMO}/harness/trainer.yaml: no 'max_new_tokens:' line; update {__file__}")
    _set_yaml(root / "harness" / "trainer.yaml", "max_new_tokens", budget.group(1).strip(), "")


SYNTH_SCENARIOS: tuple[tuple[Scenario, Callable[[Path], None], Callable[[Path], None] | None], ...] = (
    (
        Scenario(
            "synth-shown-tests", "reward",
            "the reward runs each program on the examples the prompt shows instead of the problem's hidden test "
            "cases, so a program that hard-codes the examples (a lookup table) earns full reward",
            "training reward rises while strict held-out accuracy falls: strict-wrong programs paid like correct "
            "ones (rewarded_wrong_rate critical, reward_hacking), hard-coded lookups ([4,5,6,4,5,6][x]) take over "
            "the mod and loop families",
            "run the hidden test cases of the ground truth (examples/synth-fn-oracle/harness/reward.py)",
            None,
        ),
        synth_shown_tests, None,
    ),
    (
        Scenario(
            "synth-test-timeout", "reward",
            "the per-test step limit (12 interpreter steps) is below what a correct running sum "
            "(sum(range(x+1))*A+B, about x + 10 steps) needs on the hidden inputs 6-40",
            "every correct loop-family program times out (reward component timeouts > 0, unrewarded_correct_rate "
            "above 0.05, the loop source's groups all dead) while the affine and mod families learn",
            "STEP_LIMIT 2000 (the strict evaluator allows 10000)",
            None,
        ),
        synth_test_timeout, None,
    ),
    (
        Scenario(
            "synth-format-gate", "reward",
            "a safety check runs only programs of plain arithmetic characters (digits, x, + - * /), so every "
            "program with %, a call or a subscript scores 0 before it runs",
            "correct mod and loop programs are paid 0 (unrewarded_correct_rate critical, reward component parsed "
            "0 on those sources), their groups are dead, and only the affine family learns",
            "no character gate: the restricted interpreter is the guard (examples/synth-fn-oracle/harness/reward.py)",
            None,
        ),
        synth_format_gate, None,
    ),
    (
        Scenario(
            "synth-length-budget", "trainer",
            "max_new_tokens 10 cuts every correct loop-family program (12-13 tokens with EOS) and every hard-coded "
            "lookup",
            "high truncation rate; truncated programs never parse, so the loop family earns nothing",
            "max_new_tokens: 40", "raise-length-budget",
        ),
        synth_length_budget, None,
    ),
)  # fmt: skip


def recipes() -> tuple[Recipe, ...]:
    """This module's scenarios: six on the fixed arithmetic demo, then four on the fixed synth-fn harness."""
    return tuple(Recipe(s, ORACLE, _copy_base, inject, fix) for s, inject, fix in SCENARIOS) + tuple(
        Recipe(s, SYNTH_ORACLE, _synth_copy_base, inject, fix) for s, inject, fix in SYNTH_SCENARIOS
    )


def write_all(dest: Path, chosen: tuple[Recipe, ...]) -> None:
    """Write every scenario of `chosen` as a folder DEST/NAME (see the module docstring)."""
    for recipe in chosen:
        folder = dest / recipe.scenario.name
        recipe.write(folder)
        print(f"wrote {folder}: {recipe.scenario.defect}")


def cli(chosen: tuple[Recipe, ...]) -> None:
    """`python make_*.py DEST`: write `chosen` under DEST (tests and benchmarks use `scenario_cache` instead)."""
    if len(sys.argv) != 2:
        raise SystemExit(
            f"usage: python {Path(sys.argv[0]).name} DEST  (writes full scenario folders under DEST; the benchmarks "
            "and tests build them on demand with scenario_cache.scenario_dir)"
        )
    write_all(Path(sys.argv[1]), chosen)


def main(dest: Path) -> None:
    """Write this module's scenarios under `dest`."""
    write_all(dest, recipes())


if __name__ == "__main__":
    cli(recipes())
