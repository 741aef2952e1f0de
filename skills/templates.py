"""Pure text transforms behind template patches: a tiny value-expression language and a YAML key setter.

Expressions appear in a template op as ``"{{ max(2 * current, 64) }}"``. The language is numeric only:
numbers, names (``current`` = the key's present value, plus the skill's ``params``), ``+ - * / //``,
unary minus, parentheses and the functions ``max``, ``min``, ``round``, ``int``. It is parsed with
``ast`` and walked by this module (never ``eval``); anything else is a ``TemplateError``.

``set_yaml_key`` edits one scalar line in place, keeping comments, order and formatting, so the
candidate's diff shows exactly one changed key (the single-factor classifier reads changed lines);
``set_yaml_mapping`` does the same for the scalar entries of one mapping (flow on one line, or block).
``render_answer_protocol`` writes a harness's declared answer protocol into a reward template (the
``write_reward`` op), so no reward a skill writes assumes a tag or a number format. For agentic harnesses,
``render_tool_roles`` writes the declared tools by role (search / act / verify) into a template,
``render_values`` writes computed constants, and ``wrap_function`` appends a wrapper around the harness's
reward function to its own file (the ``wrap_reward`` op).
``score_from_component`` appends to a reward file a wrapper that trains on one of the reward's own
components (the ``score_from_component`` op of exploration probes).
This module is pure: strings in, strings out.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import yaml

from harness.answers import AnswerProtocol

Number = int | float
_EXPR_RE = re.compile(r"^\{\{(.*)\}\}$", re.S)
_KEY_LINE = re.compile(r"^(?P<indent>[ ]*)(?P<key>[A-Za-z_][\w.-]*|\"[^\"]*\"|'[^']*')[ ]*:(?P<sep>[ ]*)(?P<rest>.*)$")
_FUNCS: dict[str, Callable[..., Number]] = {"max": max, "min": min, "round": round, "int": int}


# The line of a reward template that `render_answer_protocol` replaces (a comment, so the template parses).
ANSWER_PROTOCOL_MARK = "# @answer_protocol (filled in from evotrainer.yaml by the write_reward op)"
# The line `render_tool_roles` replaces with the declared tools by role (agentic harnesses).
TOOL_ROLES_MARK = "# @tool_roles (filled in from evotrainer.yaml's env.tools by the write_reward / wrap_reward op)"
# The line `render_values` replaces with NAME = value constants (the wrap_reward op's `values`).
VALUES_MARK = "# @values (filled in by the wrap_reward op from the skill's params and the run's health metrics)"
# The name a wrapper template uses for the harness's reward function (`wrap_function` puts in the real one).
REWARD_FUNCTION = "REWARD_FUNCTION"
_CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")


class TemplateError(ValueError):
    """A template op cannot be applied: bad expression, missing key, non-scalar target, unparsable result."""


def is_expression(value: object) -> bool:
    """Return True when ``value`` is a ``{{ ... }}`` expression string."""
    return isinstance(value, str) and _EXPR_RE.match(value.strip()) is not None


def render_value(value: object, variables: Mapping[str, object]) -> object:
    """Return ``value`` itself, or the number its ``{{ expression }}`` evaluates to."""
    if not is_expression(value):
        return value
    assert isinstance(value, str)
    match = _EXPR_RE.match(value.strip())
    assert match is not None
    return eval_expr(match.group(1).strip(), variables)


def eval_expr(expr: str, variables: Mapping[str, object]) -> Number:
    """Evaluate a numeric expression over numeric ``variables``.

    Raises:
        TemplateError: syntax outside the language, an unknown or non-numeric name, or a non-finite result.
    """
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise TemplateError(f"expression {expr!r} is not valid: {exc.msg}") from None
    result = _eval(tree.body, variables, expr)
    if isinstance(result, float) and not math.isfinite(result):
        raise TemplateError(f"expression {expr!r} is not finite ({result})")
    return result


def _eval(node: ast.expr, variables: Mapping[str, object], expr: str) -> Number:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in variables:
            raise TemplateError(f"expression {expr!r}: unknown name {node.id!r} (known: {sorted(variables)})")
        value = variables[node.id]
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise TemplateError(f"expression {expr!r}: {node.id} = {value!r} is not a number")
        return value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, variables, expr)
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, variables, expr), _eval(node.right, variables, expr)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, ast.Div | ast.FloorDiv):
            if b == 0:
                raise TemplateError(f"expression {expr!r}: division by zero")
            return a / b if isinstance(node.op, ast.Div) else a // b
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCS
        and not node.keywords
        and node.args
    ):
        args = [_eval(a, variables, expr) for a in node.args]
        if node.func.id in ("round", "int") and len(args) != 1:
            raise TemplateError(f"expression {expr!r}: {node.func.id}() takes one argument")
        return _FUNCS[node.func.id](*args)
    raise TemplateError(f"expression {expr!r}: {ast.unparse(node)!r} is not allowed (numbers, names, + - * /, max/min)")


# --- YAML ---------------------------------------------------------------------------------------------


def format_scalar(value: object) -> str:
    """Render a Python scalar as a YAML scalar that PyYAML reads back as the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exp = text.split("e")
            text = f"{mantissa}.0e{exp}"
        return text
    if isinstance(value, str):
        return json.dumps(value)
    if value is None:
        return "null"
    raise TemplateError(f"cannot write {type(value).__name__} {value!r} as a YAML scalar")


