"""Sandbox modes, backend, factor, session-mode and metric names and the run-folder layout are each
written once, imported elsewhere.

A second spelled-out list (a `Literal[...]` or a tuple of the same names, in any order) is how vocabularies
drifted apart before; this finds one in product code outside the defining module.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import get_args

from harness.manifest import BackendName
from sandboxes.modes import SANDBOX_MODES, SandboxMode
from store.types import Factor
from store.vocab import SessionMode

ROOT = Path(__file__).resolve().parents[1].parent
PRODUCT = ("agent", "diagnostics", "harness", "sandboxes", "skills", "store", "trainer_backend")
HOMES = {
    "sandbox modes": ("sandboxes/modes.py", SANDBOX_MODES),
    "backend names": ("harness/manifest.py", get_args(BackendName)),
    "factor names": ("store/types.py", get_args(Factor)),
    # agent/decisions/factors.py and skills/models.py extend the session modes
    "session modes": ("store/vocab.py", get_args(SessionMode)),
}


def _spelled_out(names: tuple[str, ...]) -> re.Pattern[str]:
    orders = "|".join(r",\s*".join(f'"{n}"' for n in perm) for perm in itertools.permutations(names))
    return re.compile(rf"(?:{orders})")


def test_each_vocabulary_is_spelled_out_only_in_its_home() -> None:
    assert get_args(SandboxMode) == SANDBOX_MODES == ("docker", "process", "none")
    for what, (home, names) in HOMES.items():
        pattern = _spelled_out(tuple(names))
        found = sorted(
            str(p.relative_to(ROOT))
            for pkg in PRODUCT
            for p in (ROOT / pkg).rglob("*.py")
            if pattern.search(p.read_text())
        )
        assert found == [home], f"{what} spelled out outside {home}: import them from there ({found})"


def test_the_decision_metric_names_are_written_only_in_the_schema() -> None:
    from diagnostics.schema import STRICT_METRIC, TRAIN_REWARD_METRIC

    for name in (STRICT_METRIC, TRAIN_REWARD_METRIC):
        found = sorted(
            str(p.relative_to(ROOT))
            for pkg in PRODUCT
            for p in (ROOT / pkg).rglob("*.py")
            if f'"{name}"' in p.read_text() or f"'{name}'" in p.read_text()  # either quoting, in f-strings too
        )
        assert found == ["diagnostics/schema.py"], f"{name} spelled out: import it from diagnostics.schema ({found})"


def test_the_run_folder_layout_is_written_only_in_the_schema() -> None:
    """The artefact layout (file names, the rollout and checkpoint folders) has one home."""
    from diagnostics import schema

    names = (schema.METRICS_FILE, schema.SUMMARY_FILE, schema.LOG_FILE, schema.HEALTH_REPORT_FILE, schema.SPEC_FILE,
             schema.LAST_CHECKPOINT.as_posix(), schema.START_CHECKPOINT.as_posix(), schema.LAST_CHECKPOINT.name,
             schema.START_CHECKPOINT.name)  # fmt: skip
    spelled = re.compile("|".join(rf"[\"']{re.escape(n)}[\"']" for n in names))
    folders = re.compile(rf"/ [\"'](?:{schema.ROLLOUTS_DIR}|{schema.CHECKPOINTS_DIR})[\"']")  # run_dir / "rollouts"
    found = sorted(
        str(p.relative_to(ROOT))
        for pkg in (*PRODUCT, "benchmarks")
        for p in (ROOT / pkg).rglob("*.py")
        if spelled.search(text := p.read_text()) or folders.search(text)
    )
    assert found == ["diagnostics/schema.py"], (
        f"run-folder names spelled out: import them from diagnostics.schema {found}"
    )
    assert schema.rollout_file(Path("r"), "val", 3) == Path("r/rollouts/val/step_3.jsonl")


def test_no_product_code_outside_the_backends_names_a_backend() -> None:
    # A backend is one plug-in (trainer_backend.PLUGINS); elsewhere code asks the plug-in, never
    # compares names. The manifest's vocabulary (harness/manifest.py) is the one other place a name is written.
    from trainer_backend import PLUGINS

    assert tuple(PLUGINS) == get_args(BackendName)
    assert all(name == plugin.name for name, plugin in PLUGINS.items())
    literal = re.compile("|".join(rf"""["']{re.escape(n)}["']""" for n in get_args(BackendName)))
    found = sorted(
        f"{p.relative_to(ROOT)}:{n}"
        for pkg in PRODUCT
        if pkg != "trainer_backend"
        for p in (ROOT / pkg).rglob("*.py")
        if str(p.relative_to(ROOT)) != "harness/manifest.py"
        for n, line in enumerate(p.read_text().splitlines(), start=1)
        if literal.search(line.split("#", 1)[0])
    )
    assert found == [], f"backend names written outside trainer_backend/: ask trainer_backend.plugin_of ({found})"
