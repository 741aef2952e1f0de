"""Where candidate code runs: the sandbox modes, defined once (docs/security.md).

`docker` (the default for agent-written code) and `process` (weaker) isolate it; `none` runs it in the
caller's process, for code the user wrote and trusts.
"""

from __future__ import annotations

from typing import Literal, get_args

SandboxMode = Literal["docker", "process", "none"]
SANDBOX_MODES: tuple[str, ...] = get_args(SandboxMode)
