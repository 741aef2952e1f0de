"""No answer tag, `level`-based data selection or arithmetic assumption in the core.

Every source and data file of `agent/`, `trainer_backend/`, `diagnostics/`, `sandboxes/` and `skills/` is
read (code, comments, docstrings, the hack-corpus templates) and each line is checked against the patterns
below. What a harness says about itself lives in its manifest (answer protocol, special tokens, the
selection field), so the core needs none of these.

"The demo's own seed defaults" are exactly one thing here: the path of the bundled demo harness
(`examples/arithmetic`), which `evotrainer run` trains when no `--harness` is given (agent/commands/run.py).
The demo's data, rewards, strict evaluator and manifest live in `examples/`, outside the scanned packages;
the seed skills (skills/seeds.py) hold no demo assumption (their rewards are generated from the declared
protocol, their data op reads the declared field).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agent", "trainer_backend", "diagnostics", "sandboxes", "skills")
SUFFIXES = {".py", ".jsonl", ".json", ".yaml", ".yml", ".md", ".txt", ".toml"}

ASSUMPTIONS: dict[str, re.Pattern[str]] = {
    "answer tag": re.compile(r"</?ans>|</?answer>|\\\\?boxed|####"),
    "level-based data selection": re.compile(
        r"level_weights|by_level|[\"']level[\"']|\.level\b|\blevel\{|/level\d|\blevels? \d|\blevel\s*=\s*\d"
    ),
    "arithmetic task": re.compile(r"(?i)\barithmetic\b"),
    "numeric ground truth": re.compile(r"\b(?:int|float)\(\s*(?:str\(\s*)?(?:\w+\[[\"'])?ground_truth"),
    "fixed alphabet": re.compile(r"0123456789|DEFAULT_ALPHABET|DEFAULT_TAGS"),
}
# (file, line pattern): the demo harness's path, the default harness of `evotrainer run`.
DEMO_DEFAULTS = (("agent/commands/run.py", re.compile(r"examples[\"' /]+arithmetic\b")),)


# file -> most offending lines allowed until the columnar health-report rewrite lands (then 0: delete).
def _files() -> list[Path]:
    return sorted(
        p
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*")
        if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
    )


def offending_lines() -> dict[str, list[str]]:
    """`{relative file: ["line: text (assumption)", ...]}` for every line matching an assumption pattern."""
    out: dict[str, list[str]] = {}
    for path in _files():
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            if any(rel == f and allowed.search(line) for f, allowed in DEMO_DEFAULTS):
                continue
            for name, pattern in ASSUMPTIONS.items():
                if pattern.search(line):
                    out.setdefault(rel, []).append(f"{number}: {line.strip()[:100]} ({name})")
                    break
    return out


def test_the_patterns_catch_what_the_issue_found() -> None:
    found = [
        'DEFAULT_ALPHABET = "0123456789+-*=;> "',
        '_TAGGED = re.compile(r"<ans>\\s*(-?\\d+)\\s*</ans>\\s*$")',
        "truth = int(str(ground_truth).strip())",
        '"key": "level_weights", "source_pattern": "*/level{key}",',
        'by_level.setdefault(int(row.get("level", 0)), []).append(row)',
        'DOMAIN_ALIASES = {"arithmetic": "math"}',
        'ANSWER_RE = re.compile(r"<answer>(.*?)</answer>|\\\\boxed\\{([^}]*)\\}|^####")',
    ]
    for line in found:
        assert any(p.search(line) for p in ASSUMPTIONS.values()), line
    neutral = ["log level", "top-level keys", "CI_LEVEL = 0.95", "token-level clipping", "run-level alert"]
    for line in neutral:
        assert not any(p.search(line) for p in ASSUMPTIONS.values()), line


def test_core_packages_assume_no_task() -> None:
    found = offending_lines()
    assert not found, "task assumptions in the core (declare them in the manifest instead):\n" + "\n".join(
        f"{f}:{line}" for f, lines in found.items() for line in lines
    )
