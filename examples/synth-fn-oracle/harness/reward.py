"""Training reward of the program-synthesis harness (verl's `compute_score` signature), fixed form.

The response is a program: one Python expression in ``x`` (``3*x+4``, ``x%3*2+7``, ``sum(range(x+1))*2+5``).
It is run on every test case of the problem (the ground truth: ``input>output`` pairs joined by ``;``,
inputs the prompt does not show) and scored by the share it passes: the continuous pass ratio of the
paper's coding domain. A program that does not parse, or the wrong type of answer, passes nothing.

Programs are model output, so they are hostile by assumption. They are never given to ``eval``: a small
interpreter below parses the expression language (integers, ``x``, ``+ - * // % **``, unary minus,
parentheses, list literals, indexing, ``sum range abs min max``) and evaluates it under budgets:

- ``STEP_LIMIT`` interpreter steps per test case (one per node; ``sum``/``min``/``max`` over a range cost
  one step per element, charged before the closed form is computed, so ``sum(range(10**12))`` fails
  at once instead of running); a test over its limit fails as a timeout;
- ``PROGRAM_STEP_LIMIT`` steps for all of a program's tests together, and ``PROGRAM_SECONDS`` of wall
  clock as a last resort, so one program can never hold up the reward call of a whole batch;
- integers above ``MAX_INT`` in magnitude, exponents above ``MAX_EXPONENT``, lists longer than
  ``MAX_LIST``, nesting deeper than ``MAX_DEPTH`` and programs longer than ``MAX_PROGRAM_CHARS`` fail
  (``x**10**10`` and ``[1]*10**9`` cost microseconds; there are no strings, so ``'a'*10**9`` does not parse).
"""

from __future__ import annotations

import re
import time

STEP_LIMIT = 2000  # interpreter steps per test case
PROGRAM_STEP_LIMIT = 20000  # steps per program, all test cases together
PROGRAM_SECONDS = 0.5  # wall-clock guard per program (the step limits bind long before it)

# Knobs the EvoTrainer controller may move (docs/harness.md, "Knobs in harness code"). Read from this literal,
# never imported; the reward itself never reads it. A step budget below the safe range fails correct programs
# that loop over a range as timeouts (the strict evaluator allows 10000 steps per test case).
EVOTRAINER_KNOBS = {
    "STEP_LIMIT": {
        "default": 2000,
        "safe": [200, 20000],
        "up": {
            "factors": [4, 16],
            "effects": ["pay_more_right"],
            "why": "correct programs that take more interpreter steps finish instead of failing as timeouts",
        },
    },
    "PROGRAM_STEP_LIMIT": {
        "default": 20000,
        "safe": [2000, 200000],
        "up": {
            "factors": [4],
            "effects": ["pay_more_right"],
            "why": "a correct program's later test cases run instead of failing once the program's budget is spent",
        },
    },
}

# --- interpreter: the same code as in eval/strict.py (tests/unit/test_synth_fn_programs.py checks) ---
MAX_PROGRAM_CHARS = 200
MAX_DEPTH = 40
MAX_INT = 10**18
MAX_EXPONENT = 64
MAX_LIST = 64

_TOKEN = re.compile(r"[ \t]*(?:([0-9]+)|([a-z_][a-z0-9_]*)|(\*\*|//|[-+*%()\[\],]))")
_FUNCTIONS = ("sum", "range", "abs", "min", "max")


class ProgramError(Exception):
    """The program is not in the language, or fails on an input (as a Python exception would)."""


class OutOfSteps(ProgramError):
    """The program ran past its step budget (a timeout)."""


def tokenize(text):
    """Split a program into tokens; anything outside the language is a ProgramError."""
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise ProgramError(f"unexpected character {text[pos]!r}")
        number, name, op = match.groups()
        if number is not None:
            if len(number) > 1 and number[0] == "0":
                raise ProgramError("leading zeros in an integer literal")
            if len(number) > 19:
                raise ProgramError("integer literal too large")
            tokens.append(("int", int(number)))
        elif name is not None:
            if name != "x" and name not in _FUNCTIONS:
                raise ProgramError(f"unknown name {name!r}")
            tokens.append(("name", name))
        else:
            tokens.append(("op", op))
        pos = match.end()
    return tokens


