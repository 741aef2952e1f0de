"""Local GRPO trainer: one harness, one run, top to bottom (nanochat style; issue #3).

Usage: ``python -m trainer_backend.local.train --spec <out_dir>/spec.json [--resume]``

Reads the run spec, the harness manifest and ``harness/trainer.yaml``; builds the policy its ``model:``
names (the tiny character model, or a Hugging Face causal LM on CPU or one GPU: `policy.py`, issue 30);
warm-starts (cached) or loads ``spec.init_checkpoint``; then per step: sample prompts (``harness/data.yaml``
weights over the manifest's ``data.select_by`` field), sample ``group_size`` responses each with a KV cache
(an agentic harness: ``group_size`` multi-turn episodes, `trainer_backend/local/episodes.py`, one advantage
per trajectory, observation tokens masked), score them through the harness calls (reward contract checked), apply the
harness group filter *before* advantage normalisation (filtered groups get no gradient), compute group
advantages, take PPO-style clipped updates, log verl-named metrics. Validation (greedy, whole held-out
set, protected strict evaluator imported here, trusted) runs at step 0, every
``val_every`` steps and at the end. ``summary.json`` is written last, also for classified failures.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import random
import statistics
import sys
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
    append_metrics,
    rollout_file,
    write_rollouts,
)
from harness.calls import RewardContractError, load_function, validate_reward
from harness.failures import CandidateCodeError, Outcome
from harness.manifest import Harness, HarnessError, load_harness
from harness.rows import RowError
from harness.splits import SEALED_SPLIT, heldout_splits
from sandboxes.calls import open_calls
from trainer_backend.base import CONFIG_FILE, LOG_FILE, METRICS_FILE, RunSpec
from trainer_backend.local import LOCK_FILE, grpo, hold_folder_lock
from trainer_backend.local import artifacts as art
from trainer_backend.local import episodes as ep
from trainer_backend.local.config import LocalTrainerConfig, load_data_weights, load_trainer_config
from trainer_backend.local.hf import context_length
from trainer_backend.local.policy import Policy, fast_sampler
from trainer_backend.local.setup import POLICY_KEY, PolicyError, build_policy, check_continuation, check_lengths
from trainer_backend.local.vocab import VocabularyError
from trainer_backend.local.warmstart import Evidence, WarmStart, format_probe, warm_start

PPO_MINIBATCHES = 2  # one pass over the batch in two minibatches: the second is slightly off-policy
LOGP_CHUNK = 16  # sequences per no-grad scoring forward of a Hugging Face model (bounds [B, T, V] logits)
SIGNAL_WARN_STEPS = 5  # all groups without reward variance for this many first steps: say so (no gradient)
CAP_WARN_SHARE = 0.5  # most responses cut by the token cap: say so
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
    if policy.kind != "tiny":  # verl's names for throughput (issue 30); the tiny model's metrics stay as they were
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


def warn(summary: dict[str, Any], text: str) -> None:
    """Say something the user must know about the run: in train.log, and in summary.json's ``warnings``."""
    log(f"WARNING: {text}")
    warnings = summary.setdefault("warnings", [])
    if text not in warnings:
        warnings.append(text)


def warn_format(ctx: RunContext, metrics: dict[str, float], summary: dict[str, Any]) -> None:
    """Say plainly when the starting policy never writes the answer format (GRPO then gets no signal)."""
    rate = metrics.get("val/format_rate")
    if rate is None or rate > 0:
        return
    answer = ctx.harness.manifest.answer
    assert answer is not None  # a format rate exists only with a declared answer protocol
    cfg = ctx.cfg
    fix = (
        f"warm start it on worked solutions (warmstart_steps, now {cfg.warmstart_steps}; warmstart_data "
        f"{cfg.warmstart_data}), or ask for the format in prompt_template"
    )
    warn(
        summary,
        f"the starting policy wrote the answer format ({answer.render('N')}) in none of "
        f"{int(metrics['val/num_samples'])} held-out responses: every reward group will be flat and GRPO learns "
        f"nothing; {fix}",
    )


