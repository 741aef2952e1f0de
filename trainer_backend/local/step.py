"""One GRPO step and one validation of the local trainer, over a `RunContext` (the run's spec, harness, settings,
calls and policy).

`train_step` samples `group_size` responses (or episodes) per prompt, scores them through the harness calls
(reward contract checked), applies the harness group filter *before* advantage normalisation (filtered
groups get no gradient), computes group advantages, takes PPO-style clipped updates and logs verl-named
metrics; `validate` scores the held-out selection split greedily with the protected strict evaluator, and
`seal` the sealed split once at the run's end. `train.py` runs these in order.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from diagnostics.schema import (
    STRICT_METRIC,
    TRAIN_REWARD_METRIC,
    Rollout,
    Split,
    StopReason,
    rollout_file,
    write_rollouts,
)
from harness.calls import validate_reward
from harness.failures import CandidateCodeError, Outcome
from harness.manifest import Harness
from harness.splits import SEALED_SPLIT
from trainer_backend.base import RunSpec
from trainer_backend.local import episodes as ep
from trainer_backend.local import grpo
from trainer_backend.local.config import LocalTrainerConfig
from trainer_backend.local.policy import Policy

PPO_MINIBATCHES = 2  # one pass over the batch in two minibatches: the second is slightly off-policy
LOGP_CHUNK = 16  # sequences per no-grad scoring forward of a Hugging Face model (bounds [B, T, V] logits)
GRAD_CLIP = 1.0
VAL_SAMPLES = 4  # sampled answers per held-out prompt for val/strict_acc_avg4
ROW_FIELDS = ("prompt", "ground_truth", "data_source", "prompt_id")  # a row's other fields go to extra_info


def log(msg: str) -> None:
    """Print one line to train.log (stdout is redirected there by the backend)."""
    print(msg, flush=True)


@dataclass
class RunContext:
    """What every stage of one run reads: the spec, the harness, its settings, its calls and the policy."""

    spec: RunSpec
    harness: Harness
    cfg: LocalTrainerConfig
    calls: Any  # harness calls (reward, filter, env), in the sandbox the spec names
    strict: Any  # the protected strict evaluator (trusted, in-process)
    policy: Policy
    episodes: ep.EpisodeSettings | None  # None: single-turn

    def sample(self, rows: list[dict[str, Any]], temperature: float, gen: torch.Generator | None) -> ep.Sampled:
        """One response (or episode) per row at `temperature` (greedy at 0)."""
        return ep.sample(self.policy, self.episodes, self.calls, rows, self.cfg.max_new_tokens, temperature, gen)


@dataclass(frozen=True)
class Scores:
    """A batch's rewards `[N]`, reward components per sample, and strict scores `[N]`."""

    rewards: list[float]
    components: list[dict[str, float]]
    strict: list[float]


def score_batch(
    ctx: RunContext, rows: list[dict[str, Any]], texts: list[str], split: str, extras: list[dict[str, Any]] | None
) -> Scores:
    """Score decoded responses with the harness reward (contract checked) and the strict evaluator.

    `extras` (agentic: each trajectory's ``turns``, ``num_turns``, ``tool_calls``) join the reward's extra_info.
    """
    harness = ctx.harness
    batch = [
        {
            "data_source": r["data_source"],
            "solution_str": t,
            "ground_truth": r["ground_truth"],
            "extra_info": {
                **{k: v for k, v in r.items() if k not in ROW_FIELDS},
                "split": split,
                "prompt_id": r["prompt_id"],
                **(extras[i] if extras is not None else {}),
            },
        }
        for i, (r, t) in enumerate(zip(rows, texts, strict=True))
    ]
    checked = [
        validate_reward(v, str(harness.reward), harness.manifest.reward_range) for v in ctx.calls.compute_rewards(batch)
    ]
    strict_scores = [float(ctx.strict(t, r["ground_truth"])) for r, t in zip(rows, texts, strict=True)]
    return Scores([c[0] for c in checked], [c[1] for c in checked], strict_scores)


