"""Image tag and mirror derivation, result-file reading, staging and the `sandbox` CLI (no Docker)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from harness.failures import InfraError
from sandboxes import docker as sandbox_docker
from sandboxes import image
from sandboxes.docker import SandboxConfig, read_results, readable_by_sandbox, stage_copy


def test_image_tag_covers_the_baked_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tag = image.image_tag()
    assert tag == image.image_tag() and tag.startswith("evotrainer-sandbox:")
    edited = tmp_path / "_worker_main.py"
    edited.write_bytes(image.WORKER_SOURCE.read_bytes() + b"\n# edited\n")
    monkeypatch.setattr(image, "WORKER_SOURCE", edited)
    assert image.image_tag() != tag


def test_rootfs_key_covers_the_package_list(monkeypatch: pytest.MonkeyPatch) -> None:
    key = image.rootfs_key()
    monkeypatch.setattr(image, "PACKAGES", (*image.PACKAGES, "python3-scipy"))
    assert image.rootfs_key() != key


def test_mirror_is_read_from_either_apt_format(tmp_path: Path) -> None:
    deb822 = tmp_path / "debian.sources"
    deb822.write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n"
    )
    one_line = tmp_path / "sources.list"
    one_line.write_text("# comment\ndeb [arch=amd64] http://other.example/debian bookworm main\n")
    assert image.debian_mirror((deb822,)) == "http://mirror.example/debian"
    assert image.debian_mirror((tmp_path / "missing.sources", one_line)) == "http://other.example/debian"
    with pytest.raises(ValueError, match="bookworm"):
        image.debian_mirror((tmp_path / "missing.sources",))


def test_results_reader_skips_symlinks_and_honours_caps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "host_secret"
    secret.write_text("host data")
    results = tmp_path / "results"
    results.mkdir()
    (results / "out.json").write_text('{"ok": 1}')
    (results / "leak").symlink_to(secret)
    (results / "sub").mkdir()
    files, note = read_results(results)
    assert files == {"out.json": b'{"ok": 1}'}
    assert "leak (not a regular file)" in note and "sub (not a regular file)" in note
    monkeypatch.setattr(sandbox_docker, "RESULTS_MAX_BYTES", 4)
    files, note = read_results(results)
    assert files == {} and "out.json (over the" in note


def test_stage_copy_makes_a_readable_snapshot_without_excluded_paths(tmp_path: Path) -> None:
    src = tmp_path / "h"
    (src / "harness").mkdir(parents=True)
    (src / "eval").mkdir()
    (src / "harness" / "reward.py").write_text("x = 1\n")
    (src / "eval" / "strict.py").write_text("secret\n")
    (src / "harness" / "reward.py").chmod(0o600)
    src.chmod(0o700)
    assert not readable_by_sandbox(src)
    staging = tmp_path / "stage"
    staging.mkdir()
    copy = stage_copy(src, staging, exclude=("eval",))
    assert readable_by_sandbox(copy)
    assert (copy / "harness" / "reward.py").read_text() == "x = 1\n"
    assert not (copy / "eval").exists()
    assert os.stat(copy / "harness" / "reward.py").st_mode & 0o777 == 0o644


def test_config_rejects_unworkable_limits() -> None:
    with pytest.raises(ValueError, match="pids_limit"):
        SandboxConfig(pids_limit=1)
    with pytest.raises(ValueError, match="scratch_mb"):
        SandboxConfig(mem_limit_mb=64, scratch_mb=64)


def test_cli_info_reports_an_unreachable_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_engine() -> None:
        raise InfraError("no Docker engine reachable: test")

    monkeypatch.setattr(sandbox_docker, "engine_client", no_engine)
    result = CliRunner().invoke(app, ["sandbox", "info"])
    assert result.exit_code == 1
    assert image.image_tag() in result.output
    assert "unreachable" in result.output and "weaker isolation" in result.output
