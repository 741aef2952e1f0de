"""Shared fixtures: service discovery with honest skips (or failures in CI, where services must exist)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

REQUIRE_SERVICES = os.environ.get("EVOTRAINER_REQUIRE_SERVICES") == "1"


def _unavailable(reason: str) -> None:
    """Skip locally; fail under `make test`/CI, where every service must be up."""
    if REQUIRE_SERVICES:
        pytest.fail(f"required service unavailable: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_url() -> str:
    """SQLAlchemy URL of an empty-able Postgres database for tests (from `.ci/services.sh`)."""
    url = os.environ.get("EVOTRAINER_TEST_PG_URL")
    if not url:
        _unavailable('EVOTRAINER_TEST_PG_URL is not set (run: eval "$(bash .ci/services.sh | tail -n 1)")')
    return url  # type: ignore[return-value]


@pytest.fixture(scope="session")
def docker_client():  # type: ignore[no-untyped-def]
    """A docker SDK client connected to a running engine."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # any failure here means "no engine"
        _unavailable(f"no Docker engine reachable: {exc}")
    return client


@pytest.fixture(scope="session")
def git_available() -> None:
    """Git must be on PATH."""
    if shutil.which("git") is None:
        _unavailable("git is not installed")
    subprocess.run(["git", "--version"], check=True, capture_output=True)


@pytest.fixture(scope="session")
def hf_arith_folder(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A real Hugging Face model folder (random-init Qwen2, BPE tokenizer trained on the arithmetic data)."""
    from pathlib import Path

    from hf_models import harness_texts, make_model_folder

    example = Path(__file__).resolve().parents[1] / "examples" / "arithmetic-oracle"
    return make_model_folder(tmp_path_factory.mktemp("hf") / "qwen2-arith", harness_texts(example))


@pytest.fixture(scope="session")
def smollm2_folder():  # type: ignore[no-untyped-def]
    """The SmolLM2-135M-Instruct folder from the models cache (`make test` fetches it first, this
    fetches it now when the cache lacks it, ~1 min on 2 cores)."""
    from trainer_backend import models

    try:
        return models.ensure("smollm2-135m-instruct", log=print)
    except models.ModelError as exc:
        _unavailable(f"cannot fetch smollm2-135m-instruct: {exc}")