class _Parser:
    """Recursive descent over Python's precedence: + -  <  * // %  <  unary -  <  **  <  [i]  <  atoms."""

    def __init__(self, tokens):
        self.tokens, self.i, self.depth = tokens, 0, 0

    def peek(self):
        return self.tokens[self.i] if self.i < len(self.tokens) else ("end", None)

    def take(self, op=None):
        tok = self.peek()
        if tok[0] == "end" or (op is not None and tok != ("op", op)):
            raise ProgramError(f"expected {op or 'more'}, found {tok[1]!r}")
        self.i += 1
        return tok

    def nested(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ProgramError("nested too deeply")

    def expr(self):
        self.nested()
        node = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            node = ("bin", self.take()[1], node, self.term())
        self.depth -= 1
        return node

    def term(self):
        node = self.unary()
        while self.peek() in (("op", "*"), ("op", "//"), ("op", "%")):
            node = ("bin", self.take()[1], node, self.unary())
        return node

    def unary(self):
        if self.peek() in (("op", "-"), ("op", "+")):
            op = self.take()[1]
            self.nested()
            node = self.unary()
            self.depth -= 1
            return ("neg", node) if op == "-" else node
        return self.power()

    def power(self):
        node = self.postfix()
        if self.peek() == ("op", "**"):
            self.take()
            self.nested()
            node = ("bin", "**", node, self.unary())
            self.depth -= 1
        return node

    def postfix(self):
        node = self.atom()
        while self.peek() == ("op", "["):
            self.take()
            node = ("index", node, self.expr())
            self.take("]")
        return node

    def atom(self):
        kind, value = self.take()
        if kind == "int":
            return ("int", value)
        if kind == "name" and value == "x":
            return ("x",)
        if kind == "name":
            self.take("(")
            args = self.items(")")
            return ("call", value, args)
        if value == "(":
            node = self.expr()
            self.take(")")
            return node
        if value == "[":
            items = self.items("]")
            if not items or len(items) > MAX_LIST:
                raise ProgramError(f"a list literal holds 1 to {MAX_LIST} items")
            return ("list", items)
        raise ProgramError(f"unexpected {value!r}")

    def items(self, close):
        out = []
        if self.peek() != ("op", close):
            out.append(self.expr())
            while self.peek() == ("op", ","):
                self.take()
                out.append(self.expr())
        self.take(close)
        return out


def parse(text):
    """Parse a program into a tree; ProgramError when it is not one expression of the language."""
    if len(text) > MAX_PROGRAM_CHARS:
        raise ProgramError(f"program longer than {MAX_PROGRAM_CHARS} characters")
    parser = _Parser(tokenize(text))
    if not parser.tokens:
        raise ProgramError("empty program")
    node = parser.expr()
    if parser.peek()[0] != "end":
        raise ProgramError(f"unexpected {parser.peek()[1]!r} after the expression")
    return node


class Budget:
    """Interpreter steps left; `tick` raises OutOfSteps when they run out."""

    def __init__(self, steps):
        self.left = steps

    def tick(self, n=1):
        self.left -= n
        if self.left < 0:
            raise OutOfSteps("step budget exhausted")


def _int(value):
    if type(value) is not int:
        raise ProgramError(f"expected an integer, got a {type(value).__name__}")
    if abs(value) > MAX_INT:
        raise ProgramError("integer overflow")
    return value


def _arith(op, a, b):
    a, b = _int(a), _int(b)
    if op == "+":
        return _int(a + b)
    if op == "-":
        return _int(a - b)
    if op == "*":
        return _int(a * b)
    if op in ("//", "%"):
        if b == 0:
            raise ProgramError("division by zero")
        return a // b if op == "//" else a % b
    if b < 0 or b > MAX_EXPONENT:
        raise ProgramError(f"exponent outside 0..{MAX_EXPONENT}")
    if abs(a) > 1 and (abs(a).bit_length() - 1) * b > 62:  # checked before computing: the result exceeds MAX_INT
        raise ProgramError("integer overflow")
    return _int(a**b)


def _sequence(value):
    if type(value) is list or type(value) is range:
        return value
    raise ProgramError(f"expected a list or range, got a {type(value).__name__}")


def _call(name, args, budget):
    if name == "range":
        if not 1 <= len(args) <= 2:
            raise ProgramError("range takes 1 or 2 integers")
        return range(*[_int(a) for a in args])
    if name == "abs":
        if len(args) != 1:
            raise ProgramError("abs takes one integer")
        return abs(_int(args[0]))
    if name == "sum":
        if len(args) != 1:
            raise ProgramError("sum takes one list or range")
        seq = _sequence(args[0])
        budget.tick(len(seq))  # a real interpreter walks every element: charge for it, then compute fast
        if type(seq) is range:
            return _int((seq[0] + seq[-1]) * len(seq) // 2) if len(seq) else 0
        return _int(sum(seq))
    if not args:
        raise ProgramError(f"{name} needs arguments")
    values = _sequence(args[0]) if len(args) == 1 else [_int(a) for a in args]
    budget.tick(len(values))
    if not len(values):
        raise ProgramError(f"{name} of an empty sequence")
    return min(values) if name == "min" else max(values)


def evaluate(node, x, budget):
    """Evaluate a parsed program at input `x` (an int, a list or a range) within `budget`."""
    budget.tick()
    kind = node[0]
    if kind == "int":
        return node[1]
    if kind == "x":
        return x
    if kind == "neg":
        return -_int(evaluate(node[1], x, budget))
    if kind == "bin":
        return _arith(node[1], evaluate(node[2], x, budget), evaluate(node[3], x, budget))
    if kind == "list":
        return [_int(evaluate(item, x, budget)) for item in node[1]]
    if kind == "index":
        seq = _sequence(evaluate(node[1], x, budget))
        i = _int(evaluate(node[2], x, budget))
        if not -len(seq) <= i < len(seq):
            raise ProgramError("index out of range")
        return seq[i]
    return _call(node[1], [evaluate(arg, x, budget) for arg in node[2]], budget)


def parse_tests(text):
    """Parse ``in>out;in>out`` test cases into (int, int) pairs; ProgramError when malformed."""
    tests = []
    for item in str(text).split(";"):
        left, sep, right = item.strip().partition(">")
        try:
            tests.append((int(left), int(right)))
        except ValueError:
            raise ProgramError(f"malformed test case {item!r}") from None
        if not sep:
            raise ProgramError(f"malformed test case {item!r}")
    return tests


def run_tests(program, tests, step_limit, program_steps, seconds):
    """Run `program` (text) on `tests`; return (passed, timed_out, parsed) counts and flag.

    Every test gets at most `step_limit` steps, the program `program_steps` in all and `seconds` of wall
    clock; a test that raises, returns a non-integer, a wrong value or runs out of steps fails.
    """
    try:
        tree = parse(program)
    except (ProgramError, RecursionError):
        return 0, 0, False
    passed = timed_out = 0
    left = program_steps
    deadline = time.monotonic() + seconds
    for x, expected in tests:
        if left <= 0 or time.monotonic() > deadline:
            timed_out += 1
            continue
        budget = Budget(min(step_limit, left))
        try:
            passed += int(_int(evaluate(tree, x, budget)) == expected)
        except OutOfSteps:
            timed_out += 1
        except (ProgramError, RecursionError):
            pass
        left -= min(step_limit, left) - max(budget.left, 0)
    return passed, timed_out, True


# --- end of the interpreter ---


def test_cases(ground_truth, extra_info):
    """The problem's test cases: the ground truth's ``input>output`` pairs."""
    return parse_tests(ground_truth)


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Return the pass ratio over the problem's test cases, plus `parsed` and `timeouts` components."""
    tests = test_cases(ground_truth, extra_info or {})
    passed, timed_out, parsed = run_tests(solution_str.strip(), tests, STEP_LIMIT, PROGRAM_STEP_LIMIT, PROGRAM_SECONDS)
    return {"score": passed / len(tests), "parsed": float(parsed), "timeouts": timed_out / len(tests)}
