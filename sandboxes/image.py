"""The sandbox image, built offline: debootstrap a minimal Debian, `docker import` it, bake the worker in.

No image registry is needed (none may be reachable). The steps:

1. `debootstrap --variant=minbase --include=python3,python3-numpy bookworm <rootfs> <mirror>`, the mirror
   read from the host's apt sources at run time. The rootfs is trimmed (apt caches, docs) and cached as a
   tarball under `~/.cache/evotrainer/sandbox/`, keyed by suite + package list + layout.
2. `docker import` of that tarball as `evotrainer-sandbox-base:<rootfs key>`.
3. A one-instruction `docker build` (`COPY`, no `RUN`, no network) that bakes the worker script in at
   `WORKER_PATH_IN_IMAGE`. The worker is baked, not mounted, so the image tag names exactly the code that
   answers inside it: `evotrainer-sandbox:<hash of rootfs key + worker source + Dockerfile>`.

A second call finds the tag and returns at once; editing `_worker_main.py` changes the tag, so the next
`ensure_image` rebuilds only steps 3 (the rootfs tarball and base image are reused).
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SUITE = "bookworm"
PACKAGES: tuple[str, ...] = ("python3", "python3-numpy")
# Mount points that exist in the image (the root fs is read-only at run time). Docker 20.10 gives a tmpfs the
# mode of the directory it covers, so /scratch is 1777 in the rootfs itself.
_LAYOUT: tuple[str, ...] = ("scratch", "results", "harness", "inputs", "code", "opt/evotrainer")
_WORLD_WRITABLE = "scratch"
_TRIM: tuple[str, ...] = (
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
)

IMAGE_REPO = "evotrainer-sandbox"
BASE_REPO = "evotrainer-sandbox-base"
WORKER_SOURCE = Path(__file__).with_name("_worker_main.py")
WORKER_PATH_IN_IMAGE = "/opt/evotrainer/worker.py"
_DOCKERFILE = "FROM {base}\nCOPY worker.py " + WORKER_PATH_IN_IMAGE + "\n"

CACHE_DIR = Path.home() / ".cache" / "evotrainer" / "sandbox"
APT_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))

Log = Callable[[str], None]


def _noop(_: str) -> None:
    return None


def rootfs_key() -> str:
    """Return the cache key of the rootfs tarball: suite, variant, package list and layout."""
    spec = f"{SUITE}|minbase|{','.join(sorted(PACKAGES))}|{','.join(_LAYOUT)}|{_WORLD_WRITABLE}|{','.join(_TRIM)}"
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def base_tag() -> str:
    """Return the tag of the imported (worker-less) base image."""
    return f"{BASE_REPO}:{rootfs_key()}"


def image_tag() -> str:
    """Return the tag the sandbox image must have; building is not needed to know it."""
    h = hashlib.sha256()
    h.update(rootfs_key().encode())
    h.update(_DOCKERFILE.encode())
    h.update(WORKER_SOURCE.read_bytes())
    return f"{IMAGE_REPO}:{h.hexdigest()[:16]}"


def debian_mirror(sources: tuple[Path, ...] = APT_SOURCES) -> str:
    """Return the host's Debian mirror URI for `SUITE` (deb822 `.sources` or one-line `sources.list`)."""
    for path in sources:
        if not path.is_file():
            continue
        text = path.read_text()
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = dict(re.findall(r"^(\w[\w-]*):\s*(.+)$", stanza, flags=re.M))
                if SUITE in fields.get("Suites", "").split() and "URIs" in fields:
                    return fields["URIs"].split()[0]
        else:
            for line in text.splitlines():
                m = re.match(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m and m.group(2) == SUITE:
                    return m.group(1)
    raise ValueError(f"no apt source for suite {SUITE!r} in {', '.join(map(str, sources))}; add one or build elsewhere")


def rootfs_tarball(force: bool = False, log: Log = _noop) -> Path:
    """Return the cached rootfs tarball, running debootstrap when it is missing (or `force`)."""
    target = CACHE_DIR / f"rootfs-{rootfs_key()}.tar"
    if target.is_file() and not force:
        return target
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed (apt-get install debootstrap); it builds the sandbox rootfs")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    mirror = debian_mirror()
    with tempfile.TemporaryDirectory(dir=CACHE_DIR, prefix="build-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(rootfs), mirror]
        log(f"running: {' '.join(cmd)}")
        t0 = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            log_file = CACHE_DIR / "debootstrap-failed.log"
            log_file.write_text(proc.stdout + proc.stderr)
            raise RuntimeError(f"debootstrap failed (exit {proc.returncode}); see {log_file}")
        log(f"debootstrap done in {time.monotonic() - t0:.0f}s")
        for rel in _TRIM:
            shutil.rmtree(rootfs / rel, ignore_errors=True)
        for rel in _LAYOUT:
            (rootfs / rel).mkdir(parents=True, exist_ok=True)
        (rootfs / _WORLD_WRITABLE).chmod(0o1777)
        partial = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(partial), "."], check=True)
        partial.replace(target)
    return target


def _has_image(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def build_image(client: Any, force: bool = False, log: Log = _noop) -> str:
    """Build the sandbox image offline and return its tag (a no-op when the tag exists and not `force`).

    `force` re-runs every step, debootstrap included.
    """
    tag = image_tag()
    if not force and _has_image(client, tag):
        return tag
    base = base_tag()
    if force or not _has_image(client, base):
        tarball = rootfs_tarball(force=force, log=log)
        repo, _, version = base.partition(":")
        log(f"importing {tarball} as {base}")
        client.api.import_image_from_file(str(tarball), repository=repo, tag=version)
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (
            ("Dockerfile", _DOCKERFILE.format(base=base).encode()),
            ("worker.py", WORKER_SOURCE.read_bytes()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    log(f"building {tag}")
    client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, network_mode="none", pull=False)
    return tag


def ensure_image(client: Any, log: Log = _noop) -> str:
    """Return the sandbox image tag, building it first if it is missing."""
    return build_image(client, force=False, log=log)