def get_yaml_value(text: str, key: str) -> object:
    """Return the value at a dotted ``key`` of a YAML document (KeyError when absent)."""
    node: object = yaml.safe_load(text) or {}
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(key)
        node = node[part]
    return node


def _key_lines(lines: list[str]) -> Iterator[tuple[int, re.Match[str], list[str]]]:
    """Yield (index, match, dotted path as a list) for every key line of block-style YAML, comments skipped."""
    stack: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        match = _KEY_LINE.match(line.rstrip("\n"))
        if match is None or line.lstrip().startswith("#"):
            continue
        indent = len(match["indent"])
        name = match["key"].strip("\"'")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [name]
        stack.append((indent, name))
        yield i, match, path


def _find_key_line(lines: list[str], key: str) -> tuple[int, re.Match[str]] | None:
    """Return the index and match of the line that holds the dotted ``key`` (block-style parents), or None."""
    target = key.split(".")
    return next(((i, match) for i, match, path in _key_lines(lines) if path == target), None)


def set_yaml_key(
    text: str, key: str, new_value: Callable[[object], object], *, create: bool = False, default: object = None
) -> tuple[str, object, object]:
    """Set the scalar at a dotted ``key`` by editing its one line; return (new text, old value, new value).

    ``new_value`` receives the current value (``default`` when the key is absent and ``create`` is set).

    Raises:
        TemplateError: the key is absent (and not ``create``), holds a mapping or list, or the edit does
            not read back as the intended value.
    """
    lines = text.splitlines(keepends=True)
    found = _find_key_line(lines, key)
    if found is None:
        if not create:
            raise TemplateError(f"key {key!r} not found; pass create=true to add it")
        value = new_value(default)
        return _checked(_insert_key(text, key.split("."), value), key, None, value)
    i, match = found
    line = lines[i]
    value_text, comment = _split_comment(match["rest"])
    if not value_text.strip() or value_text.strip()[0] in "[{|>&*!":
        raise TemplateError(f"key {key!r} holds a block or flow collection; set_yaml_key edits scalars only")
    old = get_yaml_value(text, key)
    value = new_value(old)
    sep = match["sep"] or " "
    eol = "\n" if line.endswith("\n") else ""
    lines[i] = f"{match['indent']}{match['key']}:{sep}{format_scalar(value)}{comment}{eol}"
    return _checked("".join(lines), key, old, value)


# A key line inside a block mapping whose keys need not be identifiers (``1: 0.4``, ``"a/b": 2``).
_CHILD_LINE = re.compile(
    r"^(?P<indent>[ ]+)(?P<key>\"[^\"]*\"|'[^']*'|[^\s:#'\"\-][^:#]*?)[ ]*:(?P<sep>[ ]*)(?P<rest>.*)$"
)


