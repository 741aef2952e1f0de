"""Generate the defect-scenario harnesses from the demo task (issue #8), so they stay in sync with it.

Every scenario is the fixed demo harness (`examples/arithmetic-oracle`) with exactly ONE realistic defect
injected; its `oracle/` folder is the fixed form the defect is measured against. Three defects are taken
from the defective demo (`examples/arithmetic`: its reward, its `max_new_tokens`, its data mix), three are
written here (a format gate with false negatives, destabilising optimiser settings, a train-only answer
leak). Defective files carry neutral comments: the controller (heuristic or LLM) must find the defect from
evidence, not from a `DEFECT:` note.

Writes, for each scenario NAME::

    benchmarks/scenarios/NAME/defective/   complete harness folder (evotrainer.yaml, data/, eval/, harness/)
    benchmarks/scenarios/NAME/oracle/      the same harness with the defect fixed
    benchmarks/scenarios/NAME/scenario.json  name, defect, factor, fix, seed skill expected to apply

Run: ``python benchmarks/scenarios/make_scenarios.py`` (idempotent; rewrites the folders). Fails loudly
when the demo harness no longer has the shape a transformation expects.
"""

from __future__ import annotations

import json
import re
import shutil
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


def _copy_base(dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    # README.md is left out: the demo's READMEs name the defects and their fixes.
    shutil.copytree(ORACLE, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git", "README.md"))
    reward = dest / "harness" / "reward.py"  # every harness file reads the same in both forms but the defect's
    reward.write_text(reward.read_text().replace(", fixed form.", ".", 1))
    manifest = dest / "evotrainer.yaml"
    manifest.write_text(_sub_once(r"^name:.*$", "name: arithmetic", manifest.read_text(), str(manifest)))


def main(dest: Path = HERE) -> None:
    """Write every scenario's defective and oracle harness folders and its scenario.json under `dest`."""
    for scenario, inject, fix in SCENARIOS:
        folder = dest / scenario.name
        _copy_base(folder / "defective")
        inject(folder / "defective")
        _copy_base(folder / "oracle")
        if fix is not None:
            fix(folder / "oracle")
        (folder / "scenario.json").write_text(json.dumps(asdict(scenario), indent=2) + "\n")
        print(f"wrote {folder}: {scenario.defect}")


if __name__ == "__main__":
    main()
