"""Throughput: the local trainer's own GRPO step versus one TRL `GRPOTrainer` step, same model, task and batch.

The local side is the product's code path: `trainer_backend.local.step.train_step` on the
`examples/arithmetic-oracle` harness (its reward through `InProcessCalls`, its strict evaluator, its
rollout files written to a temp run folder), exactly as a training run calls it. The TRL side is
`GRPOTrainer.train()` on the same randomly initialised tiny Llama, the same character tokenizer (wrapped as
a `PreTrainedTokenizerFast`), the same reward function (loaded from the harness) and matched settings:
P prompts x G samples, max_new_tokens, temperature, clip low/high, no KL, token-mean (`loss_type="dapo"`),
one generation feeding the same number of optimizer minibatches, fp32, no gradient checkpointing, CPU.
The local step does strictly more work (strict scoring, rollout files).

Rounds are interleaved (local steps, then TRL steps, ...) so machine load hits both alike; the report gives
the median and the spread of the per-round ratio, and the library versions. Not a timed test.

Run: ``.venv/bin/python benchmarks/bench_local_vs_trl.py --rounds 10 --steps-per-round 2 --threads 1``
(needs ``pip install trl==1.16.0``, which installs nothing else into the project's virtualenv).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from harness.calls import InProcessCalls, load_function, validate_reward
from harness.manifest import load_harness
from trainer_backend.base import RunSpec
from trainer_backend.local import artifacts as art
from trainer_backend.local import episodes as ep
from trainer_backend.local.config import load_trainer_config
from trainer_backend.local.model import CharTokenizer, build_model
from trainer_backend.local.policy import Policy
from trainer_backend.local.step import PPO_MINIBATCHES, RunContext, train_step
from trainer_backend.local.vocab import tokenizer_for

HARNESS = Path(__file__).resolve().parents[1] / "examples" / "arithmetic-oracle"


def hf_tokenizer(tok: CharTokenizer):  # type: ignore[no-untyped-def]
    """Wrap the char tokenizer as a `PreTrainedTokenizerFast` (same ids) for TRL."""
    import re

    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tok.vocab)}, unk_token="<pad>"))
    tags = "|".join(re.escape(t) for t in tok.specials)
    core.pre_tokenizer = pre_tokenizers.Split(Regex(f"{tags}|." if tags else "."), behavior="isolated")
    fast = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>")
    fast.padding_side = "left"
    return fast


def trl_trainer(model, tok, cfg, rows, reward_fn, steps: int, out: Path):  # type: ignore[no-untyped-def]
    """Build a TRL GRPOTrainer with settings matched to the local trainer's step."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    def trl_reward(completions: list[str], ground_truth: list[str], data_source: list[str], **_: Any) -> list[float]:
        raw = [reward_fn(s, c, g, {}) for s, c, g in zip(data_source, completions, ground_truth, strict=True)]
        return [validate_reward(v, "harness/reward.py")[0] for v in raw]

    data = Dataset.from_list(
        [
            {"prompt": "<bos>" + r["prompt"], "ground_truth": str(r["ground_truth"]), "data_source": r["data_source"]}
            for r in rows
        ]
    )
    batch = cfg.prompts_per_step * cfg.group_size
    args = GRPOConfig(
        output_dir=str(out),
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        max_steps=steps * PPO_MINIBATCHES,  # TRL counts optimizer steps: one generation feeds PPO_MINIBATCHES of them
        per_device_train_batch_size=batch // PPO_MINIBATCHES,
        gradient_accumulation_steps=1,
        steps_per_generation=PPO_MINIBATCHES,
        num_generations=cfg.group_size,
        max_completion_length=cfg.max_new_tokens,
        temperature=cfg.temperature,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        epsilon=cfg.clip_low,
        epsilon_high=cfg.clip_high,
        loss_type="dapo",
        learning_rate=cfg.lr,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        seed=0,
        dataloader_num_workers=0,
        disable_dropout=True,
    )
    return GRPOTrainer(
        model=model, reward_funcs=[trl_reward], args=args, train_dataset=data, processing_class=hf_tokenizer(tok)
    )


def main() -> None:
    """Interleave local and TRL rounds and print a JSON report."""
    import transformers
    import trl

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps-per-round", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "bench_local_vs_trl")
    parser.add_argument("--json-out", type=Path, help="also write the report here (TRL logs to stdout too)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    harness = load_harness(HARNESS)
    cfg = load_trainer_config(harness.path(harness.manifest.trainer.config), harness.root)
    tok = tokenizer_for(harness, cfg.warmstart_data, None)  # the vocabulary a training run of it builds
    rows = art.read_rows(harness.path(harness.manifest.data.train))
    calls = InProcessCalls(harness)
    strict = load_function(harness.root, harness.strict_eval)
    reward_fn = load_function(harness.root, harness.reward)
    local_model = build_model(cfg.shape(), len(tok), seed=0)
    trl_model = build_model(cfg.shape(), len(tok), seed=0)
    trl_model.generation_config.pad_token_id = tok.pad_id
    trl_model.generation_config.eos_token_id = tok.eos_id
    opt = torch.optim.AdamW(local_model.parameters(), lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.99))
    gen = torch.Generator().manual_seed(0)
    rng = random.Random(0)
    run_dir = Path(tempfile.mkdtemp(prefix="bench-local-"))
    spec = RunSpec(run_id="bench", harness_dir=harness.root, out_dir=run_dir, steps=10**6)
    policy = Policy(local_model, tok, torch.device("cpu"), cfg.render_prompt)
    ctx = RunContext(spec, harness, cfg, calls, strict, policy, ep.settings_for(harness, tok, cfg))
    state: dict[str, Any] = {"filter": {}}
    step = 0
    local_s, trl_s, ratios, local_tokens = [], [], [], []
    for _ in range(args.rounds):
        round_local = []
        for _ in range(args.steps_per_round):
            step += 1
            batch = art.sample_rows(rows, None, harness.manifest.data.select_by, cfg.prompts_per_step, rng)
            t0 = time.perf_counter()
            metrics = train_step(ctx, opt, None, batch, state, gen, step)
            round_local.append(time.perf_counter() - t0)
            local_tokens.append(metrics["response_length/mean"])
        trainer = trl_trainer(trl_model, tok, cfg, rng.sample(rows, 64), reward_fn, args.steps_per_round, args.out)
        t0 = time.perf_counter()
        trainer.train()
        round_trl = (time.perf_counter() - t0) / args.steps_per_round
        local_s += round_local
        trl_s.append(round_trl)
        ratios.append(round_trl / statistics.fmean(round_local))
    samples = cfg.prompts_per_step * cfg.group_size
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    report = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__},
        "threads": args.threads,
        "rounds": args.rounds,
        "steps_per_round": args.steps_per_round,
        "samples_per_step": samples,
        "max_new_tokens": cfg.max_new_tokens,
        "local_mean_response_tokens": statistics.fmean(local_tokens),
        "local_step_s_median": statistics.median(local_s),
        "trl_step_s_median": statistics.median(trl_s),
        "speedup_local_over_trl_median": statistics.median(ratios),
        "speedup_quartiles": quartiles,
        "speedup_min_max": [min(ratios), max(ratios)],
        "speedup_per_round": ratios,
        "note": "TRL step = trainer.train() wall time / steps (includes its per-call setup); local step = train_step",
    }
    print(json.dumps(report, indent=2))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
