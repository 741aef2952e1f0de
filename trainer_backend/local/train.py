"""Local GRPO trainer: one harness, one run, top to bottom (nanochat style).

Usage: ``python -m trainer_backend.local.train --spec <out_dir>/spec.json [--resume]``

`run` is the stages below, in order, each a function of a few records: `load_run` reads the
spec's harness, ``harness/trainer.yaml``, the data and its selection (`Loaded`); `starting_points` the
checkpoints it continues (`Start`: its own on a resume, its parent's for a pilot); `setup_policy` builds the
policy ``model:`` names (the tiny character model, or a Hugging Face causal LM on CPU or one GPU:
`policy.py`); `write_config` records the resolved settings; `initial_weights` loads the parent,
warm-starts (cached) or keeps a pretrained model as it ships (`Initial`); `new_loop` makes the optimizer, the
lineage's KL reference and the seeded random streams (`Loop`), `restore` resumes or carries over what the
parent hands on; `validate_start` scores step 0; `train_steps` runs `step.train_step` per step (prompts
sampled by ``harness/data.yaml`` weights over the manifest's ``data.select_by`` field), validates every
``val_every`` steps and at the end, and checkpoints; the sealed split is scored once. What one step and one
validation do is `step.py`'s. ``summary.json`` is written last, also for classified failures.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from diagnostics.model_card import SUMMARY_KEY as CARD_KEY
from diagnostics.model_card import ModelCard
from diagnostics.schema import (
    PEAK_RSS_GB,
    STRICT_METRIC,
    TRAIN_REWARD_METRIC,
    append_metrics,
    read_metrics,
)
from harness.calls import RewardContractError, load_function
from harness.failures import CandidateCodeError, Outcome
from harness.manifest import Harness, HarnessError, load_harness
from harness.rows import RowError
from harness.splits import SEALED_SPLIT, heldout_splits
from sandboxes.calls import open_calls
from trainer_backend.base import CONFIG_FILE, LOG_FILE, METRICS_FILE, RunSpec
from trainer_backend.local import LOCK_FILE, hold_folder_lock, interrupt, model_card
from trainer_backend.local import artifacts as art
from trainer_backend.local import episodes as ep
from trainer_backend.local.config import LocalTrainerConfig, load_data_weights, load_trainer_config
from trainer_backend.local.hf import context_length
from trainer_backend.local.memory import peak_memory, peak_rss_gb
from trainer_backend.local.policy import Policy, fast_sampler
from trainer_backend.local.setup import POLICY_KEY, PolicyError, build_policy, check_continuation, check_lengths
from trainer_backend.local.step import (
    GRAD_CLIP,
    PPO_MINIBATCHES,
    VAL_SAMPLES,
    RunContext,
    log,
    rollout_path,
    seal,
    train_step,
    update_size,
    validate,
)
from trainer_backend.local.tracking import Tracker
from trainer_backend.local.vocab import VocabularyError
from trainer_backend.local.warmstart import Evidence, WarmStart, format_probe, warm_start

SIGNAL_WARN_STEPS = 5  # all groups without reward variance for this many first steps: say so (no gradient)
CAP_WARN_SHARE = 0.5  # most responses cut by the token cap: say so
CAP_METRIC = "rollout/truncation_rate"  # a training step's share of responses cut at the token cap


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
    if metrics[CAP_METRIC] >= CAP_WARN_SHARE and not seen.get("cap_warned"):
        seen["cap_warned"] = True
        warn(
            summary,
            f"{metrics[CAP_METRIC]:.0%} of step {step}'s responses ran into the token cap without "
            "a stop token: their answers may be cut, or followed by text the evaluator rejects (check "
            "max_new_tokens, and the stop ids in config.json)",
        )


def cap_hit_share(metrics_file: Path) -> float | None:
    """The share of this run's training responses that ran into the token cap without a stop token (each step
    samples as many as the next, so it is the mean of the steps' shares; a resumed step counts once)."""
    shares = [r.data[CAP_METRIC] for r in read_metrics(metrics_file) if CAP_METRIC in r.data]
    return sum(shares) / len(shares) if shares else None


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
    """What summary.json records of a Hugging Face policy (device, dtype, stop ids)."""
    return {"device": str(policy.device), "dtype": policy.dtype_name, "stop_ids": list(policy.tok.stop_ids)}


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