def make_rollouts(
    ctx: RunContext,
    step: int,
    split: Split,
    rows: list[dict[str, Any]],
    batch: ep.Sampled,
    scores: Scores,
    group_ids: list[str] | list[int],
    sample_idx: list[int],
    mean_logp: list[float] | None = None,
    kept: list[bool] | None = None,
) -> list[Rollout]:
    """Build neutral rollout records for one batch (`kept`: per sample, did the filter keep its group)."""
    lengths = batch.resp_mask.sum(-1).tolist()
    finished = batch.finished
    records = [
        Rollout(
            run_id=ctx.spec.run_id,
            step=step,
            split=split,
            prompt_id=r["prompt_id"],
            group_id=str(group_ids[i]),
            sample_index=sample_idx[i],
            prompt=r["prompt"],
            response=batch.texts[i],
            ground_truth=str(r["ground_truth"]),
            reward=scores.rewards[i],
            reward_components=scores.components[i],
            strict_score=scores.strict[i],
            response_tokens=int(lengths[i]),
            truncated=not bool(finished[i]),
            stop_reason=StopReason.EOS if finished[i] else StopReason.LENGTH,
            mean_logprob=None if mean_logp is None else float(mean_logp[i]),
            data_source=r["data_source"],
            kept=None if kept is None else bool(kept[i]),
        )
        for i, r in enumerate(rows)
    ]
    return ep.with_trajectories(records, batch)


def rollout_path(ctx: RunContext, split: str, step: int) -> Path:
    """Where a step's rollout records go (`diagnostics.schema` reads them back)."""
    return rollout_file(ctx.spec.out_dir, split, step)


def format_rate(ctx: RunContext, texts: list[str]) -> float | None:
    """The share of responses in which the declared answer protocol finds an answer (None: none declared)."""
    answer = ctx.harness.manifest.answer
    if answer is None or not texts:
        return None
    return sum(answer.extract(t) is not None for t in texts) / len(texts)


def seal(ctx: RunContext, rows: list[dict[str, Any]], step: int) -> None:
    """Score the sealed test split once, greedily, at the run's last step into `rollouts/sealed/` (no metric:
    nothing in the loop may see it; the session's end reads it, harness/splits.py)."""
    greedy = ctx.sample(rows, 0.0, None)
    scores = score_batch(ctx, rows, greedy.texts, "val", ep.reward_infos(greedy))
    records = make_rollouts(ctx, step, "val", rows, greedy, scores, [r["prompt_id"] for r in rows], [0] * len(rows))
    write_rollouts(rollout_path(ctx, SEALED_SPLIT, step), records)


def validate(ctx: RunContext, val_rows: list[dict[str, Any]], step: int, gen_device: str) -> dict[str, float]:
    """Evaluate the whole held-out set; write the greedy val rollouts; return `val/*` metrics.

    `val/strict_acc` is greedy; `val/strict_acc_avg4` is the mean over VAL_SAMPLES samples per prompt at the
    training temperature (the paper's Avg@k protocol), drawn with a fixed seed so every validation of a run
    sees the same random stream. `val/format_rate`: the share of greedy responses the answer protocol reads.
    """
    greedy = ctx.sample(val_rows, 0.0, None)
    scores = score_batch(ctx, val_rows, greedy.texts, "val", ep.reward_infos(greedy))
    ids = [r["prompt_id"] for r in val_rows]
    records = make_rollouts(ctx, step, "val", val_rows, greedy, scores, ids, [0] * len(val_rows))
    write_rollouts(rollout_path(ctx, "val", step), records)
    gen = torch.Generator(device=gen_device).manual_seed(ctx.spec.seed + 7919)
    sampled = ctx.sample(val_rows * VAL_SAMPLES, ctx.cfg.temperature, gen).texts
    sampled_strict = [
        float(ctx.strict(x, r["ground_truth"])) for x, r in zip(sampled, val_rows * VAL_SAMPLES, strict=True)
    ]
    out = ep.metrics(greedy, "val") | {
        STRICT_METRIC: statistics.fmean(scores.strict),
        "val/strict_acc_avg4": statistics.fmean(sampled_strict),
        "val/reward_mean": statistics.fmean(scores.rewards),
        "val/truncation_rate": 1.0 - greedy.finished.float().mean().item(),
        "val/num_samples": float(len(val_rows)),
    }
    rate = format_rate(ctx, greedy.texts)
    if rate is not None:
        out["val/format_rate"] = rate
    if ctx.policy.kind != "tiny":  # token lengths of a real tokenizer (the tiny model's are characters)
        out["val/response_length/mean"] = greedy.resp_mask.sum(-1).float().mean().item()
    return out


