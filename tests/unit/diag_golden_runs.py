"""Run folders for the health report's golden-equivalence test, built deterministically.

Each case is a run folder in the project's own rollout format (written through `schema.write_rollouts` and
`schema.append_metrics`), together covering every alert the report has: score (hacking, no strict score,
strict regression, rewarded-wrong, unrewarded-correct), signal (dead groups, low spread, coarse reward,
component offsets, advantage extremes, dead training, dead sources, update size, score collapse), behaviour
(truncation, length correlation and growth, degeneration, format failure, multi-answer, empty responses,
exploration collapse, abandonment, echo trap, failed turns, rising turns) and version (a child compared with
its parent, and siblings). The recorded runs of the demo harnesses live in `tests/fixtures/diagnostics/golden`.

`tests/fixtures/diagnostics/golden/make_golden.py` ran these cases through the pre-columnar report and stored
its output; `test_diag_report_golden_equivalence.py` rebuilds the same folders and compares.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import orjson

from diagnostics.schema import Rollout, StopReason, Turn, append_metrics, write_rollouts

TAG_PATTERN = "<ans>(.*?)</ans>"  # the tag every tagged case uses; the report's protocol for those cases
GOLDEN_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "diagnostics" / "golden"
RECORDED = ("arithmetic-s0", "arithmetic-oracle")  # 20-step local runs of examples/arithmetic{,-oracle}


@dataclass(frozen=True)
class Case:
    """One golden case: a run folder, the protocol pattern the new report gets, and the parent/sibling cases."""

    run_dir: Path
    pattern: str | None = TAG_PATTERN
    parent: str | None = None
    siblings: tuple[str, ...] = ()


def _row(run: str, step: int, gid: int, idx: int, reward: float, **kw: object) -> Rollout:
    strict = kw.pop("strict", None)
    gt = str(10 + gid)
    response = kw.pop("response", None)
    if response is None:
        response = f"{gid}+10 => {gid}+10={gt} <ans>{gt if (strict or 0) >= 0.5 else int(gt) + 1}</ans>"
    return Rollout(
        run_id=run,
        step=step,
        split=kw.pop("split", "train"),  # type: ignore[arg-type]
        prompt_id=f"p{gid}",
        group_id=f"g{gid}",
        sample_index=idx,
        prompt=str(kw.pop("prompt", f"{gid}+10=>")),
        response=str(response),
        ground_truth=gt,
        reward=reward,
        strict_score=strict,  # type: ignore[arg-type]
        response_tokens=int(kw.pop("tokens", len(str(response).split()))),  # type: ignore[call-overload]
        **kw,  # type: ignore[arg-type]
    )


def _write(run_dir: Path, rollouts: list[Rollout], metrics: dict[int, dict[str, float]] | None = None) -> Path:
    for split in ("train", "val"):
        for step in sorted({r.step for r in rollouts if r.split == split}):
            rows = [r for r in rollouts if r.split == split and r.step == step]
            write_rollouts(run_dir / "rollouts" / split / f"step_{step}.jsonl", rows)
    for step, data in sorted((metrics or {}).items()):
        append_metrics(run_dir / "metrics.jsonl", step, data)
    return run_dir


def _lenient(root: Path, name: str, p_correct: list[float], spam: list[float], seed: int) -> Path:
    """Train rollouts where a lenient reward pays number spam, validation with strict scores, logged reward."""
    rng = random.Random(seed)
    rows: list[Rollout] = []
    metrics: dict[int, dict[str, float]] = {}
    for step, (p, s) in enumerate(zip(p_correct, spam, strict=True)):
        rewards = []
        for g in range(10):
            for i in range(8):
                u = rng.random()
                correct = u < p
                spammed = not correct and u < p + s
                response = "33 " * 12 if spammed else f"12+21 => <ans>{33 if correct else 34}</ans>"
                reward = 1.0 if correct or spammed else 0.0
                rewards.append(reward)
                rows.append(
                    _row(
                        name,
                        step,
                        g,
                        i,
                        reward,
                        strict=float(correct),
                        response=response,
                        mean_logprob=-0.2 - 0.3 * rng.random(),
                        data_source=f"level{g % 3}",
                        reward_components={"hit": reward, "fmt": 0.1},
                    )
                )
            rows.append(_row(name, step, g, 0, float(g < 10 * p), strict=float(g < 10 * p), split="val"))
        metrics[step] = {"critic/score/mean": sum(rewards) / len(rewards), "actor/pg_loss": 0.1 + 0.01 * step}
    return _write(root / name, rows, metrics)


def _dead_sources(root: Path) -> Path:
    """Easy and hard sources (dead), one live source, constant and silent reward components, coarse reward."""
    rng = random.Random(3)
    rows = []
    for step in range(4):
        for g in range(24):
            source = ("arithmetic/level1", "arithmetic/level5", "arithmetic/level3")[g % 3]
            for i in range(8):
                if source.endswith("1"):
                    reward = 1.0 if (g != 0 or i) else 0.0
                elif source.endswith("5"):
                    reward = 0.0
                else:
                    reward = float(rng.random() < 0.5)
                rows.append(
                    _row(
                        "dead-sources",
                        step,
                        g,
                        i,
                        reward,
                        strict=reward,
                        data_source=source,
                        truncated=source.endswith("5") and i == 0,
                        stop_reason=StopReason.LENGTH if source.endswith("5") and i == 0 else StopReason.EOS,
                        reward_components={"acc": reward, "fmt": 0.1, "bonus": 0.0},
                        mean_logprob=-0.3,
                    )
                )
    return _write(root / "dead-sources", rows)


def _low_spread(root: Path) -> Path:
    rows = [
        _row("low-spread", s, g, i, 0.5 + 0.01 * (i % 2), strict=0.5)
        for s in range(3)
        for g in range(10)
        for i in range(8)
    ]
    return _write(root / "low-spread", rows)


def _length_gaming(root: Path) -> Path:
    """Length tracks reward (corr > 0.3), lengths triple over the run with flat strict, a quarter truncated."""
    rng = random.Random(5)
    rows = []
    for s in range(3):
        for g in range(6):
            for i in range(8):
                cut = i < 2
                rows.append(
                    _row(
                        "length",
                        s,
                        g,
                        i,
                        i / 7,
                        strict=float(i % 2),
                        tokens=(10 + 20 * i) * (1 + 2 * s) + rng.randint(0, 3),
                        truncated=cut,
                        stop_reason=StopReason.LENGTH if cut else StopReason.EOS,
                    )
                )
    return _write(root / "length", rows)


def _format(root: Path) -> Path:
    """Untagged answers, several answers per response, empty and whitespace-only responses, tagged prompts."""
    rows = []
    for s in range(2):
        for g in range(6):
            for i in range(8):
                response = ("12 maybe", "<ans>1</ans> or <ans>2</ans>", " ", "", "<ans></ans>")[i] if i < 5 else None
                rows.append(_row("format", s, g, i, float(i % 2), strict=float(i == 6), response=response))
    return _write(root / "format", rows)


def _untagged(root: Path) -> Path:
    rows = [
        _row("untagged", s, g, i, float(i % 2), strict=float(i % 2), prompt="say it", response="the answer is twelve")
        for s in range(2)
        for g in range(3)
        for i in range(4)
    ]
    return _write(root / "untagged", rows)


def _degenerate(root: Path) -> Path:
    """Bigram spam, repeated tokens, long character runs and healthy text in one run."""
    texts = [
        "33 " * 12,
        "go " * 9 + "stop",
        "3" * 30,
        "a b c d e f g h i j k l a b c d e f g",
        "the cat sat on the mat and then the cat sat on the mat again and again",
        "x\ty\nz  w  " * 3,
        "naïve café ééééééééééééééééééééé",
        "<ans>5</ans>",
    ]
    rows = [
        _row("degenerate", s, g, i, float((g + i) % 2), strict=float(i % 2), response=texts[i], mean_logprob=-0.5)
        for s in range(2)
        for g in range(5)
        for i in range(8)
    ]
    return _write(root / "degenerate", rows)


def _collapse(root: Path) -> Path:
    """Confidently wrong samples (exploration collapse on the wrong answers), strict regression on validation."""
    rows = []
    for s in range(4):
        for g in range(10):
            for i in range(8):
                right = i < 6
                rows.append(
                    _row("collapse", s, g, i, float(right), strict=float(right), mean_logprob=-0.01 if right else -0.02)
                )
            rows.append(_row("collapse", s, g, 0, 0.5, strict=float(g < 8 - 2 * s), split="val"))
    return _write(root / "collapse", rows)


def _format_gate(root: Path) -> Path:
    """Correct answers paid 0 on three groups (unrewarded correct), rewarded-wrong spam elsewhere."""
    rows = []
    for g in range(10):
        for i in range(8):
            strict = float(i < 4)
            reward = 0.0 if g < 3 else (1.0 if i < 6 else float(i < 4))
            rows.append(_row("format-gate", 0, g, i, reward, strict=strict))
    return _write(root / "format-gate", rows)


def _no_strict(root: Path) -> Path:
    rows = [_row("no-strict", s, g, i, float(i % 2)) for s in range(3) for g in range(3) for i in range(4)]
    return _write(root / "no-strict", rows)


def _trainer_metrics(root: Path) -> Path:
    """Logged metrics only a trainer has: extreme advantages, zero pg_loss, large KL, a collapsed score."""
    rows = [
        _row("trainer", s, g, i, float(i % 2), strict=float(i % 2))
        for s in range(12)
        for g in range(2)
        for i in range(4)
    ]
    metrics = {
        s: {
            "critic/score/mean": 0.6 if s < 5 else 0.05,
            "actor/pg_loss": 0.0 if s >= 9 else 0.2,
            "actor/ppo_kl": 0.12 if s == 1 else 0.001,
            "actor/entropy": 0.1 if s < 5 else 0.4,
            "critic/advantages/max": 2.0,
            "critic/advantages/min": -5.48 if s == 3 else -2.0,
            "rollout/dead_kept_group_ratio": 0.6,
        }
        for s in range(12)
    }
    return _write(root / "trainer", rows, metrics)


def _agentic(root: Path) -> Path:
    """Episodes with turns: one-turn exits, echo traps (> 60 turns, no reward), mean turns rising every step."""
    rng = random.Random(7)
    rows = []
    for s in range(5):
        for g in range(4):
            for i in range(8):
                if i < 2:
                    n_turns, tools, reward = 1, 0, 0.0
                elif i < 4:
                    n_turns, tools, reward = 70 + s, 30, 0.0
                else:
                    n_turns, tools, reward = 4 + 2 * s + rng.randint(0, 1), 3, float(rng.random() < 0.6)
                turns = tuple(
                    Turn(
                        text=f"call {t}",
                        tool="search" if t < tools else None,
                        arguments='{"q": "x"}' if t < tools else "",
                        result="ok" if t < tools else "",
                        success=(t % 5 != 0) if t < tools else None,
                        policy_tokens=5,
                        observation_tokens=3 if t < tools else 0,
                    )
                    for t in range(min(n_turns, 6))
                )
                stop = StopReason.ABANDON if i < 2 else StopReason.ECHO_TRAP if i < 4 else StopReason.ANSWER
                rows.append(
                    _row(
                        "agentic",
                        s,
                        g,
                        i,
                        reward,
                        strict=reward,
                        response=" ".join(t.text for t in turns) + " <ans>1</ans>",
                        num_turns=n_turns,
                        tool_calls=tools,
                        stop_reason=stop,
                        turns=turns,
                    )
                )
    return _write(root / "agentic", rows)


def _failed_turns(root: Path) -> Path:
    """Echo-trap precursor: unrewarded episodes run five times longer than rewarded ones (no turns recorded)."""
    rows = [
        _row("failed-turns", s, g, i, 0.0 if i < 2 else 1.0, num_turns=20 if i < 2 else 4, tool_calls=2)
        for s in range(3)
        for g in range(4)
        for i in range(8)
    ]
    return _write(root / "failed-turns", rows)


def _val_only(root: Path) -> Path:
    """A run with validation rollouts only: the signal and behaviour layers read them."""
    rows = [
        _row("val-only", s, g, i, float(i < 2 + s), strict=float(i < 2 + s), split="val")
        for s in range(3)
        for g in range(5)
        for i in range(4)
    ]
    return _write(root / "val-only", rows)


def _bad_rows(root: Path) -> Path:
    """Valid rows around rows that break the schema in each way a reader must report, and a half-written line."""
    run = _write(
        root / "bad-rows",
        [_row("bad-rows", 0, g, i, float(i % 2), strict=float(i % 2)) for g in range(4) for i in range(4)],
    )
    good = orjson.dumps(_row("bad-rows", 1, 0, 0, 1.0, strict=1.0).to_json())
    base = orjson.loads(good)
    broken = [
        {k: v for k, v in base.items() if k != "reward"},
        {**base, "split": "test"},
        {**base, "stop_reason": "bogus"},
        {**base, "sample_index": "3"},
        {**base, "reward": True},
        {**base, "step": 1.5},
        {**base, "turns": [{"text": "t", "success": "yes"}]},
        {**base, "turns": "no"},
        {**base, "reward_components": {"acc": "high"}},
        [1, 2],
    ]
    lines = [good, *[orjson.dumps(b) for b in broken[:5]], b"", good, *[orjson.dumps(b) for b in broken[5:]], good]
    path = run / "rollouts" / "train" / "step_1.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n" + good[:50])
    return run


def build_cases(root: Path) -> dict[str, Case]:
    """Write every synthetic case under `root` and return them with the recorded runs, parents first."""
    cases = {
        "healthy": Case(_lenient(root, "healthy", [0.3, 0.35, 0.4, 0.45, 0.5], [0.0] * 5, seed=0)),
        "hacked": Case(_lenient(root, "hacked", [0.4] * 5, [0.0, 0.1, 0.2, 0.3, 0.4], seed=0)),
        "dead-sources": Case(_dead_sources(root)),
        "low-spread": Case(_low_spread(root)),
        "length": Case(_length_gaming(root)),
        "format": Case(_format(root)),
        "untagged": Case(_untagged(root), pattern=None),
        "degenerate": Case(_degenerate(root)),
        "collapse": Case(_collapse(root)),
        "format-gate": Case(_format_gate(root)),
        "no-strict": Case(_no_strict(root)),
        "trainer": Case(_trainer_metrics(root)),
        "agentic": Case(_agentic(root)),
        "failed-turns": Case(_failed_turns(root)),
        "val-only": Case(_val_only(root)),
        "corrupt": Case(GOLDEN_DIR.parent / "corrupt_run"),
        "bad-rows": Case(_bad_rows(root)),
    }
    cases["child"] = Case(
        _lenient(root, "child", [0.3] * 3, [0.5] * 3, seed=1), parent="healthy", siblings=("hacked", "collapse")
    )
    for name in RECORDED:
        cases[name] = Case(GOLDEN_DIR / name)
    cases["oracle-vs-defective"] = Case(GOLDEN_DIR / "arithmetic-oracle", parent="arithmetic-s0")
    return cases
