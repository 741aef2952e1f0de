"""kill -9 of the session process at several points, then `evotrainer resume`.

One session on the demo harness (real training, git, Docker sandbox, SQLite store) is SIGKILLed four
times, each time as a whole process group (`start_new_session=True` + `os.killpg`; the trainer processes
live in their own groups and survive, as they do in production):

1. mid-backtest: on the Docker `start` event of a sandbox container of this test while the session's
   latest checkpoint says `backtest` is next (the container runs a candidate's reward on cached rollouts);
2. mid-training: once a pilot's train.log shows step 0 and it has no summary yet (its trainer, and the
   trainer's own reward container, must survive the controller's death and the resume's reaping);
3. between nodes: as soon as the checkpoint written after `promote_gate` appears in the checkpoint table,
   before `record` merges the winner and appends the version (the checkpoint after `decide` cannot be
   caught by polling: without a gate, `promote_gate` completes within milliseconds of it);
4. between iterations: as soon as the checkpoint written after `record` appears (the new version is in
   the ledger; `observe`, a no-op on later iterations, may complete too before the kill lands).

Checkpoints are polled every 20 ms, so "as soon as" means within a few tens of milliseconds: a kill may
land early in the next node instead, which resume must survive just the same.

After each kill `resume` continues the session in the background; the last one must finish it. Then:
the session is finished, the versions are contiguous (v0..vn) with strict scores, every ledger row seen
before a kill is still there, no training run was launched twice (one `step 0 |` per train.log), and no
sandbox container of this test is left, running or exited.

This test's containers are told apart from those of tests running at the same time by their bind mounts:
the controller runs with its own TMPDIR, where the sandbox stages the harness snapshot it mounts.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from sandboxes.docker import LABEL, OWNER_LABEL, SandboxConfig, container_options, reap_orphans
from sandboxes.owners import owner_token
from store import models
from store.engine import make_engine, session_scope

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--base-steps", "12", "--pilot-steps", "12", "--iterations", "2", "--candidates", "2", "--max-steps", "200"]
WAIT_S = 600.0  # the longest any one wait may take

pytestmark = [pytest.mark.docker]


@dataclass
class Session:
    """The working folder of the test's session and the controller processes it started."""

    cwd: Path
    tmpdir: Path  # the controllers' TMPDIR: sandbox containers of this test mount staging folders from here
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    session_id: str = ""

    @property
    def db_path(self) -> Path:
        return self.cwd / ".evotrainer" / "evotrainer.db"

    @property
    def session_dir(self) -> Path:
        return self.cwd / ".evotrainer" / "sessions" / self.session_id

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        """Start `python -m agent.cli ARGS` as the leader of a new process group (output to a log file)."""
        log = open(self.cwd / f"controller-{len(self.procs)}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", *args],
            cwd=self.cwd,
            env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(self.tmpdir)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        return (self.cwd / f"controller-{self.procs.index(proc)}.log").read_text(errors="replace")[-4000:]


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 the controller's whole process group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def _ours(client: Any, tmpdir: Path) -> list[dict[str, Any]]:
    """Sandbox containers (any state) that mount something from this test's TMPDIR."""
    found = []
    for summary in client.api.containers(all=True, filters={"label": LABEL}):
        if any(str(m.get("Source", "")).startswith(str(tmpdir)) for m in summary.get("Mounts", [])):
            found.append(summary)
    return found


def _describe(containers: list[dict[str, Any]]) -> list[str]:
    return [
        f"{c['Id'][:12]} {c.get('State')} ({c.get('Status')}) owner {c['Labels'].get(OWNER_LABEL)}" for c in containers
    ]


class Checkpoints:
    """Read the session's LangGraph checkpoints while a controller writes them (WAL: readers never block)."""

    def __init__(self, db_path: Path, session_id: str) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        from agent.graph import builder

        self.conn = sqlite3.connect(str(db_path), check_same_thread=False, timeout=30)
        self.graph = builder.compile(checkpointer=SqliteSaver(self.conn))
        self.cfg = {"configurable": {"thread_id": session_id}}
        self.session_id = session_id

    def close(self) -> None:
        self.conn.close()

    def latest_id(self) -> str | None:
        row = self.conn.execute(
            "SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ''",
            (self.session_id,),
        ).fetchone()
        return row[0] if row else None

    def completed_since(self, after_id: str | None, node: str) -> dict[str, Any] | None:
        """Values of the first checkpoint newer than `after_id` that was written right after `node` ran.

        A checkpoint was written after `node` when its parent's `next` is exactly `(node,)`.
        """
        snaps = list(self.graph.get_state_history(self.cfg, limit=12))  # newest first
        for child, parent in itertools.pairwise(snaps):
            cid = child.config["configurable"]["checkpoint_id"]
            if (after_id is None or cid > after_id) and tuple(parent.next) == (node,):
                return dict(child.values)
        return None