@dataclass
class Start:
    """The checkpoints a run starts from: its own (a resume) and its parent's (a pilot's `init_checkpoint`)."""

    own: dict[str, Any] | None
    parent: dict[str, Any] | None

    @property
    def continued(self) -> dict[str, Any] | None:
        """The policy this run continues (its vocabulary reads the data), if any."""
        return self.own if self.own is not None else self.parent


def starting_points(spec: RunSpec, resume: bool) -> Start:
    """Load the run's own checkpoint (when resuming) and its parent's (a pilot continues it)."""
    own = art.load_checkpoint(spec.out_dir) if resume else None
    parent = None
    if spec.init_checkpoint is not None:
        parent = art.read_checkpoint(spec.init_checkpoint, "init_checkpoint")
    return Start(own, parent)


def setup_policy(loaded: Loaded, start: Start, seed: int) -> tuple[Policy, dict[str, Any], ep.EpisodeSettings | None]:
    """Build the policy the settings name, its episode settings and fast sampler; a bad value is the candidate's.

    Raises:
        CandidateCodeError: the settings, the model or the data do not fit together (names file and field).
    """
    harness, cfg = loaded.harness, loaded.cfg
    try:
        check_continuation(cfg, start.continued)
        policy, ident = build_policy(harness, cfg, start.continued, seed, log)
        episodes = ep.settings_for(harness, policy.tok, cfg)  # an agentic harness's call/observation tokens
        if policy.kind != "tiny":
            longest = check_lengths(policy.tok, cfg, harness, loaded.prompts(), context_length(policy.model))
            batch = max(
                cfg.prompts_per_step * cfg.group_size, len(loaded.val_rows) * VAL_SAMPLES, len(loaded.sealed_rows)
            )
            policy.sampler, policy.note = fast_sampler(policy.model, policy.device, batch, longest)
            if policy.note:
                log(f"sampling with the model's own generate (slower): {policy.note}")
    except VocabularyError as exc:
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, str(exc), exc.path) from exc
    except (PolicyError, ValueError) as exc:
        settings = harness.manifest.trainer.config
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, f"invalid harness: {exc}", settings) from exc
    return policy, ident, episodes


def card_of(spec: RunSpec, loaded: Loaded, start: Start, policy: Policy, ident: dict[str, Any]) -> ModelCard:
    """The model card of the policy as built (`model_card`), kept in every checkpoint; refuse a lineage's
    checkpoint that was trained on another model than the one now under the same ``model:`` path."""
    card = model_card.describe(policy, loaded.cfg.model)
    try:
        model_card.check_same_model(card, start.continued, resume_source(spec, start))
    except model_card.ModelMismatchError as exc:
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, str(exc), loaded.harness.manifest.trainer.config) from exc
    ident["checkpoint"][model_card.CHECKPOINT_KEY] = card.as_json()
    return card


def write_config(spec: RunSpec, loaded: Loaded, policy: Policy, ident: dict[str, Any]) -> None:
    """Write the run's resolved settings (`config.json`): the spec, trainer settings, data mix and policy."""
    harness, cfg = loaded.harness, loaded.cfg
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


@dataclass(frozen=True)
class Initial:
    """Where the policy's first weights came from: a parent's checkpoint, a warm start, or the model as it ships."""

    warmed: WarmStart | None
    cache_hit: bool
    source: Path | str


def initial_weights(spec: RunSpec, loaded: Loaded, policy: Policy, ident: dict[str, Any], start: Start) -> Initial:
    """Load the parent's weights (a pilot continues it: no warm start), warm-start, or keep a pretrained model."""
    harness, cfg = loaded.harness, loaded.cfg
    if start.parent is not None and spec.init_checkpoint is not None:
        policy.model.load_state_dict(start.parent["model"])
        return Initial(None, True, spec.init_checkpoint)
    if cfg.warmstart_steps > 0 or policy.kind == "tiny":
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
        return Initial(warmed, warmed.cached, warmed.path)
    return Initial(None, True, Path(cfg.model))  # a pretrained model as it ships


