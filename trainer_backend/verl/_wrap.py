"""Run a trainer command and record its exit code in a file, so any process can learn how it ended.

Usage: python -m trainer_backend.verl._wrap RC_FILE -- ARGV...

The wrapper leads the run's process group; `stop` signals the group, the child gets SIGTERM, the wrapper
ignores it, waits for the child and writes `{"rc": <code>}` (negative = killed by that signal).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from harness.atomic import write_atomic


def main(argv: list[str]) -> int:
    """Run argv[2:] (after `--`), write the exit code to argv[0], return it."""
    rc_path, sep, command = argv[0], argv[1], argv[2:]
    assert sep == "--" and command, "usage: _wrap RC_FILE -- ARGV..."
    child = subprocess.Popen(command)
    signal.signal(signal.SIGTERM, lambda *_: None)  # the group's SIGTERM also reached the child: wait for it
    rc = child.wait()
    write_atomic(Path(rc_path), json.dumps({"rc": rc}))
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