def set_yaml_mapping(text: str, key: str, values: Mapping[object, object]) -> tuple[str, object, object]:
    """Set scalar entries of the mapping at a dotted ``key``, keeping comments and layout; return (text, old, new).

    Handles a one-line flow mapping (``weights: {gsm8k: 0.4, math: 0.1}  # note``, rewritten in place with
    its comment) and a block mapping (one ``1: 0.4  # note`` line per entry, each edited in place).
    Only entries that exist are set; entries not named in ``values`` keep their value.

    Raises:
        TemplateError: the key is absent or not a mapping, an entry is missing or not a scalar, the flow
            mapping spans several lines, or the edit does not read back as intended.
    """
    lines = text.splitlines(keepends=True)
    found = _find_key_line(lines, key)
    if found is None:
        raise TemplateError(f"key {key!r} not found")
    old = get_yaml_value(text, key)
    if not isinstance(old, dict):
        raise TemplateError(f"key {key!r} holds {type(old).__name__} {old!r}, not a mapping")
    missing = [k for k in values if k not in old]
    if missing:
        raise TemplateError(f"mapping {key!r} has no entry {missing} (entries: {list(old)})")
    bad = [k for k in values if isinstance(old[k], dict | list)]
    if bad:
        raise TemplateError(f"mapping {key!r}: entries {bad} are collections; only scalars are set")
    new = {**old, **values}
    i, match = found
    value_text, comment = _split_comment(match["rest"])
    stripped = value_text.strip()
    if stripped.startswith("{"):
        if not stripped.endswith("}"):
            raise TemplateError(f"mapping {key!r} is a flow mapping spanning several lines; write it on one line")
        body = ", ".join(f"{format_scalar(k)}: {format_scalar(v)}" for k, v in new.items())
        eol = "\n" if lines[i].endswith("\n") else ""
        lines[i] = f"{match['indent']}{match['key']}:{match['sep'] or ' '}{{{body}}}{comment}{eol}"
    elif not stripped:
        _set_block_entries(lines, i, len(match["indent"]), key, values)
    else:
        raise TemplateError(f"key {key!r}: {stripped!r} is not a one-line flow mapping or a block mapping")
    return _checked("".join(lines), key, old, new)


def _set_block_entries(
    lines: list[str], parent: int, parent_indent: int, key: str, values: Mapping[object, object]
) -> None:
    """Edit the entry lines of the block mapping under ``lines[parent]`` in place."""
    todo = dict(values)
    child_indent: int | None = None
    for j in range(parent + 1, len(lines)):
        raw = lines[j]
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        if indent <= parent_indent:
            break
        child_indent = indent if child_indent is None else child_indent
        match = _CHILD_LINE.match(raw.rstrip("\n"))
        if indent != child_indent or match is None:
            continue
        try:
            entry = yaml.safe_load(match["key"])
        except yaml.YAMLError:
            continue
        if not isinstance(entry, str | int | float) or entry not in todo:
            continue
        value_text, comment = _split_comment(match["rest"])
        if not value_text.strip():
            raise TemplateError(f"mapping {key!r}: entry {entry!r} holds a block; only scalars are set")
        eol = "\n" if raw.endswith("\n") else ""
        lines[j] = (
            f"{match['indent']}{match['key']}:{match['sep'] or ' '}{format_scalar(todo.pop(entry))}{comment}{eol}"
        )
    if todo:
        raise TemplateError(f"mapping {key!r}: entries {list(todo)} are not on lines of their own")


def _split_comment(rest: str) -> tuple[str, str]:
    """Split ``value  # comment`` into the value text and the comment (with its leading spaces)."""
    quote = ""
    for i, ch in enumerate(rest):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'" and not rest[:i].strip():
            quote = ch
        elif ch == "#" and (i == 0 or rest[i - 1] in " \t"):
            j = i
            while j > 0 and rest[j - 1] in " \t":
                j -= 1
            return rest[:j], rest[j:]
    return rest.rstrip(), ""