def resume_source(spec: RunSpec, start: Start) -> str:
    """The checkpoint file a resume or continuation reads (named in its log lines and errors)."""
    return str(spec.out_dir / art.CHECKPOINT if start.own is not None else spec.init_checkpoint)


@dataclass
class Loop:
    """The training loop's mutable objects: optimizer, KL reference, random streams and the loop state."""

    ctx: RunContext
    opt: torch.optim.Optimizer
    ref_state: dict[str, torch.Tensor]  # the lineage's reference weights (`actor/ref_param_distance`)
    ref_model: Any  # a frozen copy of them, when the KL term is on
    gen: torch.Generator  # sampling stream, on the sampling device
    rng: random.Random  # prompt-selection stream
    state: dict[str, Any]  # {filter, filter_key, step, summary, elapsed_s}: saved with every checkpoint
    identity: dict[str, Any]  # what the policy is, stored with its weights
    tracker: Tracker | None = None  # TensorBoard (and W&B) views of the metrics, opened once the step is known

    def snapshot(self) -> dict[str, Any]:
        """Everything a resume or an exact continuation needs (`training_state`)."""
        return training_state(self.ctx.policy, self.opt, self.gen, self.rng, self.state, self.identity, self.ref_state)

    def record(self, step: int, metrics: dict[str, float]) -> None:
        """Append the step's metrics to ``metrics.jsonl`` (the record) and to the live views."""
        append_metrics(self.ctx.spec.out_dir / METRICS_FILE, step, metrics)
        if self.tracker is not None:
            self.tracker.write(step, metrics)


def new_loop(ctx: RunContext, ident: dict[str, Any], start: Start) -> Loop:
    """The optimizer, the KL reference and the seeded random streams of a fresh run."""
    spec, cfg, policy = ctx.spec, ctx.cfg, ctx.policy
    carrier = start.own if start.own is not None else start.parent if spec.init_state != "weights" else None
    ref_state = art.reference_policy(carrier, policy.model, resume_source(spec, start), log)
    ref_model = None
    if cfg.kl_coef > 0:
        ref_model = copy.deepcopy(policy.model).eval()
        ref_model.load_state_dict(ref_state)
    opt = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.99))
    gen = torch.Generator(device=policy.sample_device).manual_seed(spec.seed)
    rng = random.Random(spec.seed)
    state: dict[str, Any] = {"filter": {}, "step": 0, "summary": {}, "elapsed_s": 0.0}
    state["filter_key"] = filter_key(ctx.harness)
    return Loop(ctx, opt, ref_state, ref_model, gen, rng, state, ident["checkpoint"])


def restore(loop: Loop, start: Start) -> None:
    """Resume from the run's own checkpoint, or carry over what a continued parent hands on (`spec.init_state`)."""
    spec, policy = loop.ctx.spec, loop.ctx.policy
    if start.own is not None:
        policy.model.load_state_dict(start.own["model"])
        policy.updated()
        loop.opt.load_state_dict(start.own["optimizer"])
        art.set_random_streams(start.own, loop.gen, loop.rng, resume_source(spec, start), log)
        loop.state = start.own["state"]
        log(f"resumed from {spec.out_dir / art.CHECKPOINT} at step {loop.state['step']}")
    elif start.parent is not None and spec.init_state != "weights":
        loop.state["filter"] = art.continue_from(
            start.parent, str(spec.init_checkpoint), spec.init_state, loop.opt, loop.gen, loop.rng, loop.ctx.cfg.lr,
            loop.state["filter_key"], log,
        )  # fmt: skip
    art.reset_after(spec.out_dir, loop.state["step"] if start.own is not None else -1)


