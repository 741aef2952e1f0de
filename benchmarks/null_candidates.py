"""How often does the decision rule accept a null candidate (a change that does nothing)? (issue #5)

Inside a session the control and every candidate share a seed and a starting checkpoint, so a true no-op
candidate trains bit-for-bit like the control and can never be accepted. This benchmark measures the
harder case: the null candidate is the incumbent harness trained with a *different* seed, so the only
difference between the two runs is training noise. Each trial runs the controller's own evaluation
(per-prompt strict scores, paired bootstrap, `classify_outcome`) and counts "improvement" verdicts.

    .venv/bin/python benchmarks/null_candidates.py --trials 20 --steps 30 --out null-out
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from agent.evidence import final_strict_scores, paired
from diagnostics.findings import Severity
from diagnostics.report import build_report
from diagnostics.schema import read_run_rollouts
from diagnostics.stats import classify_outcome, paired_bootstrap
from trainer_backend import BACKENDS
from trainer_backend.base import RunSpec

ROOT = Path(__file__).resolve().parents[1]


def _train(harness: Path, out: Path, steps: int, seed: int, init: Path | None = None) -> Path:
    spec = RunSpec(run_id=out.name, harness_dir=harness, out_dir=out, steps=steps, seed=seed, init_checkpoint=init)
    result = BACKENDS["local"].run(spec)
    if result.outcome.value != "ok":
        raise RuntimeError(f"{out}: {result.outcome.value}: {result.message}")
    return out


def main() -> None:
    """Run the trials and print/write the acceptance rate."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harness", type=Path, default=ROOT / "examples" / "arithmetic-oracle")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path("null-candidates"))
    ap.add_argument("--min-effect", type=float, default=0.05, help="the decision rule's seed-noise floor")
    args = ap.parse_args()
    outcomes: list[str] = []
    deltas: list[float] = []
    started = time.time()
    # One incumbent policy (the cached seed-0 warm start plus one step), as in a session's pilots.
    base = _train(args.harness, args.out / "incumbent", 1, seed=0) / "checkpoints" / "last.pt"
    for i in range(args.trials):
        control = _train(args.harness, args.out / f"t{i}-control", args.steps, seed=1000 + i, init=base)
        null = _train(args.harness, args.out / f"t{i}-null", args.steps, seed=2000 + i, init=base)
        a, b = paired(*(final_strict_scores(read_run_rollouts(d, ["val"]).rollouts) for d in (control, null)))
        cmp = paired_bootstrap(a, b)
        rep_c, rep_n = build_report(control), build_report(null, parent=None)
        outcome = classify_outcome(cmp, rep_n.alerts(Severity.WARNING), rep_c.alerts(Severity.WARNING), args.min_effect)
        outcomes.append(outcome)
        deltas.append(cmp.delta)
        print(f"trial {i}: Δ {cmp.delta:+.3f} CI [{cmp.ci_low:+.3f}, {cmp.ci_high:+.3f}] n={cmp.n} -> {outcome}")
    accepted = outcomes.count("improvement")
    summary = {
        "trials": len(outcomes),
        "accepted": accepted,
        "acceptance_rate": accepted / len(outcomes),
        "outcomes": {k: outcomes.count(k) for k in sorted(set(outcomes))},
        "steps": args.steps,
        "min_effect": args.min_effect,
        "abs_deltas": sorted(round(abs(d), 4) for d in deltas),
        "wall_s": round(time.time() - started, 1),
        "harness": str(args.harness),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "null_candidates.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
