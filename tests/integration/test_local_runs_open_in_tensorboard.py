"""A local run's metrics open in TensorBoard (and W&B when asked for), under verl's names, one run per folder.

Real short trainings on the tiny model through the local backend (the trainer as a subprocess, as in a
session); the event files are read back with TensorBoard's own reader.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from diagnostics.schema import STRICT_METRIC, TRAIN_REWARD_METRIC, read_metrics
from harness.failures import Outcome
from trainer_backend import BACKENDS
from trainer_backend.base import RunSpec
from trainer_backend.local import LOCK_FILE

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = """lr: 1.0e-3
group_size: 4
prompts_per_step: 2
max_new_tokens: 16
val_every: 2
save_every: 2
n_layers: 1
hidden: 32
warmstart_steps: 10
"""

pytestmark = pytest.mark.slow
BLOCK = 32768  # the block size of a W&B run file (LevelDB log framing)


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The oracle harness with the tiny model, a short val set and a private warm-start cache."""
    monkeypatch.setenv("EVOTRAINER_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "h"
    shutil.copytree(EXAMPLES / "arithmetic-oracle", root)
    (root / "harness" / "trainer.yaml").write_text(TINY)
    val = (root / "data" / "val.jsonl").read_text().splitlines()
    (root / "data" / "val.jsonl").write_text("\n".join(val[::20]) + "\n")
    return root


def _train(harness: Path, out: Path, steps: int, resume: bool = False, run_id: str = "control") -> None:
    spec = RunSpec(run_id=run_id, harness_dir=harness, out_dir=out, steps=steps, resume=resume)
    result = BACKENDS["local"].run(spec)
    assert result.outcome is Outcome.OK, (result.message, (out / "train.log").read_text()[-2000:])
    deadline = time.time() + 60  # the trainer writes summary.json, then exits: wait until it let go of the folder
    with open(out / LOCK_FILE, "rb") as fh:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.time() < deadline, "the trainer did not exit"
                time.sleep(0.1)


def _scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_session_runs_open_side_by_side_with_verl_names_and_a_resume_draws_each_step_once(
    harness: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "sessions" / "s1" / "runs"
    _train(harness, runs / "control", steps=2)
    _train(harness, runs / "cand", steps=2, run_id="cand")

    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    mux = EventMultiplexer()
    mux.AddRunsFromDirectory(str(runs))  # what `tensorboard --logdir .../runs` lists
    mux.Reload()
    assert set(mux.Runs()) == {"control", "cand"}

    scalars = _scalars(runs / "control")
    recorded = {r.step: r.data for r in read_metrics(runs / "control" / "metrics.jsonl")}
    assert set(scalars) == {name for data in recorded.values() for name in data}  # the same names, none respelled
    assert [s for s, _ in scalars[TRAIN_REWARD_METRIC]] == [1, 2]
    assert [s for s, _ in scalars[STRICT_METRIC]] == [0, 2]
    for step, value in scalars[TRAIN_REWARD_METRIC]:
        assert value == pytest.approx(recorded[step][TRAIN_REWARD_METRIC], rel=1e-6)

    # a resumed run: continue to step 4, then go back to the step-2 checkpoint (as after a kill between
    # checkpoints) and resume again; steps 3-4 are drawn once, from the last attempt
    out = runs / "control"
    saved = (out / "checkpoints" / "last.pt").read_bytes()
    (out / "summary.json").unlink()  # a finished run is collected, not resumed
    _train(harness, out, steps=4, resume=True)
    (out / "checkpoints" / "last.pt").write_bytes(saved)
    (out / "summary.json").unlink()
    _train(harness, out, steps=4, resume=True)
    assert len(list(out.glob("events.out.tfevents.*"))) == 3  # one file per trainer process
    scalars = _scalars(out)
    recorded = {r.step: r.data for r in read_metrics(out / "metrics.jsonl")}
    assert [s for s, _ in scalars[TRAIN_REWARD_METRIC]] == [1, 2, 3, 4]
    assert [s for s, _ in scalars[STRICT_METRIC]] == [0, 2, 4]
    for step, value in scalars[TRAIN_REWARD_METRIC]:
        assert value == pytest.approx(recorded[step][TRAIN_REWARD_METRIC], rel=1e-6)


def _wandb_records(path: Path) -> list[Any]:
    """The records of a W&B run file: W&B's own protobuf records in LevelDB log framing (32 KiB blocks of
    chunks with 7-byte headers, after a 7-byte file header)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, chunk, records = path.read_bytes(), 7, b"", []
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, size, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk += data[pos + 7 : pos + 7 + size]
        pos += 7 + size
        if kind in (1, 4):  # a full record, or a split record's last chunk
            record = pb.Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
    return records


def test_wandb_offline_run_per_training_run_grouped_by_session(
    harness: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "sessions" / "s2" / "runs" / "control"
    _train(harness, out, steps=2)
    (offline,) = (out / "wandb").glob("offline-run-*")
    (run_file,) = offline.glob("run-*.wandb")  # what `wandb sync` uploads
    records = _wandb_records(run_file)
    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (run.run_group, run.display_name, run.project) == ("s2", "control", "evotrainer")
    logged: dict[int, dict[str, float]] = {}
    for r in records:
        if r.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            logged[int(items["_step"])] = items
    recorded = {row.step: row.data for row in read_metrics(out / "metrics.jsonl")}
    assert sorted(logged) == sorted(recorded) == [0, 1, 2]
    for step, data in recorded.items():
        for name, value in data.items():
            assert logged[step][name] == pytest.approx(value, rel=1e-6), (step, name)
    assert _scalars(out)[TRAIN_REWARD_METRIC]  # TensorBoard as well