def validate_start(loop: Loop, loaded: Loaded, initial: Initial) -> None:
    """Step 0 of a fresh run: validate the starting policy, report the warm start, keep the policy for rollbacks."""
    ctx, summary = loop.ctx, loop.state["summary"]
    metrics = validate(ctx, loaded.val_rows, 0, ctx.policy.sample_device)
    loop.record(0, metrics)
    summary["strict_acc_before"] = metrics[STRICT_METRIC]
    summary["strict_acc_avg4_before"] = metrics["val/strict_acc_avg4"]
    log(f"step 0 | {STRICT_METRIC} {metrics[STRICT_METRIC]:.3f} | warm start {initial.source} hit={initial.cache_hit}")
    if initial.warmed is not None:
        report_warmstart(ctx, initial.warmed, summary)
    warn_format(ctx, metrics, summary)
    if ctx.spec.init_checkpoint is None:  # keep the starting policy: a later rollback restarts from it
        art.save_checkpoint(ctx.spec.out_dir, loop.snapshot(), art.START)


def train_steps(loop: Loop, loaded: Loaded, t_start: float) -> tuple[Path, float]:
    """Train from the loop's step to `spec.steps`: select prompts, update, validate, log, checkpoint.

    Returns the last checkpoint's path and the time the current stretch of wall time started.
    """
    ctx = loop.ctx
    spec, cfg, policy, summary = ctx.spec, ctx.cfg, ctx.policy, loop.state["summary"]
    ckpt_path = spec.out_dir / art.CHECKPOINT
    for step in range(loop.state["step"] + 1, spec.steps + 1):
        if interrupt.requested() is not None:
            raise stop_here(loop, t_start)
        select_by = ctx.harness.manifest.data.select_by
        rows = art.sample_rows(loaded.train_rows, loaded.weights, select_by, cfg.prompts_per_step, loop.rng)
        before = [p.detach().clone() for p in policy.model.parameters()]
        metrics = train_step(ctx, loop.opt, loop.ref_model, rows, loop.state, loop.gen, step)
        metrics.update(update_size(policy, before, loop.ref_state))
        del before
        summary.setdefault("train_reward_first", metrics[TRAIN_REWARD_METRIC])
        summary["train_reward_last"] = metrics[TRAIN_REWARD_METRIC]
        if step % cfg.val_every == 0 or step == spec.steps:
            metrics.update(validate(ctx, loaded.val_rows, step, policy.sample_device))
            summary["strict_acc_after"] = metrics[STRICT_METRIC]
            summary["strict_acc_avg4_after"] = metrics["val/strict_acc_avg4"]
        loop.record(step, metrics)
        track_signal(metrics, loop.state, step)
        log(
            f"step {step} | reward {metrics[TRAIN_REWARD_METRIC]:.3f} | strict {metrics['rollout/strict_acc']:.3f}"
            f" | len {metrics['response_length/mean']:.1f} | trunc {metrics[CAP_METRIC]:.2f}"
            f" | dead {metrics['rollout/dead_group_ratio']:.2f} | {metrics['timing_s/step']:.2f}s"
        )
        loop.state["step"] = step
        if step % cfg.save_every == 0 or step == spec.steps:
            loop.state["elapsed_s"] = loop.state.get("elapsed_s", 0.0) + time.time() - t_start
            t_start = time.time()
            ckpt_path = art.save_checkpoint(spec.out_dir, loop.snapshot())
    return ckpt_path, t_start


def stop_here(loop: Loop, t_start: float) -> interrupt.Interrupted:
    """Save the state after the last finished step (a resume continues there) and say the trainer stops."""
    signum = interrupt.requested()
    assert signum is not None
    loop.state["elapsed_s"] = loop.state.get("elapsed_s", 0.0) + time.time() - t_start
    path = art.save_checkpoint(loop.ctx.spec.out_dir, loop.snapshot())
    return interrupt.Interrupted(loop.state["step"], signum, path)


