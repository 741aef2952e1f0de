"""One harness, both backends (the manifest names each backend's settings, `--backend` chooses);
session fields for a cluster are checked; a Ray job's id is a function of its run folder and attempt."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from agent.context import Context
from harness.manifest import HarnessError, load_harness
from trainer_backend.ray_jobs import submission_id

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _harness_with(tmp_path: Path, trainer: dict[str, str]) -> Path:
    dst = tmp_path / "h"
    shutil.copytree(EXAMPLES / "arithmetic", dst)
    manifest = yaml.safe_load((dst / "evotrainer.yaml").read_text())
    manifest["trainer"] = trainer
    (dst / "evotrainer.yaml").write_text(yaml.safe_dump(manifest))
    return dst


@pytest.mark.parametrize("example", ["arithmetic", "arithmetic-oracle"])
def test_examples_ship_settings_for_both_backends(example: str) -> None:
    trainer = load_harness(EXAMPLES / example).manifest.trainer
    assert trainer.backend == "local" and trainer.config == trainer.settings("local") == "harness/trainer.yaml"
    assert trainer.settings("verl") == "harness/verl.yaml"


def test_the_one_backend_form_still_reads(tmp_path: Path) -> None:
    trainer = load_harness(_harness_with(tmp_path, {"backend": "local", "config": "harness/trainer.yaml"})).manifest
    assert trainer.trainer.settings("local") == "harness/trainer.yaml" and trainer.trainer.settings("verl") is None


def test_config_follows_the_default_backend(tmp_path: Path) -> None:
    h = _harness_with(tmp_path, {"backend": "verl", "local": "harness/trainer.yaml", "verl": "harness/verl.yaml"})
    assert load_harness(h).manifest.trainer.config == "harness/verl.yaml"


@pytest.mark.parametrize(
    ("trainer", "message"),
    [
        ({"backend": "local", "config": "harness/trainer.yaml", "local": "harness/verl.yaml"}, "name different files"),
        ({"backend": "verl", "local": "harness/trainer.yaml"}, "add verl: <file>"),
        ({"backend": "local", "local": "harness/trainer.yaml", "verl": "harness/nope.yaml"}, "'trainer.verl'"),
    ],
)
def test_inconsistent_trainer_settings_are_refused_naming_the_field(
    tmp_path: Path, trainer: dict[str, str], message: str
) -> None:
    with pytest.raises(HarnessError, match=r"evotrainer\.yaml") as err:
        load_harness(_harness_with(tmp_path, trainer))
    assert message in str(err.value)


@pytest.mark.parametrize("address", ["ray://head:10001", "head:8265", "http://head", "ftp://head:8265"])
def test_a_ray_address_must_be_a_jobs_url(address: str) -> None:
    with pytest.raises(ValueError, match="--ray-address http://HEAD:PORT"):
        Context(ray_address=address)


def test_a_cluster_runs_every_run_of_an_iteration_at_once() -> None:
    assert Context().cluster_parallel_runs is None  # this machine: the session's one-per-core limit
    assert Context(ray_address="http://127.0.0.1:8265", max_candidates=5).cluster_parallel_runs == 6
    assert Context(ray_address="https://head:443", max_candidates=1, replicates=3).cluster_parallel_runs == 6
    with pytest.raises(ValueError, match=r"--backend local \| verl"):
        Context(backend="trl")  # type: ignore[arg-type]


def test_submission_ids_depend_only_on_run_folder_and_attempt(tmp_path: Path) -> None:
    a = submission_id("s1-i1-control", tmp_path / "runs" / "s1-i1-control", 1)
    assert a == submission_id("s1-i1-control", tmp_path / "runs" / ".." / "runs" / "s1-i1-control", 1)
    assert a.startswith("evotrainer-s1-i1-control-") and a.endswith("-a1")
    assert a != submission_id("s1-i1-control", tmp_path / "other" / "s1-i1-control", 1)  # another folder
    assert a != submission_id("s1-i1-control", tmp_path / "runs" / "s1-i1-control", 2)  # the next attempt
