"""How often does the decision rule accept a null candidate (a change that does nothing)?

Inside a session the control and every candidate continue the incumbent's run exactly (its AdamW moments,
KL reference, filter state and random streams), so a true no-op candidate trains bit-for-bit like the
control and can never be accepted. This benchmark measures the harder case: the null candidate is the
incumbent harness continued with a *different* seed, so the only difference between candidate and control
is training-seed noise.

Runs continue as a session's pilots do today: an incumbent run of `--incumbent-steps` (v0), then K runs of
`--steps` from its final checkpoint carrying its optimizer moments, KL reference and filter state with
fresh random streams (`init_state="optimizer"`, what a session's fresh-seed replicates get), seeds 1000 +
i. Any two distinct runs form a null trial (control, candidate), any four a replicated trial (control,
candidate, replicate control, replicate candidate). Health reports read the harness's declared answer
protocol, as the session's do. Two rates, each over *every* ordered choice of runs (an exact U-statistic
over the K runs, so trials share runs and are not independent; K is the sample size that counts):

- single seed: the controller's per-pilot rule (paired bootstrap over prompts, `classify_outcome` with
  the `--min-effect` floor) says "improvement";
- replicated: the session's merge rule (`agent.decisions.evidence.replicate_check`, one fresh-seed replicate, as
  `evotrainer run --replicates 1`) confirms that improvement.

    .venv/bin/python benchmarks/null_candidates.py --runs 20 --steps 60 --incumbent-steps 60 --out null-out
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

from agent.decisions.evidence import classify_outcome, final_strict_scores, paired, replicate_check
from diagnostics.findings import Finding, Severity
from diagnostics.report import build_report
from diagnostics.schema import LAST_CHECKPOINT, SUMMARY_FILE
from diagnostics.stats import paired_bootstrap
from diagnostics.table import read_run_table
from harness.manifest import load_harness
from trainer_backend import BACKENDS
from trainer_backend.base import RunSpec

ROOT = Path(__file__).resolve().parents[1]


def _train(harness: Path, out: Path, steps: int, seed: int, init: Path | None = None) -> Path:
    if (out / SUMMARY_FILE).exists():
        return out  # resumable: finished runs are reused
    carry = "optimizer" if init is not None else "weights"  # a fresh-seed continuation, as session replicates
    spec = RunSpec(
        run_id=out.name, harness_dir=harness, out_dir=out, steps=steps, seed=seed, init_checkpoint=init,
        init_state=carry,
    )  # fmt: skip
    result = BACKENDS["local"].run(spec)
    if result.outcome.value != "ok":
        raise RuntimeError(f"{out}: {result.outcome.value}: {result.message}")
    return out


def main() -> None:
    """Train the runs, score every null trial and print/write the acceptance rates."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harness", type=Path, default=ROOT / "examples" / "arithmetic-oracle")
    ap.add_argument("--runs", type=int, default=20, help="K: independent runs of the harness (seeds)")
    ap.add_argument("--steps", type=int, default=60, help="steps per run (the session's --pilot-steps)")
    ap.add_argument("--incumbent-steps", type=int, default=60, help="steps of the incumbent (--base-steps)")
    ap.add_argument("--out", type=Path, default=Path("null-candidates"))
    ap.add_argument("--min-effect", type=float, default=0.05, help="the decision rule's seed-noise floor")
    args = ap.parse_args()
    started = time.time()
    # One incumbent run (v0 of a session: the cached seed-0 warm start, then --incumbent-steps of GRPO).
    incumbent = _train(args.harness, args.out / "incumbent", args.incumbent_steps, seed=0)
    base = incumbent / LAST_CHECKPOINT
    dirs = [_train(args.harness, args.out / f"run{i}", args.steps, seed=1000 + i, init=base) for i in range(args.runs)]
    train_s = time.time() - started
    answer = load_harness(args.harness).manifest.answer
    scores = [final_strict_scores(read_run_table(d, answer, splits=("val",)).val) for d in dirs]
    reports = [build_report(d, answer=answer) for d in dirs]
    alerts: list[list[Finding]] = [r.alerts(Severity.WARNING) for r in reports]
    single: dict[tuple[int, int], str] = {}
    deltas = []
    for c, k in itertools.permutations(range(args.runs), 2):
        cmp = paired_bootstrap(*paired(scores[c], scores[k]), n_boot=2000)
        single[(c, k)] = classify_outcome(cmp, alerts[k], alerts[c], args.min_effect)
        deltas.append(cmp.delta)
    accepted_first = [pair for pair, outcome in single.items() if outcome == "improvement"]
    replicated = quadruples = 0
    for c, k in accepted_first:
        rest = [i for i in range(args.runs) if i not in (c, k)]
        for rc, rk in itertools.permutations(rest, 2):
            rep = replicate_check(
                (scores[c], scores[k]), [(scores[rc], scores[rk])], alerts[rk], alerts[rc], args.min_effect
            )
            replicated += rep.confirmed
    quadruples = args.runs * (args.runs - 1) * (args.runs - 2) * (args.runs - 3)
    summary = {
        "runs": args.runs,
        "steps": args.steps,
        "incumbent_steps": args.incumbent_steps,
        "init_state": "optimizer",
        "min_effect": args.min_effect,
        "single_seed": {
            "trials": len(single),
            "accepted": len(accepted_first),
            "rate": len(accepted_first) / len(single),
        },
        "replicated": {"trials": quadruples, "accepted": replicated, "rate": replicated / quadruples},
        "strict_acc_per_run": [round(sum(s.values()) / len(s), 4) for s in scores],
        "max_abs_delta": round(max(abs(d) for d in deltas), 4),
        "train_s": round(train_s, 1),
        "wall_s": round(time.time() - started, 1),
        "harness": str(args.harness.relative_to(ROOT) if args.harness.is_relative_to(ROOT) else args.harness),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "null_candidates.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
