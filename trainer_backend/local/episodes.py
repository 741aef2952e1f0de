"""What the local trainer samples for a batch of rows: one response each, or, for an agentic harness, one
multi-turn episode each.

`sample` is the one entry point. A single-turn harness gets exactly what the trainer always sampled (one
`generate` call; the same random stream). An agentic harness (``env:`` in the manifest, `harness/env.py`)
gets episodes, batched across the live ones:

1. every episode's context is ``<bos> prompt``; its environment is ``make_env(row)`` (the row without its
   ``ground_truth``: the answer the judge compares with never reaches candidate code that shapes what the
   policy sees), opened through the harness calls (in the sandbox when the run is sandboxed);
2. each turn, the policy generates for every live episode until ``call_end`` (a special token), EOS, or
   ``max_turn_tokens``;
3. a turn ending in ``call_end`` is a call: parsed with `harness.env.parse_call`, run in its episode's
   environment (ONE `env_calls` request for the turn's calls of all episodes), and the rendered
   observation is appended to the context; a call the protocol cannot read (no match, unknown tool, bad
   arguments) is answered with the problem as a failed observation, without calling the environment;
4. up to ``max_turns`` turns; a call written in the last allowed turn is not run.

Stop reasons (`diagnostics.schema.StopReason`), one per trajectory:

- ``answer``: a turn without a call (ended by EOS) ended the episode, after at least one call or with an
  answer the declared protocol reads; also an environment that ends the episode (``done``) on a
  successful call;
- ``abandon``: the policy ended its first turn (EOS) without any call and without an answer the declared
  answer protocol can read (no ``answer:`` declared: a blank turn). With no call made this is always a
  one-turn episode;
- ``length``: a turn hit ``max_turn_tokens`` before ``call_end`` or EOS (the trajectory is truncated);
- ``max_turns``: ``max_turns`` turns went by without an answer;
- ``tool_error``: the environment ended the episode on a failed call (``done`` with ``success: False``);
- ``echo_trap``: the policy wrote the same call (same tool, same arguments text) `ECHO_TRAP_REPEATS`
  times in a row; the repeat is not run and the episode is cut.

What the policy reads of an observation: the template's own text, then the result with every structural
text removed (``call_end`` and the template's parts: a result cannot forge the end of its observation or a
call), characters outside the vocabulary dropped, at most `MAX_OBSERVATION_TOKENS` tokens. The trajectory
text (``solution_str`` of the reward, the text the strict evaluator scores) is the decoded trajectory:
the policy's turns and the observations exactly as the policy read them. Its tokens: every policy token is
trained; observation tokens are context, masked out of the loss unless ``mask_observations: false``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from diagnostics.schema import Rollout, StopReason, Turn
from harness.answers import AnswerProtocol
from harness.calls import HarnessCalls
from harness.env import EnvContractError, EnvResult, EnvSpec, ToolCall, parse_call, validate_env_result
from harness.failures import CandidateCodeError, Outcome
from harness.manifest import Harness
from trainer_backend.local.config import LocalTrainerConfig
from trainer_backend.local.model import TokenizerError, left_pad
from trainer_backend.local.policy import Policy, Tokenizer

ECHO_TRAP_REPEATS = 3  # the third identical call in a row ends the episode (two tries are a retry, not a trap)
MAX_OBSERVATION_TOKENS = 64  # result tokens one observation may add to the context
MAX_RECORDED_TOOL_CHARS = 64  # a tool name the policy wrote, as recorded (it may write anything)
MAX_RECORDED_ARGUMENT_CHARS = 500


@dataclass(frozen=True)
class EpisodeSettings:
    """An agentic harness's episode rules, resolved against the policy's tokenizer once per run."""

    spec: EnvSpec
    entry: str  # `harness/env.py:make_env`, for messages
    answer: AnswerProtocol | None
    max_turns: int
    max_turn_tokens: int
    call_end_id: int
    obs_prefix: tuple[int, ...]
    obs_suffix: tuple[int, ...]
    structural: tuple[str, ...]  # texts removed from a result before it enters the context

    @classmethod
    def of(cls, harness: Harness, tok: Tokenizer, max_turns: int, max_turn_tokens: int) -> EpisodeSettings:
        """Resolve the manifest's `env:` section for `tok`.

        Raises:
            ValueError: ``call_end`` is not one token of the vocabulary, or the observation template holds a
                character the vocabulary lacks (a policy continued from another harness's vocabulary).
        """
        spec, entry = harness.manifest.env, harness.env
        assert spec is not None and entry is not None, "EpisodeSettings of a single-turn harness"
        call_end = tok.id_of(spec.call_end)
        if call_end is None:
            raise ValueError(
                f"env.call_end {spec.call_end!r} is not one token of the policy's vocabulary: a turn stops on it, so "
                "it must be one (for a Hugging Face tokenizer: add it with tokenizer.add_tokens and resize the "
                "model's embeddings, then save_pretrained)"
            )
        if call_end in tok.stop_ids:
            raise ValueError(f"env.call_end {spec.call_end!r} is one of the tokenizer's stop tokens; pick another")
        prefix, _, suffix = spec.observation.partition("{result}")
        try:
            ids = tuple(tok.encode(prefix)), tuple(tok.encode(suffix))
        except TokenizerError as exc:
            raise ValueError(f"env.observation {spec.observation!r}: {exc}") from None
        structural = tuple(t for t in (spec.call_end, prefix, suffix) if t)
        return cls(spec, str(entry), harness.manifest.answer, max_turns, max_turn_tokens, call_end, *ids, structural)


def settings_for(harness: Harness, tok: Tokenizer, cfg: LocalTrainerConfig) -> EpisodeSettings | None:
    """The episode rules of an agentic harness, None for a single-turn one (see `EpisodeSettings.of`)."""
    if harness.manifest.env is None:
        return None
    return EpisodeSettings.of(harness, tok, cfg.max_turns, cfg.max_turn_tokens)


@dataclass
class Trajectory:
    """One episode: its tokens after the prompt, which of them the policy wrote, its turns and stop reason."""

    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)
    policy: list[int] = field(default_factory=list)  # per token of `ids`: 1 policy, 0 observation
    pieces: list[str] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    stop: StopReason | None = None
    tool_calls: int = 0  # calls the policy wrote (run, failed, cut as an echo, or past the turn budget)
    last_call: tuple[str, str] | None = None
    repeats: int = 0

    @property
    def text(self) -> str:
        """The trajectory text: policy turns and observations as the policy read them."""
        return "".join(self.pieces)

    def add(self, ids: list[int], text: str, policy: bool) -> None:
        """Append tokens to the trajectory (and the context)."""
        self.ids += ids
        self.policy += [int(policy)] * len(ids)
        self.pieces.append(text)

    def reward_info(self) -> dict[str, Any]:
        """What the reward gets in `extra_info` besides the row: the turns, their count and the calls."""
        return {"turns": [asdict(t) for t in self.turns], "num_turns": len(self.turns), "tool_calls": self.tool_calls}


@dataclass(frozen=True)
class Sampled:
    """A sampled batch, as the update needs it. Shapes: B rows, Lp prompt width, T response width.

    `prompt_ids`/`prompt_mask` `[B, Lp]` left-padded; `resp`/`resp_mask` `[B, T]` (1 = a real token, policy
    or observation); `policy_mask` `[B, T]` (1 = a token the policy generated); `finished` `[B]` (False = cut
    by the token cap); `texts` the decoded responses (trajectory texts); `trajectories` None single-turn.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    resp: torch.Tensor
    resp_mask: torch.Tensor
    policy_mask: torch.Tensor
    finished: torch.Tensor
    texts: list[str]
    trajectories: list[Trajectory] | None = None


def sample(
    policy: Policy,
    episodes: EpisodeSettings | None,
    calls: HarnessCalls,
    rows: list[dict[str, Any]],
    max_new_tokens: int,
    temperature: float,
    generator: torch.Generator | None,
) -> Sampled:
    """Sample one response per row (single-turn, `episodes` None) or one episode per row (agentic)."""
    tok = policy.tok
    prompts = [policy.prompt_ids(r["prompt"]) for r in rows]
    if episodes is None:
        resp, resp_mask, finished = policy.generate(prompts, max_new_tokens, temperature, generator)
        prompt_ids, prompt_mask = left_pad(prompts, tok.pad_id)
        texts = [tok.decode(x.tolist()) for x in resp]
        return Sampled(prompt_ids, prompt_mask, resp, resp_mask, resp_mask, finished, texts)
    trajectories = run_episodes(policy, episodes, calls, rows, prompts, temperature, generator)
    return batch_of(trajectories, tok.pad_id)


def run_episodes(
    policy: Policy,
    settings: EpisodeSettings,
    calls: HarnessCalls,
    rows: list[dict[str, Any]],
    prompts: list[list[int]],
    temperature: float,
    generator: torch.Generator | None,
) -> list[Trajectory]:
    """Play one episode per row, all live episodes batched per turn (see the module docstring).

    Raises:
        CandidateCodeError: the environment failed (raised, hung, returned something off the contract).
    """
    tok = policy.tok
    trajectories = [Trajectory(p) for p in prompts]
    env_ids = calls.open_episodes([{k: v for k, v in r.items() if k != "ground_truth"} for r in rows])
    try:
        for turn in range(settings.max_turns):
            live = [i for i, t in enumerate(trajectories) if t.stop is None]
            if not live:
                break
            contexts = [trajectories[i].prompt_ids + trajectories[i].ids for i in live]
            resp, mask, finished = policy.generate(
                contexts, settings.max_turn_tokens, temperature, generator, (settings.call_end_id,)
            )
            last = turn == settings.max_turns - 1
            pending: list[tuple[int, ToolCall, str, int]] = []
            for row, i in enumerate(live):
                tokens = resp[row, : int(mask[row].sum())].tolist()
                wants = _policy_turn(trajectories[i], tokens, bool(finished[row]), tok, settings, last)
                if wants is not None:
                    pending.append((i, *wants))
            requests = [(env_ids[i], c.tool, c.arguments or {}) for i, c, _, _ in pending]
            results = calls.env_calls(requests) if requests else []
            for (i, made, text, n), value in zip(pending, results, strict=True):
                result = _checked(value, settings)
                _observe(trajectories[i], made.tool, made.raw_arguments, text, n, result, tok, settings)
        for trajectory in trajectories:
            if trajectory.stop is None:
                trajectory.stop = StopReason.MAX_TURNS
    finally:
        calls.close_episodes(env_ids)
    return trajectories


def _policy_turn(
    t: Trajectory, tokens: list[int], finished: bool, tok: Tokenizer, settings: EpisodeSettings, last: bool
) -> tuple[ToolCall, str, int] | None:
    """Record one generated turn; return the call to run `(call, turn text, policy tokens)`, else None."""
    text = tok.decode(tokens)
    t.add(tokens, text, policy=True)
    n = len(tokens)
    if not finished or tokens[-1] != settings.call_end_id:
        t.turns.append(Turn(text=text, policy_tokens=n))
        if not finished:
            t.stop = StopReason.LENGTH
        elif t.tool_calls or _answered(text, settings.answer):
            t.stop = StopReason.ANSWER
        else:
            t.stop = StopReason.ABANDON
        return None
    t.tool_calls += 1
    call = parse_call(text, settings.spec)
    key = (call.tool, call.raw_arguments.strip()) if call is not None else ("", text.strip())
    t.repeats = t.repeats + 1 if key == t.last_call else 1
    t.last_call = key
    tool = None if call is None else call.tool
    raw = "" if call is None else call.raw_arguments
    if t.repeats >= ECHO_TRAP_REPEATS or last:
        t.turns.append(_turn(text, tool, raw, n))
        t.stop = StopReason.ECHO_TRAP if t.repeats >= ECHO_TRAP_REPEATS else StopReason.MAX_TURNS
        return None
    if call is None or call.arguments is None:
        problem = call.problem if call is not None else f"no call read; write {settings.spec.call_pattern}"
        _observe(t, tool, raw, text, n, EnvResult(problem, success=False), tok, settings)
        return None
    return call, text, n


def _answered(text: str, answer: AnswerProtocol | None) -> bool:
    return bool(text.strip()) if answer is None else answer.extract(text) is not None


def _turn(text: str, tool: str | None, raw: str, n: int, **result: Any) -> Turn:
    tool = None if tool is None else tool[:MAX_RECORDED_TOOL_CHARS]
    return Turn(text=text, tool=tool, arguments=raw[:MAX_RECORDED_ARGUMENT_CHARS], policy_tokens=n, **result)


def _checked(value: object, settings: EpisodeSettings) -> EnvResult:
    """Validate one raw `env.call` result; a value off the contract fails the candidate, naming the file."""
    try:
        return validate_env_result(value, settings.entry)
    except Exception as exc:  # EnvContractError, or a candidate object whose methods raise (in-process)
        message = str(exc) if isinstance(exc, EnvContractError) else f"{settings.entry} returned an unreadable value"
        raise CandidateCodeError(Outcome.CANDIDATE_ERROR, message, settings.entry.partition(":")[0]) from exc


def _observe(
    t: Trajectory,
    tool: str | None,
    raw: str,
    text: str,
    n: int,
    result: EnvResult,
    tok: Tokenizer,
    settings: EpisodeSettings,
) -> None:
    """Append a call's observation to the context and record the turn; an env's `done` ends the episode."""
    body = result.result
    for piece in settings.structural:
        body = body.replace(piece, "")
    ids = [*settings.obs_prefix, *tok.encode_known(body)[:MAX_OBSERVATION_TOKENS], *settings.obs_suffix]
    t.add(ids, tok.decode(ids), policy=False)
    t.turns.append(_turn(text, tool, raw, n, result=result.result, success=result.success, observation_tokens=len(ids)))
    if result.done:
        t.stop = StopReason.ANSWER if result.success else StopReason.TOOL_ERROR


def batch_of(trajectories: list[Trajectory], pad_id: int) -> Sampled:
    """The update's tensors for finished episodes: prompts left-padded, trajectories right-padded."""
    prompt_ids, prompt_mask = left_pad([t.prompt_ids for t in trajectories], pad_id)
    width = max(len(t.ids) for t in trajectories)
    resp = torch.full((len(trajectories), width), pad_id, dtype=torch.long)
    resp_mask = torch.zeros((len(trajectories), width), dtype=torch.long)
    policy_mask = torch.zeros((len(trajectories), width), dtype=torch.long)
    for row, t in enumerate(trajectories):
        resp[row, : len(t.ids)] = torch.tensor(t.ids, dtype=torch.long)
        resp_mask[row, : len(t.ids)] = 1
        policy_mask[row, : len(t.ids)] = torch.tensor(t.policy, dtype=torch.long)
    finished = torch.tensor([t.stop is not StopReason.LENGTH for t in trajectories])
    texts = [t.text for t in trajectories]
    return Sampled(prompt_ids, prompt_mask, resp, resp_mask, policy_mask, finished, texts, trajectories)


def reward_infos(sampled: Sampled) -> list[dict[str, Any]] | None:
    """Per sample, what the reward's `extra_info` gets besides the row (None single-turn)."""
    return None if sampled.trajectories is None else [t.reward_info() for t in sampled.trajectories]


def with_trajectories(rollouts: list[Rollout], sampled: Sampled) -> list[Rollout]:
    """The rollout records with their trajectories: turns, counts, stop reason (unchanged single-turn)."""
    if sampled.trajectories is None:
        return rollouts
    return [
        replace(
            r,
            turns=tuple(t.turns),
            num_turns=len(t.turns),
            tool_calls=t.tool_calls,
            stop_reason=t.stop or StopReason.MAX_TURNS,
            truncated=t.stop is StopReason.LENGTH,
        )
        for r, t in zip(rollouts, sampled.trajectories, strict=True)
    ]


def metrics(sampled: Sampled, split: str) -> dict[str, float]:
    """Episode metrics of a batch (none single-turn): turns (verl's ``num_turns/*`` names in training), calls,
    the observation share of the trajectory tokens, and the share of each stop reason."""
    trajectories = sampled.trajectories
    if not trajectories:
        return {}
    n = len(trajectories)
    turns = [len(t.turns) for t in trajectories]
    observed = float((sampled.resp_mask - sampled.policy_mask).sum()) / max(1.0, float(sampled.resp_mask.sum()))
    head, ns = ("num_turns/", "rollout/") if split == "train" else (f"{split}/num_turns_", f"{split}/")
    out = {
        f"{head}mean": sum(turns) / n,
        f"{head}max": float(max(turns)),
        f"{ns}tool_calls_mean": sum(t.tool_calls for t in trajectories) / n,
        f"{ns}observation_token_share": observed,
    }
    for reason in (StopReason.ANSWER, StopReason.ABANDON, StopReason.LENGTH, StopReason.MAX_TURNS,
                   StopReason.TOOL_ERROR, StopReason.ECHO_TRAP):  # fmt: skip
        out[f"{ns}stop/{reason.value}"] = sum(t.stop is reason for t in trajectories) / n
    return out