def train_step(
    ctx: RunContext,
    opt: torch.optim.Optimizer,
    ref_model: Any,
    rows: list[dict[str, Any]],
    state: dict[str, Any],
    gen: torch.Generator,
    step: int,
) -> dict[str, float]:
    """Sample, score, filter, and update once; return the step's metrics."""
    cfg, policy = ctx.cfg, ctx.policy
    t0 = time.time()
    group = cfg.group_size
    samples = [r for r in rows for _ in range(group)]
    batch = ctx.sample(samples, cfg.temperature, gen)
    resp, resp_mask, finished = batch.resp, batch.resp_mask, batch.finished
    policy_mask = batch.policy_mask  # single-turn: resp_mask itself; agentic: observation tokens are 0
    t_gen = time.time() - t0
    scores = score_batch(ctx, samples, batch.texts, "train", ep.reward_infos(batch))
    rewards = scores.rewards
    group_rewards = [rewards[g * group : (g + 1) * group] for g in range(len(rows))]
    keep, state["filter"] = ctx.calls.filter_groups(group_rewards, state["filter"])
    dead = [len(set(g)) == 1 for g in group_rewards]

    device = policy.device
    group_ids = torch.arange(len(rows)).repeat_interleave(group)
    adv = grpo.group_advantages(torch.tensor(rewards), group_ids).to(device)
    keep_t = torch.tensor(keep, dtype=torch.bool).repeat_interleave(group)
    prompt_ids, prompt_mask = batch.prompt_ids, batch.prompt_mask
    train_mask = ((policy_mask if cfg.mask_observations else resp_mask) * keep_t[:, None].long()).to(device)
    resp_d, policy_mask_d = resp.to(device), policy_mask.to(device)
    t_update = time.time()
    with torch.no_grad():
        old_logp, entropy, ref_logp = _old_logprobs(ctx, ref_model, batch, policy_mask_d)
    mean_logp = ((old_logp * policy_mask_d).sum(-1) / policy_mask_d.sum(-1).clamp(min=1)).tolist()

    stats: dict[str, list[float]] = {"pg_loss": [], "kl_loss": [], "pg_clipfrac": [], "ppo_kl": [], "grad_norm": []}
    kept_groups = [g for g in range(len(rows)) if keep[g]]
    for chunk in [kept_groups[i::PPO_MINIBATCHES] for i in range(PPO_MINIBATCHES)]:
        if not chunk:
            continue
        sel = torch.cat([torch.arange(g * group, (g + 1) * group) for g in chunk])
        logits = policy.sequence_logits(prompt_ids[sel], prompt_mask[sel], resp[sel], resp_mask[sel])
        logp = grpo.token_logprobs(logits, resp_d[sel], cfg.temperature)
        loss, pg_stats = grpo.policy_loss(logp, old_logp[sel], adv[sel], train_mask[sel], cfg.clip_low, cfg.clip_high)
        kl = grpo.kl_penalty(logp, ref_logp[sel], train_mask[sel]) if ref_logp is not None else torch.zeros(())
        opt.zero_grad(set_to_none=True)
        total = loss + cfg.kl_coef * kl
        _check_finite(total, "loss", step, ctx.harness)
        total.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.model.parameters(), GRAD_CLIP)
        _check_finite(grad_norm, "gradient norm", step, ctx.harness)
        stats["grad_norm"].append(float(grad_norm))
        opt.step()
        stats["pg_loss"].append(loss.item())
        stats["kl_loss"].append(kl.item())
        stats["pg_clipfrac"].append(pg_stats["pg_clipfrac"])
        stats["ppo_kl"].append(pg_stats["ppo_kl"])
    policy.updated()
    t_update = time.time() - t_update

    lengths = resp_mask.sum(-1).float()
    gids = [f"{step}-{g}" for g in range(len(rows)) for _ in range(group)]
    kept = [keep[g] for g in range(len(rows)) for _ in range(group)]
    records = make_rollouts(
        ctx, step, "train", samples, batch, scores, gids, list(range(group)) * len(rows), mean_logp, kept
    )
    write_rollouts(rollout_path(ctx, "train", step), records)
    metrics = ep.metrics(batch, "train") | {
        TRAIN_REWARD_METRIC: statistics.fmean(rewards),
        "critic/score/max": max(rewards),
        "critic/score/min": min(rewards),
        "response_length/mean": lengths.mean().item(),
        "response_length/max": lengths.max().item(),
        "actor/entropy": entropy,
        "rollout/truncation_rate": 1.0 - finished.float().mean().item(),
        "rollout/dead_group_ratio": sum(dead) / len(dead),
        "rollout/kept_group_ratio": sum(keep) / len(keep),
        # zero-variance groups among those the filter let through to the update (they carry no signal)
        "rollout/dead_kept_group_ratio": sum(d and k for d, k in zip(dead, keep, strict=True)) / max(1, sum(keep)),
        "rollout/strict_acc": statistics.fmean(scores.strict),
        "actor/lr": cfg.lr,
        "timing_s/gen": t_gen,
        "timing_s/step": time.time() - t0,
    }
    if policy.kind != "tiny":  # verl's names for throughput; the tiny model's metrics stay as they were
        elapsed = time.time() - t0
        metrics.update(_perf(policy, len(samples), float(batch.resp_mask.sum()), elapsed, t_gen, t_update))
    for key, values in stats.items():
        metrics[f"actor/{key}"] = statistics.fmean(values) if values else 0.0
    comps = scores.components
    for name in sorted({k for c in comps for k in c}):
        metrics[f"reward/{name}/mean"] = statistics.fmean(c.get(name, 0.0) for c in comps)
    return metrics