def report_warmstart(ctx: RunContext, warmed: WarmStart, summary: dict[str, Any]) -> None:
    """Record what the warm start reached (steps, answer-format rate); say plainly when it fell short."""
    summary["warmstart_steps"] = float(warmed.steps)
    if warmed.format_rate is None:
        return
    summary["warmstart_format_rate"] = warmed.format_rate
    if warmed.reached:
        return
    answer = ctx.harness.manifest.answer
    assert answer is not None  # a format rate exists only with a declared answer protocol
    cfg = ctx.cfg
    warn(
        summary,
        f"the warm start stopped at its cap ({warmed.steps} steps, warmstart_max_steps) with the answer format "
        f"({answer.render('N')}) in {warmed.format_rate:.0%} of greedy responses to training prompts, below "
        f"warmstart_min_format {cfg.warmstart_min_format}; check that {cfg.warmstart_data}'s responses are written "
        "in that format, add rows, or raise warmstart_max_steps",
    )


def track_signal(metrics: dict[str, float], state: dict[str, Any], step: int) -> None:
    """Warn once when the first steps carry no gradient at all, and once when most responses hit the token cap."""
    summary, seen = state["summary"], state.setdefault("signal", {})
    if step <= SIGNAL_WARN_STEPS and metrics["rollout/dead_group_ratio"] < 1.0:
        seen["had_variance"] = True
    if step == SIGNAL_WARN_STEPS and not seen.get("had_variance"):
        warn(
            summary,
            f"in every one of steps 1-{step} each reward group's samples all got the same reward: no gradient "
            "(the policy never or always succeeds; check the format warning, the reward, or the data mix)",
        )
    if metrics["rollout/truncation_rate"] >= CAP_WARN_SHARE and not seen.get("cap_warned"):
        seen["cap_warned"] = True
        warn(
            summary,
            f"{metrics['rollout/truncation_rate']:.0%} of step {step}'s responses ran into the token cap without "
            "a stop token: their answers may be cut, or followed by text the evaluator rejects (check "
            "max_new_tokens, and the stop ids in config.json)",
        )


def policy_facts(policy: Policy, identity: dict[str, Any]) -> dict[str, Any]:
    """What config.json records of a Hugging Face policy: the model, its tokens, the device and the sampler."""
    tok = policy.tok
    return {
        **identity["checkpoint"][POLICY_KEY],
        "device": str(policy.device),
        "dtype": policy.dtype_name,
        "stop_ids": list(tok.stop_ids),
        "stop_tokens": [tok.tokenizer.convert_ids_to_tokens(i) for i in tok.stop_ids],
        "end_id": tok.end_id,
        "pad_id": tok.pad_id,
        "prompt_format": tok.prompt_format,
        "sampler": "fast" if policy.sampler is not None else f"generate ({policy.note})",
    }


def policy_line(policy: Policy) -> str:
    """One train.log line: stop tokens, pad, sampler."""
    tok = policy.tok
    stops = ", ".join(f"{i} {tok.tokenizer.convert_ids_to_tokens(i)!r}" for i in tok.stop_ids)
    sampler = "fast static-cache sampler" if policy.sampler is not None else f"the model's generate ({policy.note})"
    return f"stop ids {stops}; pad id {tok.pad_id}; prompt format {tok.prompt_format}; sampling with {sampler}"


def policy_summary(policy: Policy) -> dict[str, Any]:
    """What summary.json records of a Hugging Face policy (issue 30/32: device, dtype, stop ids)."""
    return {"device": str(policy.device), "dtype": policy.dtype_name, "stop_ids": list(policy.tok.stop_ids)}


