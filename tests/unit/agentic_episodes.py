"""Synthetic agentic episodes for the agentic diagnostics and skill tests.

`episode(...)` writes one trajectory the way the local backend records one: a `Turn` per tool call (tool,
arguments, result, success, token counts), then the final answer turn (no tool) unless the episode was cut,
with `num_turns`, `tool_calls` and the stop reason filled in from the turns. The scenario builders return
whole runs of GRPO groups, each showing one failure mode from the paper (§10): a healthy search-edit-test
run, one-turn collapse under an efficiency reward, an echo trap, tool spam paid by the reward, abandonment,
successes cut by a low turn cap, a failing edit tool, and a lookup-only harness whose answer is its action.
"""

from __future__ import annotations

from collections.abc import Sequence

from diagnostics.schema import Rollout, StopReason, Turn

Call = tuple[str, str, bool]  # tool, arguments, success


def episode(
    step: int,
    group: int,
    index: int,
    calls: Sequence[Call],
    *,
    reward: float,
    strict: float | None,
    answer: bool = True,
    stop: StopReason | None = None,
    run: str = "agentic",
) -> Rollout:
    """One trajectory: a turn per call, then (when `answer`) the final answer turn."""
    turns = [
        Turn(f"I call {tool}", tool=tool, arguments=args, result="ok" if ok else "ERROR", success=ok,
             policy_tokens=6, observation_tokens=4)
        for tool, args, ok in calls
    ]  # fmt: skip
    if answer:
        turns.append(Turn("<ans>7</ans>", policy_tokens=4))
    stopped = stop or (StopReason.ANSWER if answer else StopReason.MAX_TURNS)
    return Rollout(
        run_id=run,
        step=step,
        split="train",
        prompt_id=f"p{group}",
        group_id=f"g{group}",
        sample_index=index,
        prompt=f"task {group}",
        response=" ".join(t.text for t in turns),
        ground_truth="7",
        reward=reward,
        strict_score=strict,
        response_tokens=sum(t.policy_tokens for t in turns),
        stop_reason=stopped,
        num_turns=len(turns),
        tool_calls=len(calls),
        turns=tuple(turns),
    )


SOLVE: list[Call] = [("search_code", "q=bug", True), ("edit_file", "fix", True), ("run_tests", "all", True)]


def healthy(steps: int = 2) -> list[Rollout]:
    """Search, edit, test, answer: 6 of 8 solve; 2 edit without testing and fail. No alert should fire."""
    rows = []
    for s in range(steps):
        for g in range(4):
            for i in range(8):
                if i < 6:
                    rows.append(episode(s, g, i, SOLVE, reward=1.0, strict=1.0))
                else:
                    rows.append(episode(s, g, i, SOLVE[:2], reward=0.0, strict=0.0))
    return rows


def one_turn_collapse() -> list[Rollout]:
    """A multiplicative efficiency reward: 7 of 8 answer at once (paid 0.7 for nothing), 1 solves slowly."""
    rows = []
    for g in range(12):
        for i in range(8):
            if i < 7:
                rows.append(episode(0, g, i, [], reward=0.7, strict=0.0))
            else:
                rounds = 1 + g % 3  # 3, 6 or 9 calls (fresh arguments each round): fewer turns, more reward
                calls = [(tool, f"{args}#{k}", ok) for k in range(rounds) for tool, args, ok in SOLVE]
                reward = 1.0 * (1 - 0.3 * (len(calls) + 1) / 10)
                rows.append(episode(0, g, i, calls, reward=reward, strict=1.0))
    return rows


def echo_trap() -> list[Rollout]:
    """Half the episodes loop on the same search until the turn cap (14 calls), the rest solve in 4 turns."""
    rows = []
    for g in range(4):
        for i in range(8):
            if i < 4:
                rows.append(episode(0, g, i, SOLVE, reward=1.0, strict=1.0))
            else:
                loop = [("search_code", "q=bug", True)] * 14
                rows.append(episode(0, g, i, loop, reward=0.0, strict=0.0, answer=False))
    return rows


def tool_spam() -> list[Rollout]:
    """A reward paying 0.1 per call: failed episodes spam lookups with fresh arguments and earn more."""
    rows = []
    for g in range(4):
        for i in range(8):
            if i < 2:
                rows.append(episode(0, g, i, SOLVE, reward=1.3, strict=1.0))
            else:
                calls = [("search_code", f"q={k}", True) for k in range(i + 2)]
                rows.append(episode(0, g, i, calls, reward=0.1 * len(calls), strict=0.0))
    return rows


def abandonment() -> list[Rollout]:
    """5 of 8 take one look and give up (2 turns, no edit); the rest solve."""
    rows = []
    for g in range(4):
        for i in range(8):
            if i < 5:
                rows.append(episode(0, g, i, [("search_code", "q=bug", True)], reward=0.0, strict=0.0))
            else:
                rows.append(episode(0, g, i, SOLVE, reward=1.0, strict=1.0))
    return rows


