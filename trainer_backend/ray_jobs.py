"""Ray Jobs adapter shared by both backends: submit each attempt of a run exactly once, poll, logs, stop.

A run on a cluster (`RunSpec.ray_address`, the Jobs API URL `http://HEAD:8265`) is one Ray job per attempt.
Idempotence across controller crashes rests on two rules:

1. Deterministic submission ids: attempt `a` of the run in folder `out_dir` is always
   ``evotrainer-<run_id>-<sha256(out_dir)[:8]>-a<a>`` (`submission_id`), never a pid or a clock.
2. Write-ahead: a backend records the id in the run folder (`JobRecord`, ``ray_job.json``) *before* it
   submits. After a crash anywhere in between, the id is either on the cluster (the job is adopted) or not
   (it is submitted now); Ray itself refuses a second job with an existing id, so not even two racing
   controllers can run one attempt twice. `handle.json` (agent/adapters/runs.py) is written after `submit` returns;
   a kill between the two is covered because `submit` adopts what the record names.

The run folder must be on storage the controller and the cluster's nodes see at the same absolute path
(the trainers write their artefacts there). Imports Ray lazily: nothing here runs without `--ray-address`.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.atomic import write_atomic

RECORD_FILE = "ray_job.json"
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
RUN_DIR_KEY = "evotrainer_run_dir"  # job metadata: the run folder a job trains into


class RayJobsError(RuntimeError):
    """The cluster's Jobs API cannot be reached or refused a request; the message names the address."""


class JobRecord(BaseModel):
    """The current attempt's Ray job of one run folder: everything needed to submit it, written before it is."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    address: str
    job_id: str
    attempt: int
    entrypoint: str
    env_vars: dict[str, str]
    num_cpus: float = 0  # CPUs reserved for the entry-point process (a local trainer is one process)


def client(address: str) -> Any:  # -> ray.job_submission.JobSubmissionClient
    """A Ray Jobs client, sending the cluster token when one is available (Ray >= 2.60 heads require it).

    The token comes from `RAY_AUTH_TOKEN`, else the file at `RAY_AUTH_TOKEN_PATH` (default ~/.ray/auth_token).
    It is passed as a header because Ray reads RAY_AUTH_MODE once per process, too early to set it here.
    Clients are kept per (address, token): making one costs a round trip (Ray checks the server's version),
    and every branch of a session polls several times a second. Each request is a plain `requests.request`,
    so one client serves the graph's threads.
    """
    token = os.environ.get("RAY_AUTH_TOKEN")
    token_file = Path(os.environ.get("RAY_AUTH_TOKEN_PATH", Path.home() / ".ray" / "auth_token"))
    if not token and token_file.is_file():
        token = token_file.read_text().strip()
    return _client(address, token or None)


@functools.lru_cache(maxsize=16)
def _client(address: str, token: str | None) -> Any:
    from ray.job_submission import JobSubmissionClient

    headers = {"Authorization": f"Bearer {token}"} if token else None
    try:
        return JobSubmissionClient(address, headers=headers)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        why = f"Ray Jobs API at {address} is not reachable ({exc}); start the cluster, or fix --ray-address"
        raise RayJobsError(why) from exc


def submission_id(run_id: str, out_dir: Path, attempt: int) -> str:
    """The Ray submission id of one attempt of the run in `out_dir` (the same in every process, every time)."""
    digest = hashlib.sha256(str(out_dir.resolve()).encode()).hexdigest()[:8]
    return f"evotrainer-{run_id}-{digest}-a{attempt}"


def new_record(
    address: str, run_id: str, out_dir: Path, attempt: int, entrypoint: str, env_vars: dict[str, str], num_cpus: float
) -> JobRecord:
    """The record of a new attempt numbered `attempt` or, when the cluster already holds that id, the next free one.

    A job holding the id without a record naming it was left by an earlier folder at the same path (deleted
    and started again): it is never adopted.
    """
    while status(address, submission_id(run_id, out_dir, attempt)) is not None:
        attempt += 1
    return JobRecord(
        address=address,
        job_id=submission_id(run_id, out_dir, attempt),
        attempt=attempt,
        entrypoint=entrypoint,
        env_vars=env_vars,
        num_cpus=num_cpus,
    )


def load_record(out_dir: Path) -> JobRecord | None:
    """The run folder's job record, None when no job was ever planned for it."""
    path = out_dir / RECORD_FILE
    return JobRecord.model_validate_json(path.read_bytes()) if path.is_file() else None


def save_record(out_dir: Path, record: JobRecord) -> None:
    """Write the job record atomically (before the job is submitted: the write-ahead of rule 2)."""
    write_atomic(out_dir / RECORD_FILE, record.model_dump_json(indent=1))


def status(address: str, job_id: str) -> str | None:
    """The job's status (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED), None when the cluster has no such job.

    Raises:
        RuntimeError: the Jobs API cannot be reached or answers with another error.
    """
    try:
        return str(client(address).get_job_status(job_id).value)
    except RayJobsError:
        raise
    except (RuntimeError, ConnectionError) as exc:
        if "status code 404" in str(exc):
            return None
        raise RayJobsError(f"Ray Jobs API at {address}: status of {job_id} failed ({exc})") from exc


def submit(record: JobRecord, out_dir: Path) -> bool:
    """Submit the recorded job unless the cluster already has it; True when submitted now, False when adopted.

    Call it only after `save_record(out_dir, record)`: the record must survive a crash during the call.
    """
    if status(record.address, record.job_id) is not None:
        return False
    try:
        client(record.address).submit_job(
            entrypoint=record.entrypoint,
            submission_id=record.job_id,
            runtime_env={"env_vars": record.env_vars},
            metadata={RUN_DIR_KEY: str(out_dir.resolve())},
            entrypoint_num_cpus=record.num_cpus,
        )
    except (RuntimeError, ConnectionError) as exc:
        if "already exists" in str(exc):  # another controller submitted it between our check and now
            return False
        raise RayJobsError(f"Ray Jobs API at {record.address}: submitting {record.job_id} failed ({exc})") from exc
    return True


def logs(address: str, job_id: str) -> str:
    """The job's driver log so far ("" when the cluster has no such job)."""
    try:
        return str(client(address).get_job_logs(job_id))
    except RayJobsError:
        raise
    except (RuntimeError, ConnectionError) as exc:
        if "status code 404" in str(exc):
            return ""
        raise RayJobsError(f"Ray Jobs API at {address}: logs of {job_id} failed ({exc})") from exc


def stop(address: str, job_id: str) -> None:
    """Ask the cluster to stop the job (SIGTERM to its entry point, then SIGKILL); a finished job is left alone."""
    if status(address, job_id) not in (None, *TERMINAL):
        try:
            client(address).stop_job(job_id)
        except (RuntimeError, ConnectionError) as exc:
            raise RayJobsError(f"Ray Jobs API at {address}: stopping {job_id} failed ({exc})") from exc


def jobs_for(address: str, out_dir: Path) -> list[Any]:
    """Every job on the cluster that trains into `out_dir` (JobDetails, any status)."""
    where = str(out_dir.resolve())
    return [j for j in client(address).list_jobs() if (j.metadata or {}).get(RUN_DIR_KEY) == where]
