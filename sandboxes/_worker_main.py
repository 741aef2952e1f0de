"""Sandbox worker: imports the harness's reward/filter/environment code and answers framed requests.

Stdlib + numpy only. Ops: ``rewards``, ``filter`` and, for an agentic harness, ``open`` (one environment per
data row, ``make_env(row)``), ``env_calls`` (one batch of ``env.call(tool, arguments)``, each in its episode's
environment) and ``close`` (forget episodes). The environment objects live here, in the sandbox, for the
whole run; the trusted side only ever sees their JSON results.

Runs inside the sandbox container (baked into the image at /opt/evotrainer/worker.py, Debian's python3)
or, in the weaker process fallback, as a child process of the trusted side. It is not imported by the
trusted side; `sandboxes/worker.py` is its counterpart.

Channel: requests arrive on the original stdin as `<u32 length><JSON>`; responses leave on the original
stdout as `MAGIC <16-byte session token> <u32 length><JSON>`. Before any candidate code is imported both
descriptors are moved away: fd 0 becomes /dev/null and fd 1 is pointed at stderr, so whatever the candidate
prints (forged frames, "PASS", metric lines) lands in the stderr log, never in the response channel.
"""

import importlib.util
import json
import os
import struct
import sys
import traceback
from typing import Any

MAGIC = b"EVO1"
_LEN = struct.Struct(">I")
MAX_REQUEST_BYTES = 256 * 1024 * 1024
# Must equal harness.env.MAX_RESULT_CHARS (the worker imports nothing from the trusted side): a tool result
# longer than this is cut here to one character over, so the trusted side cuts and marks it exactly as it
# does in-process, and a flooding environment costs neither the channel nor the trainer's memory.
MAX_RESULT_CHARS = 2000
MAX_EPISODES = 100_000  # environments alive at once; more is a runaway caller, refused
# The env module's isolation declaration (harness.env.ISOLATION_NAME, RESET_NAME, ISOLATIONS: repeated here
# because the worker imports nothing from the trusted side).
ISOLATION_NAME = "EVOTRAINER_ENV_ISOLATION"
RESET_NAME = "EVOTRAINER_ENV_RESET"
ISOLATIONS = ("shared", "fresh_module")


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _to_json(value: Any) -> Any:
    """Fallback for json.dumps: numpy scalars and arrays become Python values; anything else is refused."""
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"value of type {type(value).__name__} is not JSON-serialisable")