def _wait_for(
    predicate: Callable[[], bool], timeout: float, proc: subprocess.Popen[bytes] | None, poll_s: float
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc is not None and proc.poll() is not None:
            return predicate()
        time.sleep(poll_s)
    return False


@dataclass(frozen=True)
class Ledger:
    """What the store holds for the session at one moment."""

    versions: dict[int, tuple[str, float | None]]  # index -> (run id, strict score)
    candidates: set[str]
    live: dict[str, int]  # candidates that were not refused -> their iteration
    runs: dict[str, str | None]  # run id -> outcome (None while it runs)
    backtests: list[str]  # candidate ids, one per row
    status: str


def _ledger(db_path: Path, session_id: str) -> Ledger:
    engine = make_engine(f"sqlite:///{db_path}")
    try:
        with session_scope(engine) as db:
            session = db.get(models.EvoSession, session_id)
            versions = db.scalars(select(models.Version).where(models.Version.session_id == session_id)).all()
            candidates = db.scalars(select(models.Candidate).where(models.Candidate.session_id == session_id)).all()
            runs = db.scalars(select(models.Run).where(models.Run.session_id == session_id)).all()
            ids = {c.id for c in candidates}
            backtests = [b.candidate_id for b in db.scalars(select(models.Backtest)).all() if b.candidate_id in ids]
            return Ledger(
                versions={v.index: (v.run_id, v.strict_score) for v in versions},
                candidates=ids,
                live={c.id: c.iteration for c in candidates if c.status != "refused"},
                runs={r.id: r.outcome for r in runs},
                backtests=backtests,
                status=session.status if session is not None else "",
            )
    finally:
        engine.dispose()


def _assert_kept(before: Ledger, after: Ledger, when: str) -> None:
    """Every row recorded before a kill survives it (versions keep their index and run)."""
    for index, (run_id, strict) in before.versions.items():
        assert index in after.versions, f"v{index} recorded before the kill {when} was lost"
        assert after.versions[index][0] == run_id, f"v{index} changed run after the kill {when}"
        if strict is not None:
            assert after.versions[index][1] == strict, f"v{index} changed strict score after the kill {when}"
    assert before.candidates <= after.candidates, f"candidates lost after the kill {when}"
    assert set(before.runs) <= set(after.runs), f"runs lost after the kill {when}"
    assert set(before.backtests) <= set(after.backtests), f"backtests lost after the kill {when}"


@contextlib.contextmanager
def _start_events(client_factory: Callable[[], Any], since: float) -> Iterator[queue.Queue[dict[str, Any]]]:
    """Stream the engine's `start` events of sandbox containers into a queue (a reader thread)."""
    client = client_factory()
    events = client.events(
        since=int(since), filters={"type": "container", "event": "start", "label": LABEL}, decode=True
    )
    found: queue.Queue[dict[str, Any]] = queue.Queue()

    def pump() -> None:
        with contextlib.suppress(Exception):  # the stream ends with an error when it is closed
            for event in events:
                found.put(event)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        events.close()
        client.close()
        thread.join(timeout=10)


def _kill_mid_backtest(s: Session, docker_client: Any) -> tuple[int, list[str]]:
    """Start the session and kill it while one of its candidate backtests runs in a sandbox container.

    Returns the iteration and the ids of its candidates whose backtest had no report yet when it died.
    """
    import docker

    since = time.time() - 1
    with _start_events(docker.from_env, since) as started:
        proc = s.start("run", "--harness", str(ROOT / "examples" / "arithmetic"), "--repo", "repo", *SMALL)
        sessions = s.cwd / ".evotrainer" / "sessions"
        assert _wait_for(lambda: sessions.is_dir() and any(sessions.iterdir()), WAIT_S, proc, 0.2), s.log(proc)
        [s.session_id] = [p.name for p in sessions.iterdir()]
        assert _wait_for(s.db_path.exists, WAIT_S, proc, 0.2), s.log(proc)
        cps: Checkpoints | None = None
        deadline = time.monotonic() + WAIT_S
        try:
            while True:
                assert time.monotonic() < deadline, "no backtest container started in time"
                assert proc.poll() is None, "the session ended before its backtests:\n" + s.log(proc)
                try:
                    event = started.get(timeout=1.0)
                except queue.Empty:
                    continue
                if not any(c["Id"] == event["id"] for c in _ours(docker_client, s.tmpdir)):
                    continue  # another test's container, or one already gone
                if cps is None:
                    cps = Checkpoints(s.db_path, s.session_id)
                state = cps.graph.get_state(cps.cfg)
                if "backtest" in state.next:
                    _kill(proc)
                    iteration = int(state.values["iteration"])
                    break
        finally:
            if cps is not None:
                cps.close()
    live = _ledger(s.db_path, s.session_id).live
    backtests = s.session_dir / "backtests"
    pending = [c for c, it in live.items() if it == iteration and not (backtests / c / "report.json").is_file()]
    return iteration, sorted(pending)


def _kill_mid_training(s: Session, proc: subprocess.Popen[bytes], iteration: int) -> list[str]:
    """Kill `proc` once a pilot of `iteration` is training (logged step 0, no summary); return those runs."""
    runs = s.session_dir / "runs"
    training: list[str] = []

    def pilots_training() -> bool:
        training[:] = [
            d.name
            for d in runs.glob(f"{s.session_id}-v{iteration}.*")  # the iteration's pilots: <session>-v<i>.<k>-…
            if (d / "train.log").is_file()
            and "step 0 |" in (d / "train.log").read_text(errors="replace")
            and not (d / "summary.json").exists()
        ]
        return bool(training)

    assert _wait_for(pilots_training, WAIT_S, proc, 0.2), "no pilot started training:\n" + s.log(proc)
    assert proc.poll() is None, "the session ended while its pilots trained:\n" + s.log(proc)
    _kill(proc)
    return sorted(training)


def _assert_launched_once(s: Session) -> None:
    """No training run was launched twice: a relaunch appends a second `step 0 |` to its train.log."""
    for log in (s.session_dir / "runs").glob("*/train.log"):
        launches = log.read_text(errors="replace").count("step 0 |")
        assert launches <= 1, f"{log.parent.name} was launched {launches} times"


def _trainer_alive(run_dir: Path) -> bool:
    from trainer_backend.base import Handle

    pid = Handle.model_validate_json((run_dir / "handle.json").read_text()).pid
    try:
        os.kill(pid or 0, 0)
    except ProcessLookupError:
        return False
    return bool(pid)


def _kill_after(s: Session, proc: subprocess.Popen[bytes], node: str) -> dict[str, Any]:
    """Kill `proc` as soon as the first checkpoint it writes after `node` ran is in the store; return its values."""
    cps = Checkpoints(s.db_path, s.session_id)
    try:
        start_id = cps.latest_id()
        seen = start_id
        hit: dict[str, Any] | None = None

        def reached() -> bool:
            nonlocal seen, hit
            latest = cps.latest_id()
            if latest == seen:
                return False
            seen = latest
            hit = cps.completed_since(start_id, node)
            return hit is not None

        assert _wait_for(reached, WAIT_S, proc, 0.02), f"no checkpoint after {node} appeared:\n" + s.log(proc)
        assert proc.poll() is None, f"the session ended right after {node}:\n" + s.log(proc)
        _kill(proc)
        assert hit is not None
        return hit
    finally:
        cps.close()


def _cleanup(s: Session, docker_client: Any) -> None:
    """Leave nothing running when the test fails half-way: controllers, trainers, containers."""
    for proc in s.procs:
        if proc.poll() is None:
            _kill(proc)
    if s.session_id:
        from trainer_backend.base import Handle

        for handle_path in (s.session_dir / "runs").glob("*/handle.json"):
            pid = Handle.model_validate_json(handle_path.read_text()).pid
            if pid and not (handle_path.parent / "summary.json").exists():  # a trainer that may still run
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
    for summary in _ours(docker_client, s.tmpdir):
        with contextlib.suppress(Exception):
            docker_client.api.remove_container(summary["Id"], force=True)


@pytest.mark.slow
def test_kill_nine_mid_backtest_and_between_nodes_then_resume(tmp_path: Path, docker_client: Any) -> None:
    """Four kill -9s on one session; `resume` finishes it without losing a version or relaunching a run."""
    tmpdir = (tmp_path / "tmp").resolve()
    tmpdir.mkdir()
    s = Session(cwd=tmp_path.resolve(), tmpdir=tmpdir)
    try:
        # 1. mid-backtest: a candidate's reward runs in its sandbox container.
        iteration, pending = _kill_mid_backtest(s, docker_client)
        assert pending, "the kill came after every backtest of the iteration had finished"
        before = _ledger(s.db_path, s.session_id)
        assert before.status == "running" and 0 in before.versions
        assert not set(pending) & set(before.backtests)
        orphans = {c["Id"] for c in _ours(docker_client, s.tmpdir)}
        assert orphans, "kill -9 mid-backtest should leave the backtest's sandbox container behind"
        scratch = {p for p in s.tmpdir.iterdir() if p.name.startswith("evotrainer-")}
        assert scratch, "kill -9 mid-backtest should leave the sandbox's scratch folder (harness snapshot) behind"

        # 2. mid-training: the pilots' trainers live in their own process groups and outlive the kill.
        proc = s.start("resume", s.session_id)
        training = _kill_mid_training(s, proc, iteration)
        assert any(_trainer_alive(s.session_dir / "runs" / r) for r in training), "no trainer outlived the kill"
        mid_training = _ledger(s.db_path, s.session_id)
        _assert_kept(before, mid_training, "mid-backtest")
        assert set(pending) <= set(mid_training.backtests), "the interrupted backtests were not run again"

        # 3. between nodes: the checkpoint after `promote_gate` is written, `record` is next.
        proc = s.start("resume", s.session_id)
        values = _kill_after(s, proc, "promote_gate")
        assert values["iteration"] == iteration
        after_gate = _ledger(s.db_path, s.session_id)
        _assert_kept(mid_training, after_gate, "mid-training")
        assert all(after_gate.runs[r] == "ok" for r in training), "a trainer that outlived the kill failed"
        _assert_launched_once(s)
        left = _ours(docker_client, s.tmpdir)
        assert left == [], f"resume did not reap the killed controller's containers: {_describe(left)}"
        assert not scratch & set(s.tmpdir.iterdir()), "resume did not remove the killed controller's scratch folders"

        # 4. between iterations: the checkpoint after `record` is written (same iteration).
        proc = s.start("resume", s.session_id)
        values = _kill_after(s, proc, "record")
        assert values["iteration"] == iteration + 1
        after_record = _ledger(s.db_path, s.session_id)
        _assert_kept(after_gate, after_record, "after promote_gate")
        index = values["version"]["index"]
        assert after_record.versions.get(index, ("",))[0] == values["version"]["run_id"], "record lost its version"

        # The last resume must finish the session.
        proc = s.start("resume", s.session_id)
        assert proc.wait(timeout=WAIT_S) == 0, s.log(proc)
        final = _ledger(s.db_path, s.session_id)
        _assert_kept(after_record, final, "after record")
        _assert_launched_once(s)
    finally:
        _cleanup(s, docker_client)

    assert final.status == "finished"
    assert sorted(final.versions) == list(range(len(final.versions))) and len(final.versions) >= 2
    assert all(strict is not None for _, strict in final.versions.values()), final.versions
    assert len({run for run, _ in final.versions.values()}) == len(final.versions)
    assert len(final.backtests) == len(set(final.backtests)), "a candidate was backtested into two rows"
    run_dirs = {p.name for p in (s.session_dir / "runs").iterdir()}
    assert run_dirs == set(final.runs), "a run folder without a ledger row, or the reverse"
    assert None not in final.runs.values(), f"a run never recorded its outcome: {final.runs}"
    for run_id in sorted(final.runs):
        log = (s.session_dir / "runs" / run_id / "train.log").read_text()
        assert log.count("step 0 |") == 1, f"{run_id} was launched more than once"
        assert (s.session_dir / "runs" / run_id / "summary.json").is_file(), f"{run_id} never finished"
    left = _ours(docker_client, s.tmpdir)
    assert left == [], f"sandbox containers of the session were left behind: {_describe(left)}"


def test_reap_orphans_removes_only_containers_of_dead_processes(docker_client: Any) -> None:
    """A container whose creator died (pid gone) is removed; one of a live process is kept."""
    from sandboxes.image import ensure_image

    ensure_image(docker_client)
    child = subprocess.Popen(["sleep", "60"])
    dead = owner_token(child.pid)
    child.kill()
    child.wait()
    ids = {}
    try:
        for name, token in (("dead", dead), ("live", owner_token())):
            opts = container_options(SandboxConfig(), {})
            opts["labels"] = {**opts["labels"], OWNER_LABEL: token}
            ids[name] = docker_client.containers.create(command=["true"], **opts).id
        removed = reap_orphans(docker_client)
        assert ids["dead"] in removed and ids["live"] not in removed
        left = {c["Id"] for c in docker_client.api.containers(all=True, filters={"label": LABEL})}
        assert ids["dead"] not in left and ids["live"] in left
    finally:
        for cid in ids.values():
            with contextlib.suppress(Exception):
                docker_client.api.remove_container(cid, force=True)