def _check_finite(value: torch.Tensor, what: str, step: int, harness: Harness) -> None:
    """Stop before a non-finite update: the harness's rewards and settings drove it (issue 13: candidate_error)."""
    if not bool(torch.isfinite(value).all()):
        config = harness.manifest.trainer.config
        raise CandidateCodeError(
            Outcome.CANDIDATE_ERROR,
            f"training diverged at step {step}: the {what} is not finite (rewards in "
            f"{list(harness.manifest.reward_range)} from {harness.reward}, settings in {config})",
            config,
        )


def training_state(
    policy: Policy,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    rng: random.Random,
    state: dict[str, Any],
    identity: dict[str, Any],
    reference: dict[str, torch.Tensor],
) -> dict[str, Any]:
    """Everything a resume or an exact continuation needs: weights, what the policy is (the tiny model's
    vocabulary; a Hugging Face model's reference), AdamW moments, random streams (and the device they
    belong to), and the lineage's reference policy (the KL anchor, `artifacts.reference_policy`)."""
    return {
        "model": policy.model.state_dict(),
        art.REFERENCE: reference,
        **identity,
        "optimizer": opt.state_dict(),
        "torch_rng": gen.get_state(),
        **({} if gen.device.type == "cpu" else {art.RNG_DEVICE: gen.device.type}),
        "py_rng": rng.getstate(),
        "state": state,
    }


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


def filter_key(harness: Harness) -> str:
    """Identify the group filter's code (entry point and file bytes): its state carries only to the same code."""
    entry = harness.group_filter
    if entry is None:
        return "none"
    path = harness.path(entry.path)
    body = path.read_bytes() if path.is_file() else b""
    return f"{entry.path}:{entry.function}:{hashlib.sha256(body).hexdigest()}"


@dataclass
class Loaded:
    """What `load_run` read from the harness before any training: settings, data and the policy's make-up."""

    harness: Harness
    cfg: LocalTrainerConfig
    weights: dict[str, float] | None
    train_rows: list[dict[str, Any]]
    val_rows: list[dict[str, Any]]  # the selection split: every validation, hence every decision, reads it
    sealed_rows: list[dict[str, Any]]  # the sealed test split: scored once, at the run's end (harness/splits.py)
    heldout_files: dict[str, list[dict[str, Any]]]  # each held-out file's rows as read (both splits)

    def prompts(self) -> list[tuple[str, int, str]]:
        """`(file, row number, prompt)` of every training and held-out row."""
        rows = {self.harness.manifest.data.train: self.train_rows, **self.heldout_files}
        return [(file, i, r["prompt"]) for file, part in rows.items() for i, r in enumerate(part, 1)]


def load_run(spec: RunSpec) -> Loaded:
    """Read and check everything the harness supplies; a bad value is the candidate's (classified as such).

    Raises:
        CandidateCodeError: the harness, its settings or its data are invalid (names file and field).
    """
    try:
        harness = load_harness(spec.harness_dir)
        settings = harness.manifest.trainer.settings("local")
        if settings is None:
            raise ValueError("evotrainer.yaml names no local trainer settings; add trainer.local: harness/trainer.yaml")
        cfg: LocalTrainerConfig = load_trainer_config(harness.path(settings), harness.root)
        weights = load_data_weights(None if cfg.data_selection is None else harness.path(cfg.data_selection))
        select_by = harness.manifest.data.select_by
        train_rows = art.read_rows(harness.path(harness.manifest.data.train))
        heldout: dict[str, list[dict[str, Any]]] = {}
        val_rows, sealed_rows = heldout_splits(
            harness.manifest.data, lambda rel: heldout.setdefault(rel, art.read_rows(harness.path(rel)))
        )
        art.sample_rows(train_rows, weights, select_by, 1, random.Random(0))  # the selection must match some rows
        if not harness.path(cfg.warmstart_data).is_file() and cfg.warmstart_steps > 0:
            raise ValueError(f"trainer.yaml field 'warmstart_data': {cfg.warmstart_data} does not exist")
    except RowError as exc:  # a data row (harness/rows.py): the data file is at fault, not the harness folder
        where = os.path.relpath(exc.path, spec.harness_dir) if exc.path else "harness/"
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, f"invalid harness: {exc}", where) from exc
    except (HarnessError, ValueError, TypeError, KeyError) as exc:  # e.g. a data row with a malformed field
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, f"invalid harness: {exc}", "harness/") from exc
    return Loaded(harness, cfg, weights, train_rows, val_rows, sealed_rows, heldout)


