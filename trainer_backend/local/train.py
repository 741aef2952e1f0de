"""Local GRPO trainer: one harness, one run, top to bottom (nanochat style; issue #3).

Usage: ``python -m trainer_backend.local.train --spec <out_dir>/spec.json [--resume]``

Reads the run spec, the harness manifest and ``harness/trainer.yaml``; warm-starts (cached) or loads
``spec.init_checkpoint``; then per step: sample prompts (``harness/data.yaml`` weights over the manifest's
``data.select_by`` field), sample ``group_size`` responses each with a KV cache (an agentic harness:
``group_size`` multi-turn episodes, `trainer_backend/local/episodes.py`, one advantage per trajectory,
observation tokens masked), score them through the harness calls (reward contract checked), apply the
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
from pathlib import Path
from typing import Any

import torch

from diagnostics.schema import Rollout, Split, StopReason, append_metrics, write_rollouts
from harness.calls import RewardContractError, load_function, validate_reward
from harness.failures import CandidateCodeError, Outcome
from harness.manifest import Harness, HarnessError, load_harness
from harness.rows import RowError
from sandboxes.calls import open_calls
from trainer_backend.base import CONFIG_FILE, METRICS_FILE, RunSpec
from trainer_backend.local import LOCK_FILE, grpo, hold_folder_lock
from trainer_backend.local import artifacts as art
from trainer_backend.local import episodes as ep
from trainer_backend.local.config import LocalTrainerConfig, load_data_weights, load_trainer_config
from trainer_backend.local.model import CharTokenizer, build_model
from trainer_backend.local.vocab import VocabularyError, tokenizer_for
from trainer_backend.local.warmstart import warm_start

PPO_MINIBATCHES = 2  # one pass over the batch in two minibatches: the second is slightly off-policy
GRAD_CLIP = 1.0
VAL_SAMPLES = 4  # sampled answers per held-out prompt for val/strict_acc_avg4
ROW_FIELDS = ("prompt", "ground_truth", "data_source", "prompt_id")  # a row's other fields go to extra_info


def log(msg: str) -> None:
    """Print one line to train.log (stdout is redirected there by the backend)."""
    print(msg, flush=True)


def score_batch(
    calls: Any,
    strict: Any,
    harness: Harness,
    rows: list[dict[str, Any]],
    texts: list[str],
    split: str,
    extras: list[dict[str, Any]] | None = None,
) -> tuple[list[float], list[dict[str, float]], list[float]]:
    """Return rewards `[N]`, reward components per sample and strict scores `[N]` for decoded responses.

    `extras` (agentic: each trajectory's ``turns``, ``num_turns``, ``tool_calls``) join the reward's extra_info.
    """
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
        validate_reward(v, str(harness.reward), harness.manifest.reward_range) for v in calls.compute_rewards(batch)
    ]
    strict_scores = [float(strict(t, r["ground_truth"])) for r, t in zip(rows, texts, strict=True)]
    return [c[0] for c in checked], [c[1] for c in checked], strict_scores


def make_rollouts(
    spec: RunSpec,
    step: int,
    split: Split,
    rows: list[dict[str, Any]],
    texts: list[str],
    resp_mask: torch.Tensor,
    finished: torch.Tensor,
    rewards: list[float],
    comps: list[dict[str, float]],
    strict: list[float],
    group_ids: list[str] | list[int],
    sample_idx: list[int],
    mean_logp: list[float] | None = None,
    kept: list[bool] | None = None,
) -> list[Rollout]:
    """Build neutral rollout records for one batch (`kept`: per sample, did the filter keep its group)."""
    lengths = resp_mask.sum(-1).tolist()
    return [
        Rollout(
            run_id=spec.run_id,
            step=step,
            split=split,
            prompt_id=r["prompt_id"],
            group_id=str(group_ids[i]),
            sample_index=sample_idx[i],
            prompt=r["prompt"],
            response=texts[i],
            ground_truth=str(r["ground_truth"]),
            reward=rewards[i],
            reward_components=comps[i],
            strict_score=strict[i],
            response_tokens=int(lengths[i]),
            truncated=not bool(finished[i]),
            stop_reason=StopReason.EOS if finished[i] else StopReason.LENGTH,
            mean_logprob=None if mean_logp is None else float(mean_logp[i]),
            data_source=r["data_source"],
            kept=None if kept is None else bool(kept[i]),
        )
        for i, r in enumerate(rows)
    ]


def sequence_logits(
    model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, resp: torch.Tensor, resp_mask: torch.Tensor
) -> torch.Tensor:
    """Return response-position logits `[B, T, V]` for prompts `[B, Lp]` followed by responses `[B, T]`."""
    ids = torch.cat([prompt_ids, resp], dim=1)
    attn = torch.cat([prompt_mask, resp_mask], dim=1)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    logits: torch.Tensor = model(input_ids=ids, attention_mask=attn, position_ids=positions).logits
    lp = prompt_ids.shape[1]
    return logits[:, lp - 1 : lp - 1 + resp.shape[1]]


def validate(
    model: Any,
    tok: CharTokenizer,
    spec: RunSpec,
    harness: Harness,
    calls: Any,
    strict: Any,
    val_rows: list[dict[str, Any]],
    cfg: LocalTrainerConfig,
    step: int,
) -> dict[str, float]:
    """Evaluate the whole held-out set; write the greedy val rollouts; return `val/*` metrics.

    `val/strict_acc` is greedy; `val/strict_acc_avg4` is the mean over VAL_SAMPLES samples per prompt at the
    training temperature (the paper's Avg@k protocol), drawn with a fixed seed so every validation of a run
    sees the same random stream.
    """
    episodes = ep.settings_for(harness, tok, cfg)
    greedy = ep.sample(model, tok, episodes, calls, val_rows, cfg.max_new_tokens, 0.0, None)
    texts, mask, finished = greedy.texts, greedy.resp_mask, greedy.finished
    rewards, comps, strict_scores = score_batch(calls, strict, harness, val_rows, texts, "val", ep.reward_infos(greedy))
    ids = [r["prompt_id"] for r in val_rows]
    records = make_rollouts(
        spec, step, "val", val_rows, texts, mask, finished, rewards, comps, strict_scores, ids, [0] * len(val_rows)
    )
    write_rollouts(spec.out_dir / "rollouts" / "val" / f"step_{step}.jsonl", ep.with_trajectories(records, greedy))
    gen = torch.Generator().manual_seed(spec.seed + 7919)
    sampled = ep.sample(
        model, tok, episodes, calls, val_rows * VAL_SAMPLES, cfg.max_new_tokens, cfg.temperature, gen
    ).texts
    sampled_strict = [float(strict(x, r["ground_truth"])) for x, r in zip(sampled, val_rows * VAL_SAMPLES, strict=True)]
    return ep.metrics(greedy, "val") | {
        "val/strict_acc": statistics.fmean(strict_scores),
        "val/strict_acc_avg4": statistics.fmean(sampled_strict),
        "val/reward_mean": statistics.fmean(rewards),
        "val/truncation_rate": 1.0 - finished.float().mean().item(),
        "val/num_samples": float(len(val_rows)),
    }


def train_step(
    model: Any,
    ref_model: Any,
    opt: torch.optim.Optimizer,
    tok: CharTokenizer,
    spec: RunSpec,
    harness: Harness,
    calls: Any,
    strict: Any,
    cfg: LocalTrainerConfig,
    rows: list[dict[str, Any]],
    state: dict[str, Any],
    gen: torch.Generator,
    step: int,
) -> dict[str, float]:
    """Sample, score, filter, and update once; return the step's metrics."""
    t0 = time.time()
    group = cfg.group_size
    samples = [r for r in rows for _ in range(group)]
    batch = ep.sample(model, tok, ep.settings_for(harness, tok, cfg), calls, samples, cfg.max_new_tokens,
                      cfg.temperature, gen)  # fmt: skip
    resp, resp_mask, finished, texts = batch.resp, batch.resp_mask, batch.finished, batch.texts
    policy_mask = batch.policy_mask  # single-turn: resp_mask itself; agentic: observation tokens are 0
    t_gen = time.time() - t0
    rewards, comps, strict_scores = score_batch(calls, strict, harness, samples, texts, "train", ep.reward_infos(batch))
    group_rewards = [rewards[g * group : (g + 1) * group] for g in range(len(rows))]
    keep, state["filter"] = calls.filter_groups(group_rewards, state["filter"])
    dead = [len(set(g)) == 1 for g in group_rewards]

    group_ids = torch.arange(len(rows)).repeat_interleave(group)
    adv = grpo.group_advantages(torch.tensor(rewards), group_ids)
    keep_t = torch.tensor(keep, dtype=torch.bool).repeat_interleave(group)
    prompt_ids, prompt_mask = batch.prompt_ids, batch.prompt_mask
    train_mask = (policy_mask if cfg.mask_observations else resp_mask) * keep_t[:, None].long()
    with torch.no_grad():
        logits = sequence_logits(model, prompt_ids, prompt_mask, resp, resp_mask)
        old_logp = grpo.token_logprobs(logits, resp, cfg.temperature)
        entropy = grpo.masked_mean(grpo.token_entropy(logits, cfg.temperature), policy_mask).item()
        ref_logp = None
        if ref_model is not None:
            ref_logits = sequence_logits(ref_model, prompt_ids, prompt_mask, resp, resp_mask)
            ref_logp = grpo.token_logprobs(ref_logits, resp, cfg.temperature)
    mean_logp = ((old_logp * policy_mask).sum(-1) / policy_mask.sum(-1).clamp(min=1)).tolist()

    stats: dict[str, list[float]] = {"pg_loss": [], "kl_loss": [], "pg_clipfrac": [], "ppo_kl": [], "grad_norm": []}
    kept_groups = [g for g in range(len(rows)) if keep[g]]
    for chunk in [kept_groups[i::PPO_MINIBATCHES] for i in range(PPO_MINIBATCHES)]:
        if not chunk:
            continue
        sel = torch.cat([torch.arange(g * group, (g + 1) * group) for g in chunk])
        logits = sequence_logits(model, prompt_ids[sel], prompt_mask[sel], resp[sel], resp_mask[sel])
        logp = grpo.token_logprobs(logits, resp[sel], cfg.temperature)
        loss, pg_stats = grpo.policy_loss(logp, old_logp[sel], adv[sel], train_mask[sel], cfg.clip_low, cfg.clip_high)
        kl = grpo.kl_penalty(logp, ref_logp[sel], train_mask[sel]) if ref_logp is not None else torch.zeros(())
        opt.zero_grad(set_to_none=True)
        total = loss + cfg.kl_coef * kl
        _check_finite(total, "loss", step, harness)
        total.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        _check_finite(grad_norm, "gradient norm", step, harness)
        stats["grad_norm"].append(float(grad_norm))
        opt.step()
        stats["pg_loss"].append(loss.item())
        stats["kl_loss"].append(kl.item())
        stats["pg_clipfrac"].append(pg_stats["pg_clipfrac"])
        stats["ppo_kl"].append(pg_stats["ppo_kl"])

    lengths = resp_mask.sum(-1).float()
    gids = [f"{step}-{g}" for g in range(len(rows)) for _ in range(group)]
    write_rollouts(
        spec.out_dir / "rollouts" / "train" / f"step_{step}.jsonl",
        ep.with_trajectories(
            make_rollouts(
                spec,
                step,
                "train",
                samples,
                texts,
                resp_mask,
                finished,
                rewards,
                comps,
                strict_scores,
                gids,
                list(range(group)) * len(rows),
                mean_logp,
                [keep[g] for g in range(len(rows)) for _ in range(group)],
            ),
            batch,
        ),
    )
    metrics = ep.metrics(batch, "train") | {
        "critic/score/mean": statistics.fmean(rewards),
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
        "rollout/strict_acc": statistics.fmean(strict_scores),
        "actor/lr": cfg.lr,
        "timing_s/gen": t_gen,
        "timing_s/step": time.time() - t0,
    }
    for key, values in stats.items():
        metrics[f"actor/{key}"] = statistics.fmean(values) if values else 0.0
    for name in sorted({k for c in comps for k in c}):
        metrics[f"reward/{name}/mean"] = statistics.fmean(c.get(name, 0.0) for c in comps)
    return metrics


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
    model: Any,
    opt: torch.optim.Optimizer,
    gen: torch.Generator,
    rng: random.Random,
    state: dict[str, Any],
    tok: CharTokenizer,
    reference: dict[str, torch.Tensor],
) -> dict[str, Any]:
    """Everything a resume or an exact continuation needs: weights, vocabulary, AdamW moments, random streams,
    and the lineage's reference policy (the KL anchor, `artifacts.reference_policy`)."""
    return {
        "model": model.state_dict(),
        art.REFERENCE: reference,
        "vocab": tok.vocab,
        "optimizer": opt.state_dict(),
        "torch_rng": gen.get_state(),
        "py_rng": rng.getstate(),
        "state": state,
    }


def update_size(model: Any, before: list[torch.Tensor], reference: dict[str, torch.Tensor]) -> dict[str, float]:
    """The step's parameter change and the policy's distance from the lineage's reference (L2 norms, fp32).

    `actor/update_norm` = ||theta_after - theta_before||; `actor/ref_param_distance` = ||theta - theta_ref||.
    """
    with torch.no_grad():
        step = sum(float((p - b).pow(2).sum()) for p, b in zip(model.parameters(), before, strict=True))
        drift = sum(float((p - reference[name]).pow(2).sum()) for name, p in model.named_parameters())
    return {"actor/update_norm": step**0.5, "actor/ref_param_distance": drift**0.5}


def filter_key(harness: Harness) -> str:
    """Identify the group filter's code (entry point and file bytes): its state carries only to the same code."""
    entry = harness.group_filter
    if entry is None:
        return "none"
    path = harness.path(entry.path)
    body = path.read_bytes() if path.is_file() else b""
    return f"{entry.path}:{entry.function}:{hashlib.sha256(body).hexdigest()}"


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
    try:  # everything read from the harness: a bad value here is the candidate's, classified as such
        harness = load_harness(spec.harness_dir)
        settings = harness.manifest.trainer.settings("local")
        if settings is None:
            raise ValueError("evotrainer.yaml names no local trainer settings; add trainer.local: harness/trainer.yaml")
        cfg: LocalTrainerConfig = load_trainer_config(harness.path(settings))
        weights = load_data_weights(None if cfg.data_selection is None else harness.path(cfg.data_selection))
        select_by = harness.manifest.data.select_by
        train_rows = art.read_rows(harness.path(harness.manifest.data.train))
        val_rows = art.read_rows(harness.path(harness.manifest.data.val))
        art.sample_rows(train_rows, weights, select_by, 1, random.Random(0))  # the selection must match some rows
        if not harness.path(cfg.warmstart_data).is_file():
            raise ValueError(f"trainer.yaml field 'warmstart_data': {cfg.warmstart_data} does not exist")
        tok = tokenizer_for(harness, cfg.warmstart_data, None if continued is None else continued.get("vocab"))
        ep.settings_for(harness, tok, cfg)  # an agentic harness's call and observation tokens must be in it
    except VocabularyError as exc:
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, str(exc), exc.path) from exc
    except RowError as exc:  # a data row (harness/rows.py): the data file is at fault, not the harness folder
        where = os.path.relpath(exc.path, spec.harness_dir) if exc.path else "harness/"
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, f"invalid harness: {exc}", where) from exc
    except (HarnessError, ValueError, TypeError, KeyError) as exc:  # e.g. a data row with a malformed field
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, f"invalid harness: {exc}", "harness/") from exc
    strict = load_function(harness.root, harness.strict_eval)  # protected evaluator: trusted, in-process
    (spec.out_dir / CONFIG_FILE).write_text(
        json.dumps(
            {
                "spec": json.loads(spec.model_dump_json()),
                "trainer": cfg.model_dump(),
                "data_selection": {"select_by": select_by, "weights": weights},
                "answer": None if harness.manifest.answer is None else harness.manifest.answer.model_dump(),
                "vocab": tok.vocab,
                "ppo_minibatches": PPO_MINIBATCHES,
                "grad_clip": GRAD_CLIP,
            },
            indent=2,
        )
    )

    if parent is not None and spec.init_checkpoint is not None:  # a pilot continues its parent: no warm start
        model, cache_hit, ws_path = build_model(cfg.shape(), len(tok), spec.seed), True, spec.init_checkpoint
        model.load_state_dict(parent["model"])
    else:
        observation = None if harness.manifest.env is None else harness.manifest.env.observation
        model, cache_hit, ws_path = warm_start(
            harness.path(cfg.warmstart_data), cfg.shape(), tok, cfg.warmstart_steps, spec.seed, log, observation
        )
    # The KL reference is the lineage's starting policy, carried like the optimizer moments (issue 17): a
    # pilot or a resumed run anchors to the policy its lineage started from, not to its own first step.
    carrier = ckpt if ckpt is not None else parent if spec.init_state != "weights" else None
    where = str(spec.out_dir / art.CHECKPOINT if ckpt is not None else spec.init_checkpoint)
    ref_state = art.reference_policy(carrier, model, where, log)
    ref_model = None
    if cfg.kl_coef > 0:
        ref_model = copy.deepcopy(model).eval()
        ref_model.load_state_dict(ref_state)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.99))
    gen = torch.Generator().manual_seed(spec.seed)
    rng = random.Random(spec.seed)
    state: dict[str, Any] = {"filter": {}, "step": 0, "summary": {}, "elapsed_s": 0.0}
    state["filter_key"] = filter_key(harness)
    calls = open_calls(harness, spec.sandbox)
    try:
        if ckpt is not None:
            model.load_state_dict(ckpt["model"])
            opt.load_state_dict(ckpt["optimizer"])
            gen.set_state(ckpt["torch_rng"])
            rng.setstate(ckpt["py_rng"])
            state = ckpt["state"]
            log(f"resumed from {spec.out_dir / art.CHECKPOINT} at step {state['step']}")
        elif parent is not None and spec.init_state != "weights":
            state["filter"] = art.continue_from(
                parent, str(spec.init_checkpoint), spec.init_state, opt, gen, rng, cfg.lr, state["filter_key"], log
            )
        art.reset_after(spec.out_dir, state["step"] if ckpt is not None else -1)
        summary: dict[str, Any] = state["summary"]
        summary.setdefault("warmstart_cache_hit", float(cache_hit))
        if ckpt is None:
            metrics = validate(model, tok, spec, harness, calls, strict, val_rows, cfg, 0)
            append_metrics(spec.out_dir / METRICS_FILE, 0, metrics)
            summary["strict_acc_before"] = metrics["val/strict_acc"]
            summary["strict_acc_avg4_before"] = metrics["val/strict_acc_avg4"]
            log(f"step 0 | val/strict_acc {metrics['val/strict_acc']:.3f} | warm start {ws_path} hit={cache_hit}")
            if spec.init_checkpoint is None:  # keep the starting policy: a later rollback restarts from it
                start = training_state(model, opt, gen, rng, state, tok, ref_state)
                art.save_checkpoint(spec.out_dir, start, art.START)
        ckpt_path = spec.out_dir / art.CHECKPOINT
        for step in range(state["step"] + 1, spec.steps + 1):
            rows = art.sample_rows(train_rows, weights, select_by, cfg.prompts_per_step, rng)
            before = [p.detach().clone() for p in model.parameters()]
            metrics = train_step(model, ref_model, opt, tok, spec, harness, calls, strict, cfg, rows, state, gen, step)
            metrics.update(update_size(model, before, ref_state))
            summary.setdefault("train_reward_first", metrics["critic/score/mean"])
            summary["train_reward_last"] = metrics["critic/score/mean"]
            if step % cfg.val_every == 0 or step == spec.steps:
                metrics.update(validate(model, tok, spec, harness, calls, strict, val_rows, cfg, step))
                summary["strict_acc_after"] = metrics["val/strict_acc"]
                summary["strict_acc_avg4_after"] = metrics["val/strict_acc_avg4"]
            append_metrics(spec.out_dir / METRICS_FILE, step, metrics)
            log(
                f"step {step} | reward {metrics['critic/score/mean']:.3f} | strict {metrics['rollout/strict_acc']:.3f}"
                f" | len {metrics['response_length/mean']:.1f} | trunc {metrics['rollout/truncation_rate']:.2f}"
                f" | dead {metrics['rollout/dead_group_ratio']:.2f} | {metrics['timing_s/step']:.2f}s"
            )
            state["step"] = step
            if step % cfg.save_every == 0 or step == spec.steps:
                state["elapsed_s"] = state.get("elapsed_s", 0.0) + time.time() - t_start
                t_start = time.time()
                saved = training_state(model, opt, gen, rng, state, tok, ref_state)
                ckpt_path = art.save_checkpoint(spec.out_dir, saved)
    finally:
        calls.close()
    summary.update(
        steps_done=state["step"],
        final_checkpoint=str(ckpt_path),
        val_n=len(val_rows),
        wall_time_s=state.get("elapsed_s", 0.0) + time.time() - t_start,
    )
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
    summary: dict[str, Any] = {"run_id": spec.run_id, "log_path": str(spec.out_dir / "train.log")}
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