def run(spec: RunSpec, resume: bool, t_start: float) -> dict[str, Any]:
    """Train `spec` and return the summary of a successful run (failures raise): the stages above, in order."""
    # One intra-op thread: the tiny model's matmuls gain little from more, and two runs on a 2-core box
    # with 2 OpenMP threads each spin-wait into a ~100x slowdown (measured: 0.1 s -> 15 s per step).
    torch.set_num_threads(int(os.environ.get("EVOTRAINER_TORCH_THREADS", "1")))
    start = starting_points(spec, resume)
    loaded = load_run(spec)
    policy, ident, episodes = setup_policy(loaded, start, spec.seed)
    card = card_of(spec, loaded, start, policy, ident)
    strict = load_function(loaded.harness.root, loaded.harness.strict_eval)  # protected evaluator: trusted
    write_config(spec, loaded, policy, ident)
    initial = initial_weights(spec, loaded, policy, ident, start)
    policy.updated()
    calls = open_calls(loaded.harness, spec.sandbox)
    tracker = None
    try:
        ctx = RunContext(spec, loaded.harness, loaded.cfg, calls, strict, policy, episodes)
        loop = new_loop(ctx, ident, start)
        restore(loop, start)
        loop.tracker = tracker = Tracker(spec.out_dir, spec.run_id, loop.state["step"] + (start.own is not None), log)
        summary: dict[str, Any] = loop.state["summary"]
        summary.setdefault("warmstart_cache_hit", float(initial.cache_hit))
        if start.own is None:  # a resume keeps the card its first start recorded (saved with the loop state)
            summary[CARD_KEY] = model_card.with_start(card, policy).as_json()
        summary.setdefault(CARD_KEY, card.as_json())
        if policy.kind != "tiny":
            summary.update(policy_summary(policy))
        if start.own is None:
            validate_start(loop, loaded, initial)
        ckpt_path, t_start = train_steps(loop, loaded, t_start)
        if loaded.sealed_rows and not rollout_path(ctx, SEALED_SPLIT, loop.state["step"]).exists():
            seal(ctx, loaded.sealed_rows, loop.state["step"])
    finally:
        calls.close()
        if tracker is not None:
            tracker.close()
    summary.update(
        steps_done=loop.state["step"],
        cap_hit_share=cap_hit_share(spec.out_dir / METRICS_FILE),
        final_checkpoint=str(ckpt_path),
        val_n=len(loaded.val_rows),
        sealed_n=len(loaded.sealed_rows),
        wall_time_s=loop.state.get("elapsed_s", 0.0) + time.time() - t_start,
    )
    summary.update(peak_memory(policy.device))
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
    interrupt.install()  # SIGTERM/SIGINT: stop after the current step, resumable (interrupt.py)
    t_start = time.time()
    summary: dict[str, Any] = {"run_id": spec.run_id, "log_path": str(spec.out_dir / LOG_FILE)}
    try:
        summary.update(run(spec, args.resume or spec.resume, t_start), outcome=Outcome.OK.value, message="")
    except interrupt.Interrupted as exc:  # no summary.json: the run is unfinished and resumes from its checkpoint
        interrupt.write_marker(spec.out_dir, exc)
        log(f"{exc}; `--resume` continues from it")
        return interrupt.EXIT_INTERRUPTED
    except CandidateCodeError as exc:
        summary.update(outcome=exc.outcome.value, message=exc.message, path=exc.path)
    except RewardContractError as exc:
        summary.update(outcome=Outcome.CANDIDATE_ERROR.value, message=str(exc), path=str(exc).partition(":")[0])
    except Exception as exc:  # ours: record the class for the controller, then fail loudly with the traceback
        summary.update(outcome=Outcome.INFRA_ERROR.value, message=f"{type(exc).__name__}: {exc}")
        art.write_summary(spec.out_dir, summary)
        raise
    summary.setdefault("wall_time_s", time.time() - t_start)
    summary.setdefault(PEAK_RSS_GB, peak_rss_gb())  # a failed run's peak too
    art.write_summary(spec.out_dir, summary)
    log("--- summary ---")
    for key in sorted(summary):
        value = summary[key]
        log(f"{key}: {value:.4f}" if isinstance(value, float) else f"{key}: {value}")
    return 0 if summary["outcome"] == Outcome.OK.value else 3


if __name__ == "__main__":
    sys.exit(main())