def _insert_key(text: str, target: list[str], value: object) -> str:
    if len(target) == 1:
        sep = "" if not text or text.endswith("\n") else "\n"
        return f"{text}{sep}{target[0]}: {format_scalar(value)}\n"
    lines = text.splitlines(keepends=True)
    parent = ".".join(target[:-1])
    for i, match, path in _key_lines(lines):
        line, indent = lines[i], len(match["indent"])
        if path == target[:-1] and not _split_comment(match["rest"])[0].strip():
            child = indent + 2
            for nxt in lines[i + 1 :]:
                if nxt.strip() and not nxt.lstrip().startswith("#"):
                    nxt_indent = len(nxt) - len(nxt.lstrip(" "))
                    child = nxt_indent if nxt_indent > indent else child
                    break
            new = f"{' ' * child}{target[-1]}: {format_scalar(value)}\n"
            if not line.endswith("\n"):
                lines[i] = line + "\n"
            lines.insert(i + 1, new)
            return "".join(lines)
    raise TemplateError(f"cannot create {'.'.join(target)!r}: parent mapping {parent!r} not found")


def _checked(text: str, key: str, old: object, value: object) -> tuple[str, object, object]:
    try:
        read_back = get_yaml_value(text, key)
    except (KeyError, yaml.YAMLError) as exc:
        raise TemplateError(f"setting {key!r} produced YAML that does not read back: {exc}") from None
    if read_back != value:
        raise TemplateError(f"setting {key!r} to {value!r} reads back as {read_back!r}")
    return text, old, value


def render_answer_protocol(template: str, answer: AnswerProtocol, observation: str | None = None) -> str:
    """Return ``template`` with its ``ANSWER_PROTOCOL_MARK`` line replaced by ``answer`` as Python constants.

    The constants (``ANSWER_PATTERN``, ``COMPARE``, ``TOLERANCE``, ``FINAL``, ``TOOL_GATE``) are written with
    ``repr``, so any declared pattern becomes a valid literal. ``observation`` (the env's observation
    template, when the harness declares an env and so tools): sets ``TOOL_GATE`` and ``OBSERVATION_END``
    (the template's text after ``{result}``), so an answer only counts after a tool call whose result is in
    the trajectory (``episode_used_a_tool`` in the answer rules).

    Raises:
        TemplateError: the template does not hold the mark exactly once.
    """
    if template.count(ANSWER_PROTOCOL_MARK) != 1:
        raise TemplateError(f"a reward template needs the line {ANSWER_PROTOCOL_MARK!r} exactly once")
    block = "\n".join(
        (
            "# The answer protocol evotrainer.yaml declares (its answer: field), copied in when this file was written.",
            f"ANSWER_PATTERN = {answer.pattern!r}",
            f"COMPARE = {answer.compare!r}  # exact | integer | number",
            f"TOLERANCE = {answer.tolerance!r}  # largest allowed difference (COMPARE number)",
            f"FINAL = {answer.final!r}  # the answer must end the response",
            f"TOOL_GATE = {observation is not None!r}  # the env declares tools: an answer needs a tool call",
            f"OBSERVATION_END = {(observation or '').split('{result}', 1)[-1]!r}  # how a tool's result ends",
        )
    )
    return template.replace(ANSWER_PROTOCOL_MARK, block)


def _replace_mark(template: str, mark: str, block: str) -> str:
    if template.count(mark) != 1:
        raise TemplateError(f"the template needs the line {mark!r} exactly once")
    return template.replace(mark, block)


def render_tool_roles(template: str, roles: Mapping[str, str]) -> str:
    """Return ``template`` with ``TOOL_ROLES_MARK`` replaced by ``SEARCH_TOOLS``, ``ACT_TOOLS``, ``VERIFY_TOOLS``.

    ``roles`` maps each declared tool name to its role (``diagnostics.tool_roles.ToolRole`` values); tools of
    another role are in none of the sets.

    Raises:
        TemplateError: the template does not hold the mark exactly once.
    """

    def names(role: str) -> str:
        chosen = sorted(n for n, r in roles.items() if r == role)
        return f"frozenset({chosen!r})"

    block = "\n".join(
        (
            "# The tools evotrainer.yaml declares (env.tools), by role, copied in when this file was written.",
            f"SEARCH_TOOLS = {names('search')}",
            f"ACT_TOOLS = {names('act')}  # empty: the final answer is the action",
            f"VERIFY_TOOLS = {names('verify')}",
        )
    )
    return _replace_mark(template, TOOL_ROLES_MARK, block)


