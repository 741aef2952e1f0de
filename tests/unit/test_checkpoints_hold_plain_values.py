"""The local trainer's checkpoints hold tensors and plain values only, so they load with `weights_only=True`.

`save_checkpoint` stores what a resume needs (random streams as tuples of ints, a filter's state, summary
numbers that may be numpy scalars or enum members) as plain values; `read_checkpoint` loads them back without
unpickling anything else, and a file it will not load is a `CheckpointError` naming the file and the fix.
"""

from __future__ import annotations

import enum
import random
from collections import OrderedDict, defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer_backend.local.artifacts import CheckpointError, plain, read_checkpoint, save_checkpoint


class _Level(enum.IntEnum):
    HIGH = 2


def test_a_training_state_round_trips_under_weights_only(tmp_path: Path) -> None:
    rng = random.Random(7)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    state = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "torch_rng": torch.Generator().get_state(),
        "py_rng": rng.getstate(),
        "state": {
            "step": np.int64(3),
            "filter": defaultdict(int, {"seen": 4}),
            "summary": {"acc": np.float64(0.5), "level": _Level.HIGH},
        },
    }
    path = save_checkpoint(tmp_path, state)
    back = read_checkpoint(path, "init_checkpoint")
    assert isinstance(back["model"], OrderedDict) and torch.equal(back["model"]["weight"], model.weight)
    assert back["state"] == {"step": 3, "filter": {"seen": 4}, "summary": {"acc": 0.5, "level": 2}}
    assert type(back["state"]["summary"]["acc"]) is float and type(back["state"]["summary"]["level"]) is int
    rng.setstate(back["py_rng"])  # the random stream carries exactly
    assert rng.random() == random.Random(7).random()
    restored = torch.optim.AdamW(model.parameters(), lr=1e-3)
    restored.load_state_dict(back["optimizer"])
    assert torch.equal(restored.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


def test_a_value_that_is_not_plain_is_named_by_its_key() -> None:
    with pytest.raises(TypeError, match=r"checkpoint\['state'\]\['filter'\]: a object"):
        plain({"state": {"filter": object()}})


@pytest.mark.parametrize(
    ("content", "expected"),
    [(b"not a checkpoint", "unreadable|refused"), (b"", "unreadable|refused")],
)
def test_an_unreadable_file_names_itself_and_the_fix(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "last.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=expected) as caught:
        read_checkpoint(path, "init_checkpoint")
    assert str(path) in str(caught.value) and "start without it" in str(caught.value)
    with pytest.raises(CheckpointError, match="unreadable"):
        read_checkpoint(tmp_path / "missing.pt", "init_checkpoint")


def test_a_checkpoint_that_is_not_a_dict_is_refused(tmp_path: Path) -> None:
    torch.save([torch.ones(1)], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="holds a list"):
        read_checkpoint(tmp_path / "list.pt", "the run's own checkpoint")