def cut_successes() -> list[Rollout]:
    """A turn cap of 4: short tasks solve in exactly 4 turns; long ones are cut mid-work (fresh, good calls)."""
    rows = []
    for g in range(6):
        for i in range(8):
            if g % 2 == 0 and i < 6:
                rows.append(episode(0, g, i, SOLVE, reward=1.0, strict=1.0))
            else:
                work = [("search_code", f"q={k}", True) for k in range(2)] + [("edit_file", f"e{i}", True)]
                rows.append(
                    episode(0, g, i, [*work, ("edit_file", "more", True)], reward=0.0, strict=0.0, answer=False)
                )
    return rows


def few_cut_successes() -> list[Rollout]:
    """A turn cap of 4 that binds on successes but cuts few episodes (the lookup task's `turn-budget`).

    Eight groups solve in exactly 4 turns (three calls, then the answer); one group in nine needs a fourth
    call and is cut mid-work: 8 of 72 episodes stop at the cap (below the 0.15 truncation bar), and every
    success used every turn the cap allows.
    """
    rows = []
    solve = [("search_code", f"q={k}", True) for k in range(3)]
    for g in range(9):
        for i in range(8):
            if g < 8:
                rows.append(episode(0, g, i, solve, reward=1.0, strict=1.0))
            else:
                work = [("search_code", f"q={k}", True) for k in range(4)]
                rows.append(episode(0, g, i, work, reward=0.0, strict=0.0, answer=False))
    return rows


def failing_edits() -> list[Rollout]:
    """The edit tool fails on 3 of every 8 calls (poor edit format), 32 edit calls in all."""
    rows = []
    for g in range(4):
        for i in range(8):
            ok = i >= 3
            calls = [("search_code", "q", True), ("edit_file", "x", ok), ("run_tests", "all", True)]
            rows.append(episode(0, g, i, calls, reward=float(ok), strict=float(ok)))
    return rows


def blind_edits() -> list[Rollout]:
    """Edits without looking first: 6 of 8 episodes edit and test straight away (2 search first)."""
    rows = []
    for g in range(4):
        for i in range(8):
            calls = SOLVE if i < 2 else SOLVE[1:]
            rows.append(episode(0, g, i, calls, reward=float(i % 2), strict=float(i % 2)))
    return rows


def lookup_only() -> list[Rollout]:
    """A lookup-only harness: the answer is the action. 3 of 8 answer without looking up (abandonment)."""
    rows = []
    for g in range(4):
        for i in range(8):
            if i < 3:
                rows.append(episode(0, g, i, [], reward=0.0, strict=0.0))
            else:
                rows.append(episode(0, g, i, [("lookup", f"k{i}", True)], reward=1.0, strict=1.0))
    return rows


def lookups(wrong_key: str | None, *, seed: int = 0, steps: int = 2, groups: int = 8, size: int = 8) -> list[Rollout]:
    """Episodes that look two random keys (a-h) up and answer; 80% succeed, and none that read `wrong_key` (an
    environment that answers that key wrongly)."""
    import random

    rng = random.Random(seed)
    rows = []
    for s in range(steps):
        for g in range(groups):
            for i in range(size):
                keys = rng.sample("abcdefgh", 2)
                ok = rng.random() < 0.8 and wrong_key not in keys
                calls = [("lookup", f"key={k}", True) for k in keys]
                rows.append(episode(s, g, i, calls, reward=float(ok), strict=float(ok), run="lookup"))
    return rows


def limited_lookups(
    limit: int | None, *, seed: int = 0, steps: int = 2, groups: int = 8, size: int = 8
) -> list[Rollout]:
    """Episodes that look one to three random keys (a-h) up, then answer; an environment with a lookup `limit`
    refuses the call after it and ends the episode (stop reason tool_error, no answer). None: no limit."""
    import random

    rng = random.Random(seed)
    rows = []
    for s in range(steps):
        for g in range(groups):
            level = 1 + g % 3
            for i in range(size):
                keys = rng.sample("abcdefgh", level)
                calls = [("lookup", f"key={k}", limit is None or n < limit) for n, k in enumerate(keys)]
                cut = not all(ok for _, _, ok in calls)
                calls = calls[: next((n + 1 for n, (_, _, ok) in enumerate(calls) if not ok), len(calls))]
                ok = not cut and rng.random() < 0.8
                rows.append(episode(s, g, i, calls, reward=float(ok), strict=float(ok), answer=not cut,
                                    stop=StopReason.TOOL_ERROR if cut else None, run="lookup"))  # fmt: skip
    return rows
