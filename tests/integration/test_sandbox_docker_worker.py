"""`SandboxCalls` and `run_script` in the real sandbox container — spoofing, failures, speed."""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from harness.failures import CandidateCodeError, Outcome
from sandboxes.docker import LABEL, OWNER_LABEL, SandboxConfig
from sandboxes.image import ensure_image
from sandboxes.owners import owner_token
from sandboxes.worker import SandboxCalls, run_script

pytestmark = pytest.mark.docker

REWARD = "harness/reward.py:compute_score"
FILTER = "harness/filters.py:filter_groups"

HONEST_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):
    if solution_str == "nan":
        return float("nan")
    if solution_str == "hang":
        while True:
            pass
    return float(solution_str.strip() == ground_truth)
"""

FILTERS = """
def filter_groups(group_rewards, state):
    state["calls"] = state.get("calls", 0) + 1
    return [max(g) > min(g) for g in group_rewards]
"""


@pytest.fixture(scope="session")
def sandbox_image(docker_client: Any) -> str:
    """Build the sandbox image once per session (instant when it exists)."""
    return ensure_image(docker_client)


def _harness(root: Path, reward: str, **files: str) -> Path:
    (root / "harness").mkdir(parents=True)
    (root / "harness" / "reward.py").write_text(reward)
    (root / "harness" / "filters.py").write_text(FILTERS)
    for name, text in files.items():
        (root / "harness" / f"{name}.py").write_text(text)
    return root


def _batch(*answers: str) -> list[dict[str, Any]]:
    return [
        {"data_source": "t", "solution_str": a, "ground_truth": "4", "extra_info": {"i": i}}
        for i, a in enumerate(answers)
    ]


def _leftovers(client: Any) -> list[Any]:
    """This test process's sandbox containers (other EvoTrainer sessions on the machine may have their own)."""
    return client.containers.list(all=True, filters={"label": [LABEL, f"{OWNER_LABEL}={owner_token()}"]})


def test_rewards_and_filter_round_trip_fast(docker_client: Any, sandbox_image: str, tmp_path: Path) -> None:
    root = _harness(tmp_path, HONEST_REWARD)
    with SandboxCalls(root, REWARD, FILTER, mode="docker", client=docker_client) as calls:
        values = calls.compute_rewards(_batch("4", "5", "nan"))
        assert values[:2] == [1.0, 0.0] and math.isnan(values[2])  # type: ignore[arg-type]
        keep, state = calls.filter_groups([[1.0, 0.0], [1.0, 1.0]], {"calls": 2})
        assert keep == [True, False] and state == {"calls": 3}
        batch = _batch(*[str(i % 6) for i in range(64)])
        timings = []
        for _ in range(20):
            t0 = time.perf_counter()
            calls.compute_rewards(batch)
            timings.append(time.perf_counter() - t0)
        assert statistics.median(timings) < 0.050, timings
    assert _leftovers(docker_client) == []


def test_forged_output_does_not_change_results(docker_client: Any, sandbox_image: str, tmp_path: Path) -> None:
    forger = """
import os, sys
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):
    lines = ['{"ok": true, "values": [1.0, 1.0, 1.0], "id": 1}', "PASS", "critic/score/mean: 1.0", "EVO1" + "0" * 40]
    for line in lines:
        print(line)
        print(line, file=sys.stderr)
        sys.__stdout__.write(line + "\\n")
        sys.__stdout__.flush()
        os.write(1, (line + "\\n").encode())
    return 0.0
"""
    root = _harness(tmp_path, forger)
    with SandboxCalls(root, REWARD, mode="docker", client=docker_client) as calls:
        assert calls.compute_rewards(_batch("4", "4", "4")) == [0.0, 0.0, 0.0]
        assert calls.compute_rewards(_batch("4")) == [0.0]


def test_writing_into_the_channel_descriptor_is_detected(
    docker_client: Any, sandbox_image: str, tmp_path: Path
) -> None:
    intruder = """
import os
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):
    for fd in range(3, 64):
        try:
            os.write(fd, b"EVO1" + b"\\0" * 16 + b"\\0\\0\\0\\x02{}")
        except OSError:
            pass
    return 1.0
"""
    root = _harness(tmp_path, intruder)
    with (
        SandboxCalls(root, REWARD, mode="docker", client=docker_client) as calls,
        pytest.raises(CandidateCodeError) as info,
    ):
        calls.compute_rewards(_batch("4"))
    assert info.value.outcome is Outcome.SPOOF_DETECTED


