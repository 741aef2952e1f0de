"""The `score_from_checks` edit: a reward that pays 1 when every one of its own training-side checks holds.

`agent/decisions/reward_alignment.py` fits the checks; this module writes them into the reward
file as a wrapper around the manifest's reward function, the way `skills.templates.score_from_component`
does: the original function stays in the module under another name and is called unchanged, and every
component is still logged. A bare-number reward becomes ``{"score": value}`` (``score`` names the reward's
own score); a return value that is not a dict holding every checked component passes through as it was. The
checks are written as literals (a name, ``>=`` or ``<=``, a number), checked here, never taken as code.
Pure: text in, text out.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Sequence

from skills.templates import TemplateError

MAX_CHECKS = 4
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COMPONENT = re.compile(r"^[A-Za-z0-9_./:-]{1,64}$")
_WRAPPER = """

# --- EvoTrainer probe: pay 1 when every training-side check of the reward holds. ---
_EVOTRAINER_CHECKS = {checks!r}
_evotrainer_reward_before_checks = {function}


def {function}(*args, **kwargs):
    \"\"\"The harness's reward, paying 1.0 when each of its components passes its check, else 0.0 (every component
    still logged).\"\"\"
    out = _evotrainer_reward_before_checks(*args, **kwargs)
    if isinstance(out, int | float) and not isinstance(out, bool):
        out = {{"score": float(out)}}
    if not isinstance(out, dict) or any(name not in out for name, _, _ in _EVOTRAINER_CHECKS):
        return out
    ok = all(
        (float(out[name]) >= threshold) if op == ">=" else (float(out[name]) <= threshold)
        for name, op, threshold in _EVOTRAINER_CHECKS
    )
    return {{**out, "score": 1.0 if ok else 0.0}}
"""


def score_from_checks(source: str, function: str, checks: Sequence[object]) -> str:
    """Return the reward ``source`` with ``function`` rebound to pay 1.0 when every check holds.

    ``checks``: one to `MAX_CHECKS` entries ``[component, ">=" | "<=", threshold]``.

    Raises:
        TemplateError: a malformed check, ``function`` not an identifier or not defined at the top level of
            ``source`` (checked with ``ast``, never run), or the reward wrapped this way already.
    """
    if not _IDENTIFIER.match(function):
        raise TemplateError(f"reward function {function!r} is not a Python identifier")
    if not isinstance(checks, list | tuple) or not 1 <= len(checks) <= MAX_CHECKS:
        raise TemplateError(f"'checks' must list 1 to {MAX_CHECKS} checks [component, '>=' or '<=', number]")
    parsed = []
    for check in checks:
        if not (isinstance(check, list | tuple) and len(check) == 3):
            raise TemplateError(f"check {check!r}: must be [component, '>=' or '<=', number]")
        name, op, threshold = check
        if not isinstance(name, str) or not _COMPONENT.match(name):
            raise TemplateError(f"check {check!r}: the component must be a name of 1-64 characters")
        if op not in (">=", "<="):
            raise TemplateError(f"check {check!r}: the comparison must be '>=' or '<='")
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not math.isfinite(threshold):
            raise TemplateError(f"check {check!r}: the threshold must be a finite number")
        parsed.append((name, op, float(threshold)))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise TemplateError(f"the reward file cannot be parsed ({type(exc).__name__})") from None
    if function not in {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}:
        raise TemplateError(f"the reward file defines no top-level function {function!r}")
    if "_evotrainer_reward_before_checks" in source:
        raise TemplateError("the reward pays from its checks already")
    return source.rstrip("\n") + "\n" + _WRAPPER.format(checks=tuple(parsed), function=function)