class Worker:
    """Loads entry points from the harness and runs calls on them."""

    def __init__(self, harness_root: str) -> None:
        self.root = os.path.realpath(harness_root)
        self.functions: dict[str, tuple[Any, str]] = {}
        self.episodes: dict[int, Any] = {}
        self.next_episode = 0
        self.env_module: Any = None
        self.env_entry = ""
        self.isolation = "shared"
        self.reset: Any = None

    def load(self, role: str, entry: str) -> dict[str, str] | None:
        try:
            module, fn = self.import_entry(role, entry)
            if role == "env":
                self.env_module = module
                self.isolation, self.reset = self.declared(module)
        except BaseException as exc:  # candidate code may raise anything, even SystemExit
            return self.error(exc, entry.partition(":")[0], "import")
        self.functions[role] = (fn, entry.partition(":")[0])
        return None

    def import_entry(self, role: str, entry: str) -> tuple[Any, Any]:
        """Execute the entry's file as a new module object; return it and the entry's function."""
        rel, _, name = entry.partition(":")
        path = os.path.join(self.root, rel)
        if self.root not in sys.path:
            sys.path.insert(0, self.root)
        spec = importlib.util.spec_from_file_location(f"evotrainer_harness_{role}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {rel}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, name)
        if not callable(fn):
            raise TypeError(f"{rel}:{name} is not callable")
        return module, fn

    @staticmethod
    def declared(module: Any) -> tuple[str, Any]:
        """The env module's isolation and its reset function (None when it declares none)."""
        isolation = getattr(module, ISOLATION_NAME, "shared")
        if isolation not in ISOLATIONS:
            raise ValueError(f"{ISOLATION_NAME} = {isolation!r}: use one of {', '.join(ISOLATIONS)}")
        reset_name = getattr(module, RESET_NAME, None)
        if reset_name is None:
            return isolation, None
        reset = getattr(module, str(reset_name), None) if isinstance(reset_name, str) else None
        if not callable(reset):
            raise ValueError(f"{RESET_NAME} = {reset_name!r} must name a module-level function of the env module")
        return isolation, reset

    def error(self, exc: BaseException, default_path: str, kind: str) -> dict[str, str]:
        """Describe `exc` with the harness file it was raised in (the innermost frame inside the harness)."""
        path = default_path
        for frame in traceback.extract_tb(exc.__traceback__):
            real = os.path.realpath(frame.filename)
            if real.startswith(self.root + os.sep):
                path = os.path.relpath(real, self.root)
        if isinstance(exc, SyntaxError) and exc.filename:
            real = os.path.realpath(exc.filename)
            if real.startswith(self.root + os.sep):
                path = os.path.relpath(real, self.root)
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
        return {"kind": kind, "type": type(exc).__name__, "message": str(exc)[:2000], "path": path, "traceback": tb}

    def rewards(self, batch: list[dict[str, Any]]) -> dict[str, Any]:
        fn, rel = self.functions["reward"]
        values = []
        for item in batch:
            try:
                values.append(
                    fn(
                        data_source=item.get("data_source"),
                        solution_str=item.get("solution_str"),
                        ground_truth=item.get("ground_truth"),
                        extra_info=item.get("extra_info"),
                    )
                )
            except BaseException as exc:
                return {"ok": False, "error": self.error(exc, rel, "call")}
        return {"ok": True, "values": values, "_path": rel}

    def filter(self, group_rewards: list[list[float]], state: dict[str, Any]) -> dict[str, Any]:
        if "filter" not in self.functions:
            err = {"kind": "config", "type": "ValueError", "message": "no filter loaded", "path": ""}
            return {"ok": False, "error": err}
        fn, rel = self.functions["filter"]
        try:
            keep = fn(group_rewards, state)
        except BaseException as exc:
            return {"ok": False, "error": self.error(exc, rel, "call")}
        return {"ok": True, "keep": keep, "state": state, "_path": rel}

    def open(self, rows: list[Any], isolation: Any = None) -> dict[str, Any]:
        """Make one environment per row; answer their episode ids.

        Honours the env module's declaration: a fresh module per episode (``fresh_module``), its reset hook
        before every `make_env` (``shared`` with a reset). `isolation` overrides the declared isolation (the
        trusted side's replay builds its reference environments with ``fresh_module``)."""
        if "env" not in self.functions:
            return {"ok": False, "error": {"kind": "config", "type": "ValueError", "message": "no env loaded"}}
        if len(self.episodes) + len(rows) > MAX_EPISODES:
            message = f"more than {MAX_EPISODES} live episodes"
            return {"ok": False, "error": {"kind": "protocol", "type": "ValueError", "message": message}}
        fn, rel = self.functions["env"]
        isolation = isolation if isolation in ISOLATIONS else self.isolation
        ids = []
        for row in rows:
            try:
                if isolation == "fresh_module":
                    module, make_env = self.import_entry("env", self.env_entry)
                    _, reset = self.declared(module)
                else:
                    make_env, reset = fn, self.reset
                if reset is not None:
                    reset()
                env = make_env(row)
            except BaseException as exc:
                return {"ok": False, "error": self.error(exc, rel, "call")}
            self.next_episode += 1
            self.episodes[self.next_episode] = env
            ids.append(self.next_episode)
        return {"ok": True, "episodes": ids, "_path": rel}

    def env_calls(self, calls: list[Any]) -> dict[str, Any]:
        """Run `[episode, tool, arguments]` calls; answer each result (long texts cut, see MAX_RESULT_CHARS)."""
        if "env" not in self.functions:
            return {"ok": False, "error": {"kind": "config", "type": "ValueError", "message": "no env loaded"}}
        rel = self.functions["env"][1]
        values = []
        for episode, tool, arguments in calls:
            env = self.episodes.get(episode)
            if env is None:
                message = f"episode {episode} is not open"
                return {"ok": False, "error": {"kind": "protocol", "type": "KeyError", "message": message}}
            try:
                values.append(_cut(env.call(tool, arguments)))
            except BaseException as exc:
                return {"ok": False, "error": self.error(exc, rel, "call")}
        return {"ok": True, "values": values, "_path": rel}

    def close(self, episodes: list[Any]) -> dict[str, Any]:
        for episode in episodes:
            self.episodes.pop(episode, None)
        return {"ok": True}


def _cut(value: Any) -> Any:
    """A result text (or a result dict's text) cut to MAX_RESULT_CHARS + 1 characters; anything else as is."""
    if isinstance(value, str):
        return str.__str__(value)[: MAX_RESULT_CHARS + 1]
    if type(value) is dict and isinstance(value.get("result"), str):
        return {**value, "result": str.__str__(value["result"])[: MAX_RESULT_CHARS + 1]}
    return value


def main() -> int:
    chan_in = os.dup(0)
    chan_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # candidate prints go to stderr from here on
    sys.stdout = sys.stderr

    def send(token: bytes, obj: dict[str, Any], path: str = "") -> None:
        try:
            body = json.dumps(obj, allow_nan=True, default=_to_json).encode()
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            err = {"kind": "unserialisable", "type": type(exc).__name__, "message": str(exc)[:2000], "path": path}
            body = json.dumps({"ok": False, "error": err, "id": obj.get("id")}).encode()
        os.write(chan_out, MAGIC + token + _LEN.pack(len(body)) + body)

    header = _read_exact(chan_in, 4)
    if header is None:
        return 0
    init = json.loads(_read_exact(chan_in, _LEN.unpack(header)[0]) or b"null")
    token = bytes.fromhex(init["token"])
    del init["token"]
    worker = Worker(init["harness_root"])
    error = worker.load("reward", init["reward"])
    if error is None and init.get("filter"):
        error = worker.load("filter", init["filter"])
    if error is None and init.get("env"):
        worker.env_entry = init["env"]
        error = worker.load("env", init["env"])
    send(token, {"ok": error is None, "error": error, "python": sys.version.split()[0]})
    while True:
        header = _read_exact(chan_in, 4)
        if header is None:
            return 0
        (size,) = _LEN.unpack(header)
        if size > MAX_REQUEST_BYTES:
            return 2
        body = _read_exact(chan_in, size)
        if body is None:
            return 0
        request = json.loads(body)
        if request["op"] == "rewards":
            response = worker.rewards(request["batch"])
        elif request["op"] == "filter":
            response = worker.filter(request["group_rewards"], request["state"])
        elif request["op"] == "open":
            response = worker.open(request["rows"], request.get("isolation"))
        elif request["op"] == "env_calls":
            response = worker.env_calls(request["calls"])
        elif request["op"] == "close":
            response = worker.close(request["episodes"])
        else:
            response = {"ok": False, "error": {"kind": "protocol", "type": "ValueError", "message": request["op"]}}
        response["id"] = request["id"]
        send(token, response, response.pop("_path", ""))


if __name__ == "__main__":
    sys.exit(main())