def test_raising_reward_names_the_file_at_fault(docker_client: Any, sandbox_image: str, tmp_path: Path) -> None:
    reward = (
        "from harness.helpers import parse\n\n"
        "def compute_score(data_source, solution_str, ground_truth, **kw):\n"
        "    return parse(solution_str)\n"
    )
    helpers = "def parse(text):\n    raise ValueError(f'cannot parse {text!r}')\n"
    root = _harness(tmp_path, reward, helpers=helpers)
    with (
        SandboxCalls(root, REWARD, mode="docker", client=docker_client) as calls,
        pytest.raises(CandidateCodeError) as info,
    ):
        calls.compute_rewards(_batch("4"))
        assert info.value.outcome is Outcome.CANDIDATE_ERROR
        assert info.value.path == "harness/helpers.py"
        assert "ValueError" in info.value.message and "cannot parse '4'" in info.value.message


def test_import_error_names_the_reward_file(docker_client: Any, sandbox_image: str, tmp_path: Path) -> None:
    root = _harness(tmp_path, "import no_such_module_xyz\n")
    calls = SandboxCalls(root, REWARD, mode="docker", client=docker_client)
    with pytest.raises(CandidateCodeError) as info:
        calls.start()
    assert info.value.outcome is Outcome.CANDIDATE_ERROR
    assert info.value.path == "harness/reward.py"
    assert "ModuleNotFoundError" in info.value.message and "no_such_module_xyz" in info.value.message
    assert _leftovers(docker_client) == []


def test_unserialisable_return_is_a_candidate_error(docker_client: Any, sandbox_image: str, tmp_path: Path) -> None:
    root = _harness(
        tmp_path, "def compute_score(data_source, solution_str, ground_truth, **kw):\n    return object()\n"
    )
    with (
        SandboxCalls(root, REWARD, mode="docker", client=docker_client) as calls,
        pytest.raises(CandidateCodeError) as info,
    ):
        calls.compute_rewards(_batch("4"))
    assert info.value.outcome is Outcome.CANDIDATE_ERROR
    assert "not JSON-serialisable" in info.value.message and info.value.path == "harness/reward.py"


def test_hanging_call_times_out_kills_and_restarts(docker_client: Any, sandbox_image: str, tmp_path: Path) -> None:
    root = _harness(tmp_path, HONEST_REWARD)
    with SandboxCalls(root, REWARD, mode="docker", client=docker_client, call_timeout_s=2) as calls:
        t0 = time.monotonic()
        with pytest.raises(CandidateCodeError) as info:
            calls.compute_rewards(_batch("4", "hang"))
        assert info.value.outcome is Outcome.TIMEOUT
        assert time.monotonic() - t0 < 8
        assert _leftovers(docker_client) == []  # killed and removed, not left spinning
        assert calls.compute_rewards(_batch("4")) == [1.0]  # a fresh sandbox answers the next call


def test_memory_hungry_reward_is_a_candidate_error(docker_client: Any, sandbox_image: str, tmp_path: Path) -> None:
    hog = (
        "def compute_score(data_source, solution_str, ground_truth, **kw):\n"
        "    x = [bytearray(16 << 20) for _ in range(64)]\n"
        "    return 1.0\n"
    )
    root = _harness(tmp_path, hog)
    with (
        SandboxCalls(
            root, REWARD, mode="docker", client=docker_client, config=SandboxConfig(mem_limit_mb=128)
        ) as calls,
        pytest.raises(CandidateCodeError) as info,
    ):
        calls.compute_rewards(_batch("4"))
    assert info.value.outcome is Outcome.CANDIDATE_ERROR
    assert "memory limit (128 MiB)" in info.value.message


def test_run_script_reads_results_from_the_file_not_stdout(
    docker_client: Any, sandbox_image: str, tmp_path: Path
) -> None:
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text("\n".join(json.dumps({"reward": r}) for r in (0.0, 1.0, 1.0)) + "\n")
    script = tmp_path / "analyze.py"
    script.write_text(
        "import json, os\n"
        "rows = [json.loads(l) for l in open(os.path.join(os.environ['EVOTRAINER_INPUTS_DIR'], 'rollouts'))]\n"
        "print(json.dumps({'mean_reward': 99.0}))  # a forged result on stdout is ignored\n"
        "with open(os.path.join(os.environ['EVOTRAINER_RESULTS_DIR'], 'out.json'), 'w') as fh:\n"
        "    json.dump({'mean_reward': sum(r['reward'] for r in rows) / len(rows)}, fh)\n"
    )
    result = run_script(script, {"rollouts": rollouts}, timeout_s=30, client=docker_client)
    assert result.outcome is Outcome.OK, result
    assert json.loads(result.files["out.json"]) == {"mean_reward": pytest.approx(2 / 3)}
    script.write_text("print('{\"mean_reward\": 1.0}')\n")
    result = run_script(script, {"rollouts": rollouts}, timeout_s=30, client=docker_client)
    assert result.outcome is Outcome.CANDIDATE_ERROR and "no out.json" in result.reason
