"""The process fallback is honest about being weaker, and still kills, caps and classifies."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import pytest

from harness.failures import CandidateCodeError, InfraError, Outcome
from sandboxes import worker
from sandboxes.docker import SandboxConfig
from sandboxes.process import run_process
from sandboxes.worker import SandboxCalls, resolve_mode, run_script

PY = [sys.executable, "-I", "-c"]
REWARD = "harness/reward.py:compute_score"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # a zombie is dead, only not yet reaped by its new parent


def _harness(root: Path, reward: str) -> Path:
    (root / "harness").mkdir(parents=True)
    (root / "harness" / "reward.py").write_text(reward)
    return root


def test_every_result_says_weaker_isolation() -> None:
    ok = run_process([*PY, "print('hi')"])
    failed = run_process([*PY, "raise SystemExit(4)"])
    assert ok.outcome is Outcome.OK and ok.stdout_tail == "hi\n"
    assert failed.outcome is Outcome.CANDIDATE_ERROR and failed.exit_code == 4
    for result in (ok, failed):
        assert result.weaker_isolation is True
        assert "weaker isolation" in result.reason


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    code = (
        "import os, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    time.sleep(120)\n"
        "    os._exit(0)\n"
        f"open({str(pidfile)!r}, 'w').write(str(pid))\n"
        "while True:\n"
        "    pass\n"
    )
    t0 = time.monotonic()
    result = run_process([*PY, code], config=SandboxConfig(timeout_s=1.5))
    assert result.outcome is Outcome.TIMEOUT and result.timed_out
    assert time.monotonic() - t0 < 6
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 3
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_host_env_is_not_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVOTRAINER_TEST_SECRET", "hunter2-do-not-leak")
    result = run_process([*PY, "import json, os; print(json.dumps(dict(os.environ)))"], env={"EXPLICIT": "yes"})
    env = json.loads(result.stdout_tail)
    assert env["EXPLICIT"] == "yes"
    assert "EVOTRAINER_TEST_SECRET" not in env


def test_address_space_limit_is_classified_as_memory() -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 1024 * 1024))"
    result = run_process([*PY, code], config=SandboxConfig(mem_limit_mb=256))
    assert result.outcome is Outcome.CANDIDATE_ERROR
    assert "memory limit (256 MiB)" in result.reason


def test_output_is_capped() -> None:
    result = run_process([*PY, "print('x' * 1_000_000 + 'END')"], config=SandboxConfig(output_cap_bytes=1024))
    assert len(result.stdout_tail) == 1024 and result.stdout_tail.endswith("END\n")


def test_process_calls_return_values_and_ignore_prints(tmp_path: Path) -> None:
    reward = (
        "import sys\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n"
        "    print('PASS critic/score/mean: 1.0')\n"
        "    sys.__stdout__.write('EVO1' + '0' * 40 + '\\n')\n"
        "    return float('nan') if solution_str == 'nan' else float(solution_str == ground_truth)\n"
    )
    root = _harness(tmp_path, reward)
    with SandboxCalls(root, REWARD, mode="process") as calls:
        assert calls.weaker_isolation
        items = [{"data_source": "t", "solution_str": s, "ground_truth": "4", "extra_info": None} for s in "45"]
        items.append({"data_source": "t", "solution_str": "nan", "ground_truth": "4", "extra_info": None})
        values = calls.compute_rewards(items)
    assert values[:2] == [1.0, 0.0] and math.isnan(values[2])  # type: ignore[arg-type]


def test_process_call_timeout_raises_and_says_weaker(tmp_path: Path) -> None:
    root = _harness(
        tmp_path, "def compute_score(data_source, solution_str, ground_truth, **kw):\n    while True:\n        pass\n"
    )
    with SandboxCalls(root, REWARD, mode="process", call_timeout_s=1) as calls:
        with pytest.raises(CandidateCodeError) as info:
            calls.compute_rewards([{"data_source": "t", "solution_str": "4", "ground_truth": "4", "extra_info": None}])
        assert calls._channel is None  # killed, not left spinning
    assert info.value.outcome is Outcome.TIMEOUT
    assert info.value.path == "harness/reward.py"
    assert "weaker isolation" in info.value.message


def test_filter_must_return_one_bool_per_group(tmp_path: Path) -> None:
    root = _harness(tmp_path, "def compute_score(**kw):\n    return 0.0\n")
    (root / "harness" / "filters.py").write_text("def filter_groups(group_rewards, state):\n    return [True]\n")
    calls = SandboxCalls(root, REWARD, "harness/filters.py:filter_groups", mode="process")
    with calls, pytest.raises(CandidateCodeError) as info:
        calls.filter_groups([[0.0, 1.0], [1.0, 1.0]], {})
    assert info.value.outcome is Outcome.CANDIDATE_ERROR
    assert info.value.path == "harness/filters.py" and "2 bools" in info.value.message


def test_auto_mode_falls_back_only_without_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_engine() -> None:
        raise InfraError("no Docker engine reachable: test")

    monkeypatch.setattr(worker, "engine_client", no_engine)
    assert resolve_mode("auto") == ("process", None)
    with pytest.raises(InfraError):
        resolve_mode("docker")  # asking for Docker never silently degrades


def test_run_script_process_mode_reads_out_json(tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text('{"r": 1}\n{"r": 3}\n')
    script = tmp_path / "s.py"
    script.write_text(
        "import json, os\n"
        "rows = [json.loads(l) for l in open(os.path.join(os.environ['EVOTRAINER_INPUTS_DIR'], 'rows'))]\n"
        "json.dump({'n': len(rows)}, open(os.path.join(os.environ['EVOTRAINER_RESULTS_DIR'], 'out.json'), 'w'))\n"
    )
    result = run_script(script, {"rows": data}, timeout_s=20, mode="process")
    assert result.outcome is Outcome.OK and result.weaker_isolation
    assert json.loads(result.files["out.json"]) == {"n": 2}
