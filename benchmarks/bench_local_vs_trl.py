"""Throughput: one local GRPO step versus one TRL `GRPOTrainer` step, same model, task and batch shape.

Both run on CPU in fp32, without gradient checkpointing, on the same randomly initialised tiny Llama and
the same character tokenizer (wrapped as a `PreTrainedTokenizerFast` for TRL), with the same settings:
P prompts x G samples, max_new_tokens, temperature 1, clip 0.2/0.28, no KL, token-mean loss. Rounds are
interleaved (local, TRL, local, ...) so machine load hits both alike. Reports samples/s of each, their
ratio, and each one's achieved FLOP/s as a fraction of the CPU's measured fp32 matmul throughput.

Run: ``.venv/bin/python benchmarks/bench_local_vs_trl.py [--rounds 3 --steps-per-round 2]``
(needs ``pip install trl torch==2.13.0``; not a timed test).
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

from harness.manifest import load_harness
from trainer_backend.local import grpo
from trainer_backend.local.artifacts import read_rows
from trainer_backend.local.config import LocalTrainerConfig
from trainer_backend.local.model import CharTokenizer, build_model, generate, left_pad
from trainer_backend.local.train import PPO_MINIBATCHES, sequence_logits
from trainer_backend.local.vocab import tokenizer_for

HARNESS = Path(__file__).resolve().parents[1] / "examples" / "arithmetic-oracle"
DATA = HARNESS / "data" / "train.jsonl"


def matmul_gflops(n: int = 512, reps: int = 20) -> float:
    """Return the measured fp32 matmul throughput of this CPU (GFLOP/s, current thread setting)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e9


def reward(texts: list[str], truths: list[str]) -> list[float]:
    """Strict tagged answer (the oracle harness's reward, inlined)."""
    pairs = zip(texts, truths, strict=True)
    return [float(t.strip().endswith(f"<ans>{g}</ans>") and t.count("<ans>") == 1) for t, g in pairs]


def local_step(model, opt, tok, cfg, rows, gen) -> int:  # type: ignore[no-untyped-def]
    """Run one local GRPO step (generate, score, advantages, two clipped minibatch updates); return tokens."""
    prompts = [[tok.bos_id, *tok.encode(r["prompt"])] for r in rows for _ in range(cfg.group_size)]
    resp, mask, _ = generate(model, prompts, cfg.max_new_tokens, tok.eos_id, tok.pad_id, cfg.temperature, gen)
    texts = [tok.decode(x.tolist()) for x in resp]
    rewards = reward(texts, [str(r["ground_truth"]) for r in rows for _ in range(cfg.group_size)])
    adv = grpo.group_advantages(torch.tensor(rewards), torch.arange(len(rows)).repeat_interleave(cfg.group_size))
    pids, pmask = left_pad(prompts, tok.pad_id)
    with torch.no_grad():
        old = grpo.token_logprobs(sequence_logits(model, pids, pmask, resp, mask), resp, cfg.temperature)
    for sel in torch.arange(len(prompts)).chunk(PPO_MINIBATCHES):
        logp = grpo.token_logprobs(sequence_logits(model, pids[sel], pmask[sel], resp[sel], mask[sel]), resp[sel], 1.0)
        loss, _ = grpo.policy_loss(logp, old[sel], adv[sel], mask[sel], cfg.clip_low, cfg.clip_high)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return int(mask.sum()) + int(pmask.sum())


def hf_tokenizer(tok: CharTokenizer):  # type: ignore[no-untyped-def]
    """Wrap the char tokenizer as a `PreTrainedTokenizerFast` (same ids) for TRL."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tok.vocab)}, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("<ans>|</ans>|."), behavior="isolated")
    fast = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>")
    fast.padding_side = "left"
    return fast


def trl_trainer(model, tok, cfg, rows, steps: int, out: Path):  # type: ignore[no-untyped-def]
    """Build a TRL GRPOTrainer with settings matched to the local step."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    def trl_reward(completions: list[str], ground_truth: list[str], **_: Any) -> list[float]:
        return reward(completions, [str(g) for g in ground_truth])

    data = Dataset.from_list([{"prompt": "<bos>" + r["prompt"], "ground_truth": str(r["ground_truth"])} for r in rows])
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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps-per-round", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "bench_local_vs_trl")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = LocalTrainerConfig()
    tok = tokenizer_for(load_harness(HARNESS), cfg.warmstart_data, None)  # the demo's vocabulary
    rows = [r for r in read_rows(DATA) if r.get("level") in (2, 3, 4)]
    local_model = build_model(cfg.shape(), len(tok), seed=0)
    trl_model = build_model(cfg.shape(), len(tok), seed=0)
    trl_model.generation_config.pad_token_id = tok.pad_id
    trl_model.generation_config.eos_token_id = tok.eos_id
    opt = torch.optim.AdamW(local_model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(0)
    rng = random.Random(0)
    n_params = sum(p.numel() for p in local_model.parameters())
    samples = cfg.prompts_per_step * cfg.group_size
    local_s, trl_s, local_tokens = [], [], []
    for _ in range(args.rounds):
        for _ in range(args.steps_per_round):
            t0 = time.perf_counter()
            local_tokens.append(local_step(local_model, opt, tok, cfg, rng.sample(rows, cfg.prompts_per_step), gen))
            local_s.append(time.perf_counter() - t0)
        trainer = trl_trainer(trl_model, tok, cfg, rng.sample(rows, 64), args.steps_per_round, args.out)
        t0 = time.perf_counter()
        trainer.train()
        trl_s.append((time.perf_counter() - t0) / args.steps_per_round)
    peak = matmul_gflops()
    # forward for sampling + old logp (2 flops/param/token each) + forward/backward of the update (6)
    flops = (2 + 2 + 6) * n_params * statistics.fmean(local_tokens)
    local_step_s, trl_step_s = statistics.median(local_s), statistics.median(trl_s)
    report = {
        "params": n_params,
        "samples_per_step": samples,
        "max_new_tokens": cfg.max_new_tokens,
        "threads": args.threads,
        "local_step_s": local_step_s,
        "trl_step_s": trl_step_s,
        "local_samples_per_s": samples / local_step_s,
        "trl_samples_per_s": samples / trl_step_s,
        "speedup_local_over_trl": trl_step_s / local_step_s,
        "cpu_matmul_gflops": peak,
        "local_fraction_of_matmul_peak": flops / local_step_s / 1e9 / peak,
        "trl_fraction_of_matmul_peak_same_flops": flops / trl_step_s / 1e9 / peak,
        "note": "TRL step timed with trainer.train() wall time / steps (includes its per-call setup)",
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