def run(spec: RunSpec, resume: bool, t_start: float) -> dict[str, Any]:
    """Train `spec` and return the summary of a successful run (failures raise)."""
    # One intra-op thread: the tiny model's matmuls gain little from more, and two runs on a 2-core box
    # with 2 OpenMP threads each spin-wait into a ~100x slowdown (measured: 0.1 s -> 15 s per step).
    torch.set_num_threads(int(os.environ.get("EVOTRAINER_TORCH_THREADS", "1")))
    ckpt = art.load_checkpoint(spec.out_dir) if resume else None
    parent = None
    if spec.init_checkpoint is not None:
        parent = torch.load(spec.init_checkpoint, map_location="cpu", weights_only=False)
    continued = ckpt if ckpt is not None else parent  # a policy this run continues: its vocabulary reads the data
    loaded = load_run(spec)
    harness, cfg, val_rows = loaded.harness, loaded.cfg, loaded.val_rows
    try:
        check_continuation(cfg, continued)
        policy, ident = build_policy(harness, cfg, continued, spec.seed, log)
        episodes = ep.settings_for(harness, policy.tok, cfg)  # an agentic harness's call/observation tokens
        if policy.kind != "tiny":
            longest = check_lengths(policy.tok, cfg, harness, loaded.prompts(), context_length(policy.model))
            batch = max(cfg.prompts_per_step * cfg.group_size, len(val_rows) * VAL_SAMPLES, len(loaded.sealed_rows))
            policy.sampler, policy.note = fast_sampler(policy.model, policy.device, batch, longest)
            if policy.note:
                log(f"sampling with the model's own generate (slower): {policy.note}")
    except VocabularyError as exc:
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, str(exc), exc.path) from exc
    except (PolicyError, ValueError) as exc:
        settings = harness.manifest.trainer.config
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, f"invalid harness: {exc}", settings) from exc
    strict = load_function(harness.root, harness.strict_eval)  # protected evaluator: trusted, in-process
    (spec.out_dir / CONFIG_FILE).write_text(
        json.dumps(
            {
                "spec": json.loads(spec.model_dump_json()),
                "trainer": cfg.model_dump(),
                "data_selection": {"select_by": harness.manifest.data.select_by, "weights": loaded.weights},
                "answer": None if harness.manifest.answer is None else harness.manifest.answer.model_dump(),
                **({"vocab": policy.tok.vocab} if policy.kind == "tiny" else {POLICY_KEY: policy_facts(policy, ident)}),
                "ppo_minibatches": PPO_MINIBATCHES,
                "grad_clip": GRAD_CLIP,
            },
            indent=2,
        )
    )
    if policy.kind != "tiny":
        log(f"policy: {cfg.model} on {policy.device} ({policy.dtype_name}); {policy_line(policy)}")

    warmed: WarmStart | None = None
    if parent is not None and spec.init_checkpoint is not None:  # a pilot continues its parent: no warm start
        cache_hit, ws_path = True, spec.init_checkpoint
        policy.model.load_state_dict(parent["model"])
    elif cfg.warmstart_steps > 0 or policy.kind == "tiny":
        observation = None if harness.manifest.env is None else harness.manifest.env.observation
        answer = harness.manifest.answer  # single-turn runs with an answer protocol warm-start on evidence
        probe = None
        if answer is not None and observation is None:
            probe = format_probe(policy, [r["prompt"] for r in loaded.train_rows], answer.extract, cfg.max_new_tokens)
        warmed = warm_start(
            harness.path(cfg.warmstart_data), policy, ident["warmstart"], cfg.warmstart_steps, spec.seed, log,
            observation, cfg.warmstart_batch_size, cfg.warmstart_lr,
            Evidence(probe, cfg.warmstart_min_format, cfg.warmstart_max_steps),
        )  # fmt: skip
        cache_hit, ws_path = warmed.cached, warmed.path
    else:
        cache_hit, ws_path = True, Path(cfg.model)  # a pretrained model as it ships
    policy.updated()
    # The KL reference is the lineage's starting policy, carried like the optimizer moments (issue 17): a
    # pilot or a resumed run anchors to the policy its lineage started from, not to its own first step.
    carrier = ckpt if ckpt is not None else parent if spec.init_state != "weights" else None
    where = str(spec.out_dir / art.CHECKPOINT if ckpt is not None else spec.init_checkpoint)
    ref_state = art.reference_policy(carrier, policy.model, where, log)
    ref_model = None
    if cfg.kl_coef > 0:
        ref_model = copy.deepcopy(policy.model).eval()
        ref_model.load_state_dict(ref_state)
    opt = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.99))
    gen_device = policy.sample_device
    gen = torch.Generator(device=gen_device).manual_seed(spec.seed)
    rng = random.Random(spec.seed)
    state: dict[str, Any] = {"filter": {}, "step": 0, "summary": {}, "elapsed_s": 0.0}
    state["filter_key"] = filter_key(harness)
    calls = open_calls(harness, spec.sandbox)
    ctx = RunContext(spec, harness, cfg, calls, strict, policy, episodes)
    save = ident["checkpoint"]
    try:
        if ckpt is not None:
            policy.model.load_state_dict(ckpt["model"])
            policy.updated()
            opt.load_state_dict(ckpt["optimizer"])
            art.set_random_streams(ckpt, gen, rng, where, log)
            state = ckpt["state"]
            log(f"resumed from {spec.out_dir / art.CHECKPOINT} at step {state['step']}")
        elif parent is not None and spec.init_state != "weights":
            state["filter"] = art.continue_from(
                parent, str(spec.init_checkpoint), spec.init_state, opt, gen, rng, cfg.lr, state["filter_key"], log
            )
        art.reset_after(spec.out_dir, state["step"] if ckpt is not None else -1)
        summary: dict[str, Any] = state["summary"]
        summary.setdefault("warmstart_cache_hit", float(cache_hit))
        if policy.kind != "tiny":
            summary.update(policy_summary(policy))
        if ckpt is None:
            metrics = validate(ctx, val_rows, 0, gen_device)
            append_metrics(spec.out_dir / METRICS_FILE, 0, metrics)
            summary["strict_acc_before"] = metrics[STRICT_METRIC]
            summary["strict_acc_avg4_before"] = metrics["val/strict_acc_avg4"]
            log(f"step 0 | val/strict_acc {metrics['val/strict_acc']:.3f} | warm start {ws_path} hit={cache_hit}")
            if warmed is not None:
                report_warmstart(ctx, warmed, summary)
            warn_format(ctx, metrics, summary)
            if spec.init_checkpoint is None:  # keep the starting policy: a later rollback restarts from it
                start = training_state(policy, opt, gen, rng, state, save, ref_state)
                art.save_checkpoint(spec.out_dir, start, art.START)
        ckpt_path = spec.out_dir / art.CHECKPOINT
        for step in range(state["step"] + 1, spec.steps + 1):
            select_by = harness.manifest.data.select_by
            rows = art.sample_rows(loaded.train_rows, loaded.weights, select_by, cfg.prompts_per_step, rng)
            before = [p.detach().clone() for p in policy.model.parameters()]
            metrics = train_step(ctx, opt, ref_model, rows, state, gen, step)
            metrics.update(update_size(policy, before, ref_state))
            del before
            summary.setdefault("train_reward_first", metrics[TRAIN_REWARD_METRIC])
            summary["train_reward_last"] = metrics[TRAIN_REWARD_METRIC]
            if step % cfg.val_every == 0 or step == spec.steps:
                metrics.update(validate(ctx, val_rows, step, gen_device))
                summary["strict_acc_after"] = metrics[STRICT_METRIC]
                summary["strict_acc_avg4_after"] = metrics["val/strict_acc_avg4"]
            append_metrics(spec.out_dir / METRICS_FILE, step, metrics)
            track_signal(metrics, state, step)
            log(
                f"step {step} | reward {metrics['critic/score/mean']:.3f} | strict {metrics['rollout/strict_acc']:.3f}"
                f" | len {metrics['response_length/mean']:.1f} | trunc {metrics['rollout/truncation_rate']:.2f}"
                f" | dead {metrics['rollout/dead_group_ratio']:.2f} | {metrics['timing_s/step']:.2f}s"
            )
            state["step"] = step
            if step % cfg.save_every == 0 or step == spec.steps:
                state["elapsed_s"] = state.get("elapsed_s", 0.0) + time.time() - t_start
                t_start = time.time()
                saved = training_state(policy, opt, gen, rng, state, save, ref_state)
                ckpt_path = art.save_checkpoint(spec.out_dir, saved)
        if loaded.sealed_rows and not rollout_path(ctx, SEALED_SPLIT, state["step"]).exists():
            seal(ctx, loaded.sealed_rows, state["step"])
    finally:
        calls.close()
    summary.update(
        steps_done=state["step"],
        final_checkpoint=str(ckpt_path),
        val_n=len(val_rows),
        sealed_n=len(loaded.sealed_rows),
        wall_time_s=state.get("elapsed_s", 0.0) + time.time() - t_start,
    )
    if policy.device.type == "cuda":
        summary["peak_memory_gb"] = torch.cuda.max_memory_allocated(policy.device) / 2**30
    return summary


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the spec, then write summary.json (ok or classified failure) and the summary block."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, required=True, help="spec.json written by trainer_backend.local.submit")
    parser.add_argument("--resume", action="store_true", help="continue from checkpoints/last.pt if present")
    parser.add_argument("--lock", action="store_true", help="take the run folder's lock (a Ray job's trainer)")
    args = parser.parse_args(argv)
    spec = RunSpec.model_validate_json(args.spec.read_text())
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    if args.lock and not hold_folder_lock(spec.out_dir):
        log(f"another trainer holds {spec.out_dir / LOCK_FILE}: not starting a second one in this folder")
        return 3
    t_start = time.time()
    summary: dict[str, Any] = {"run_id": spec.run_id, "log_path": str(spec.out_dir / LOG_FILE)}
    try:
        summary.update(run(spec, args.resume or spec.resume, t_start), outcome=Outcome.OK.value, message="")
    except CandidateCodeError as exc:
        summary.update(outcome=exc.outcome.value, message=exc.message, path=exc.path)
    except RewardContractError as exc:
        summary.update(outcome=Outcome.CANDIDATE_ERROR.value, message=str(exc), path=str(exc).partition(":")[0])
    except Exception as exc:  # ours: record the class for the controller, then fail loudly with the traceback
        summary.update(outcome=Outcome.INFRA_ERROR.value, message=f"{type(exc).__name__}: {exc}")
        art.write_summary(spec.out_dir, summary)
        raise
    summary.setdefault("wall_time_s", time.time() - t_start)
    art.write_summary(spec.out_dir, summary)
    log("--- summary ---")
    for key in sorted(summary):
        value = summary[key]
        log(f"{key}: {value:.4f}" if isinstance(value, float) else f"{key}: {value}")
    return 0 if summary["outcome"] == Outcome.OK.value else 3


if __name__ == "__main__":
    sys.exit(main())