def render_values(template: str, values: Mapping[str, object]) -> str:
    """Return ``template`` with ``VALUES_MARK`` replaced by one ``NAME = value`` line per numeric value.

    Raises:
        TemplateError: the mark is missing or repeated, a name is not an upper-case constant, or a value is
            not a finite number.
    """
    lines = []
    for name, value in values.items():
        if not _CONSTANT.fullmatch(name):
            raise TemplateError(f"value name {name!r} must be an upper-case constant name")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise TemplateError(f"value {name} = {value!r} is not a finite number")
        lines.append(f"{name} = {value!r}")
    return _replace_mark(template, VALUES_MARK, "\n".join(lines))


def _parse_reward(source: str) -> ast.Module:
    """Parse a reward file for the wrappers below (never run), or raise a `TemplateError` with the line."""
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise TemplateError(f"the reward file does not parse ({exc.msg}, line {exc.lineno})") from None


def wrap_function(source: str, function: str, wrapper: str) -> str:
    """Append ``wrapper`` (its ``REWARD_FUNCTION`` names replaced by ``function``) to ``source``.

    The wrapper keeps the original under a name of its own and rebinds ``function``, so whatever calls
    ``module.function`` gets the wrapper. Its first line (a comment naming the skill) must not be in
    ``source`` already: a file is wrapped by a skill once.

    Raises:
        TemplateError: ``source`` does not parse or defines no top-level ``function``, the wrapper was
            applied already, or the result does not parse.
    """
    if not any(isinstance(n, ast.FunctionDef) and n.name == function for n in _parse_reward(source).body):
        raise TemplateError(f"the reward file defines no top-level function {function!r} to wrap")
    head = wrapper.strip().splitlines()[0] if wrapper.strip() else ""
    if not head.startswith("#"):
        raise TemplateError("a wrapper template starts with a comment line naming its skill")
    if head in source:
        raise TemplateError(f"the reward is wrapped already ({head!r})")
    body = re.sub(rf"\b{REWARD_FUNCTION}\b", function, wrapper.strip())
    out = source.rstrip() + "\n\n\n" + body + "\n"
    try:
        ast.parse(out)
    except SyntaxError as exc:
        raise TemplateError(f"the wrapped reward does not parse ({exc.msg}, line {exc.lineno})") from None
    return out


def as_variables(params: Mapping[str, Any], current: object) -> dict[str, object]:
    """Return the expression variables: the skill's params plus ``current`` when it is a number."""
    out: dict[str, object] = dict(params)
    if isinstance(current, int | float) and not isinstance(current, bool):
        out["current"] = current
    return out


# Appended by `score_from_component`: rebinds the harness's reward function to a wrapper around it.
_COMPONENT_WRAPPER = """

# --- EvoTrainer exploration probe: the score is the reward's own {component!r} component. ---
_EVOTRAINER_COMPONENT = {component!r}
_evotrainer_reward_before_probe = {function}


def {function}(*args, **kwargs):
    \"\"\"The harness's reward with its score replaced by one of its components (every component still logged).\"\"\"
    out = _evotrainer_reward_before_probe(*args, **kwargs)
    if not isinstance(out, dict) or _EVOTRAINER_COMPONENT not in out:
        return out
    return {{**out, "score": float(out[_EVOTRAINER_COMPONENT])}}
"""
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def score_from_component(source: str, function: str, component: str) -> str:
    """Return the reward ``source`` with ``function`` rebound to train on its ``component`` (a dict reward's key).

    The original function stays in the module under another name and is called unchanged; a return value
    that is not a dict holding ``component`` passes through as it was.

    Raises:
        TemplateError: ``function`` is not an identifier, ``component`` is empty, or the source does not
            define ``function`` at the top level (checked with ``ast``, never run).
    """
    if not _IDENTIFIER.match(function):
        raise TemplateError(f"reward function {function!r} is not a Python identifier")
    if not component or len(component) > 64:
        raise TemplateError(f"component name {component!r} must be 1-64 characters")
    defined = {n.name for n in _parse_reward(source).body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    if function not in defined:
        raise TemplateError(f"the reward file defines no top-level function {function!r}")
    return source.rstrip("\n") + "\n" + _COMPONENT_WRAPPER.format(component=component, function=function)