def _old_logprobs(
    ctx: RunContext, ref_model: Any, batch: ep.Sampled, policy_mask: torch.Tensor
) -> tuple[torch.Tensor, float, torch.Tensor | None]:
    """The sampling policy's token log-probs `[B, T]`, its mean entropy over `policy_mask` `[B, T]` (the
    policy's own tokens), and the reference policy's log-probs (None without a KL term).

    The tiny model scores the whole batch in one forward (as it always did: the same numbers); a Hugging Face
    model in chunks of `LOGP_CHUNK` sequences, so `[B, T, V]` logits of a real vocabulary never coexist.
    """
    policy, temperature = ctx.policy, ctx.cfg.temperature
    prompt_ids, prompt_mask, resp, resp_mask = batch.prompt_ids, batch.prompt_mask, batch.resp, batch.resp_mask
    size = len(resp) if policy.kind == "tiny" else LOGP_CHUNK
    ref_policy = None if ref_model is None else Policy(ref_model, policy.tok, policy.device, policy.render, policy.kind)
    old, ref, entropy_sum = [], [], torch.zeros((), device=policy.device)
    for lo in range(0, len(resp), size):
        part = slice(lo, lo + size)
        logits = policy.sequence_logits(prompt_ids[part], prompt_mask[part], resp[part], resp_mask[part])
        targets = resp[part].to(policy.device)
        old.append(grpo.token_logprobs(logits, targets, temperature))
        entropy = grpo.token_entropy(logits, temperature)
        if size == len(resp):  # one chunk: the masked mean exactly as before chunking existed
            mean_entropy = grpo.masked_mean(entropy, policy_mask).item()
        else:
            entropy_sum += (entropy * policy_mask[part]).sum()
        del logits, entropy
        if ref_policy is not None:
            ref_logits = ref_policy.sequence_logits(prompt_ids[part], prompt_mask[part], resp[part], resp_mask[part])
            ref.append(grpo.token_logprobs(ref_logits, targets, temperature))
    if size != len(resp):
        mean_entropy = float(entropy_sum) / max(float(policy_mask.sum()), 1.0)
    return torch.cat(old), mean_entropy, (torch.cat(ref) if ref else None)


def _perf(
    policy: Policy, samples: int, tokens: float, elapsed: float, t_gen: float, t_update: float
) -> dict[str, float]:
    """verl's throughput names: tokens/s, samples/s, seconds per step; the update's time and peak GPU memory."""
    out = {
        "perf/throughput": tokens / max(elapsed, 1e-9),
        "perf/samples_per_s": samples / max(elapsed, 1e-9),
        "perf/time_per_step": elapsed,
        "timing_s/update": t_update,
    }
    if policy.device.type == "cuda":
        out["perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated(policy.device) / 2**30
    return out


def _check_finite(value: torch.Tensor, what: str, step: int, harness: Harness) -> None:
    """Stop before a non-finite update: the harness's rewards and settings drove it (candidate_error)."""
    if not bool(torch.isfinite(value).all()):
        config = harness.manifest.trainer.config
        raise CandidateCodeError(
            Outcome.CANDIDATE_ERROR,
            f"training diverged at step {step}: the {what} is not finite (rewards in "
            f"{list(harness.manifest.reward_range)} from {harness.reward}, settings in {config})",
            config,
        )


def update_size(policy: Policy, before: list[torch.Tensor], reference: dict[str, torch.Tensor]) -> dict[str, float]:
    """The step's parameter change and the policy's distance from the lineage's reference (L2 norms, fp32).

    `actor/update_norm` = ||theta_after - theta_before||; `actor/ref_param_distance` = ||theta - theta_ref||.
    """
    model = policy.model
    with torch.no_grad():
        if policy.kind == "tiny":  # one float per tensor, summed in Python: the numbers the tiny runs always logged
            step = sum(float((p - b).pow(2).sum()) for p, b in zip(model.parameters(), before, strict=True))
            drift = sum(float((p - reference[name]).pow(2).sum()) for name, p in model.named_parameters())
        else:  # one host sync for the whole model
            steps = [(p - b).pow(2).sum() for p, b in zip(model.parameters(), before, strict=True)]
            step = float(torch.stack(steps).sum())
            drift = float(torch.stack([(p - reference[n]).pow(2).sum() for n, p in model.named_parameters()]).sum())
    return {"actor/update_norm": step**0.5, "actor/ref_param_distance": drift**0.5}
