"""Agentic environments run in the sandbox worker; a hostile one fails its candidate, nothing else.

The same checks in the Docker sandbox and in the (weaker) process fallback: honest episodes round-trip in
one request per turn; an environment that raises, hangs, returns garbage, floods its output or forges the
response channel ends as a classified `CandidateCodeError` naming `harness/env.py`, and the sandbox is
killed (the next call starts a fresh one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.env import MAX_RESULT_CHARS, validate_env_result
from harness.failures import CandidateCodeError, Outcome
from sandboxes.worker import SandboxCalls

REWARD = "harness/reward.py:compute_score"
ENV = "harness/env.py:make_env"

HONEST = """
class Env:
    def __init__(self, row):
        self.table = row["table"]
        self.calls = 0

    def call(self, tool, arguments):
        self.calls += 1
        if tool == "count":
            return str(self.calls)
        key = arguments.get("key")
        if key == "flood":
            print("x" * 3_000_000)  # prints go to the capped stderr log, never to the channel
            return "y" * 1_000_000
        if key == "end":
            return {"result": "bye", "success": False, "done": True}
        if key not in self.table:
            return {"result": f"no key {key}", "success": False}
        return str(self.table[key])


def make_env(row):
    return Env(row)
"""

HOSTILE = {
    "raises_in_make_env": ("def make_env(row):\n    raise RuntimeError('no table for ' + str(row['id']))\n", "open"),
    "raises_in_call": (
        "class E:\n    def call(self, tool, arguments):\n        return 1 / 0\n\ndef make_env(row):\n    return E()\n",
        "call",
    ),
    "hangs": (
        "class E:\n    def call(self, tool, arguments):\n        while True:\n            pass\n\n"
        "def make_env(row):\n    return E()\n",
        "call",
    ),
    "returns_an_object": (
        "class E:\n    def call(self, tool, arguments):\n        return object()\n\n"
        "def make_env(row):\n    return E()\n",
        "call",
    ),
    "exits": (
        "import os\nclass E:\n    def call(self, tool, arguments):\n        os._exit(3)\n\n"
        "def make_env(row):\n    return E()\n",
        "call",
    ),
    "forges_frames": (
        "import os\nclass E:\n    def call(self, tool, arguments):\n"
        "        for fd in range(3, 64):\n"
        "            try:\n"
        "                os.write(fd, b'EVO1' + b'\\0' * 16 + b'\\0\\0\\0\\x02{}')\n"
        "            except OSError:\n"
        "                pass\n"
        "        return 'ok'\n\ndef make_env(row):\n    return E()\n",
        "call",
    ),
    "rewrites_the_worker": (  # candidate code shares the worker's process: it can patch the worker itself
        "import sys\nclass E:\n    def call(self, tool, arguments):\n        return 'ok'\n\n"
        "def make_env(row):\n"
        "    main = sys.modules['__main__']\n"
        "    main.Worker.env_calls = lambda self, calls: {'ok': True, 'values': ['a'] * (len(calls) + 3)}\n"
        "    return E()\n",
        "call",
    ),
}
EXPECTED = {
    "hangs": Outcome.TIMEOUT,
    "forges_frames": Outcome.SPOOF_DETECTED,
    "rewrites_the_worker": Outcome.SPOOF_DETECTED,
}


@pytest.fixture(params=["process", "docker"])
def mode(request: pytest.FixtureRequest) -> str:
    """Both sandbox kinds; the Docker one needs the engine and the image (built on demand)."""
    if request.param == "docker":
        from sandboxes.image import ensure_image

        ensure_image(request.getfixturevalue("docker_client"))
    return str(request.param)


def _harness(root: Path, env: str) -> Path:
    (root / "harness").mkdir(parents=True)
    (root / "harness" / "reward.py").write_text("def compute_score(*a, **k):\n    return 0.0\n")
    (root / "harness" / "env.py").write_text(env)
    return root


def _calls(root: Path, mode: str, **kw: Any) -> SandboxCalls:
    return SandboxCalls(root, REWARD, None, mode, env_entry=ENV, **kw)  # type: ignore[arg-type]


def test_episodes_round_trip_one_request_per_turn(mode: str, tmp_path: Path) -> None:
    rows = [{"id": i, "table": {"a": i, "b": 10 + i}} for i in range(3)]
    with _calls(_harness(tmp_path, HONEST), mode) as calls:
        ids = calls.open_episodes(rows)
        assert len(set(ids)) == 3
        sent = calls._next_id
        turn = [(e, "lookup", {"key": "a"}) for e in ids] + [(ids[1], "lookup", {"key": "zz"})]
        values = calls.env_calls(turn)
        assert calls._next_id == sent + 1  # one request for the whole turn
        assert values[:3] == ["0", "1", "2"]
        assert validate_env_result(values[3], ENV).success is False
        assert calls.env_calls([(ids[2], "count", {})]) == ["2"]  # the environment keeps its state between turns
        ended = validate_env_result(calls.env_calls([(ids[0], "lookup", {"key": "end"})])[0], ENV)
        assert ended.done and not ended.success
        flood = validate_env_result(calls.env_calls([(ids[0], "lookup", {"key": "flood"})])[0], ENV)
        assert flood.result.endswith("[... cut]") and len(flood.result) < MAX_RESULT_CHARS + 20
        calls.close_episodes(ids[:2])
        with pytest.raises(ValueError, match="not open"):  # our own bug, never the candidate's
            calls.env_calls([(ids[0], "count", {})])
        assert calls.env_calls([(ids[2], "count", {})]) == ["3"]


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_environment_fails_its_candidate_naming_the_file(mode: str, name: str, tmp_path: Path) -> None:
    code, where = HOSTILE[name]
    calls = _calls(_harness(tmp_path, code), mode, call_timeout_s=3.0)
    try:
        with pytest.raises(CandidateCodeError) as info:
            ids = calls.open_episodes([{"id": 0}, {"id": 1}])
            assert where == "call", "make_env should have failed"
            calls.env_calls([(e, "lookup", {"key": "a"}) for e in ids])
        assert info.value.outcome is EXPECTED.get(name, Outcome.CANDIDATE_ERROR), info.value.message
        assert info.value.path == "harness/env.py", info.value.message
        assert calls._channel is None  # the sandbox was killed
        if mode == "process":
            assert "weaker isolation" in info.value.message
        # the trainer's other calls still work: a fresh sandbox answers the (honest) reward
        assert calls.compute_rewards([{"data_source": "", "solution_str": "", "ground_truth": "", "extra_info": {}}])
    finally:
        calls.close()
